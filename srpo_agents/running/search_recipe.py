"""The tiny policy's search track recipe: the settings of SRPO-Search-v0's warm starts
(compact world, one-hop questions, two rounds, the top passage per query) that
``benchmarks/learning/search_track.py`` builds into the committed ``benchmarks/warmstarts`` and
that the harness's search presets and ``make demo`` start from. Here in the library so
the demo reads the same recipe the benchmarks built."""

from __future__ import annotations

from pathlib import Path

READERS = {"search_answer_verify": ("answerer", "verifier"), "parallel": ("aggregator",),
           "routed": ("aggregator",)}
"""The roles of each workflow's focus phase: those who copy the answer out of a passage."""

INIT_FROM = {"routed": "search_answer_verify", "parallel": "search_answer_verify"}
"""Workflows whose warm start begins from another's finished one in the committed folder
(``warmstart_init``): the routed team's aggregator reads two searchers' passages, and
from a fresh model its copy had not appeared after 700 focus steps (search_track.md);
search_answer_verify's policy already copies the name into a query and the answer out
of a passage."""

WARM_ROOT = "benchmarks/warmstarts"
"""The committed warm starts, relative to the repository root (where scripts run)."""

RECIPE = {"warmstart_first_steps": 1500, "warmstart_first_target": 0.3,
          "warmstart_steps": 400, "warmstart_focus_steps": 1000, "warmstart_focus_target": 0.3,
          "warmstart_minutes": 60.0, "top_k": 1}
"""The track's warm start (search_track.md: tags 0.993, gold on top 0.750, avg@1 0.435
on 200 held-out one-hop questions for search_answer_verify)."""


def track_settings(workflow: str, warmstart_steps: int = RECIPE["warmstart_steps"],
                   minutes: float = RECIPE["warmstart_minutes"],
                   first_steps: int = RECIPE["warmstart_first_steps"],
                   top_k: int = RECIPE["top_k"],
                   focus_steps: int = RECIPE["warmstart_focus_steps"],
                   focus_target: float = RECIPE["warmstart_focus_target"],
                   first_target: float = RECIPE["warmstart_first_target"]) -> dict:
    """The TrainConfig fields of SRPO-Search-v0's track (world, agents, warm start) for
    ``workflow``, by default the recipe's: what the harness's search presets start from."""
    return {"n_agents": 2, "max_turns": 2, "model": "tiny",
            "max_new_tokens": 32, "warmstart_steps": warmstart_steps,
            "warmstart_decay": True, "warmstart_minutes": minutes, "warmstart_target": 1.0,
            "warmstart_first_roles": ("searcher",) if first_steps else (),
            "warmstart_first_steps": first_steps,
            "warmstart_first_target": first_target if first_steps else 1.0,
            "warmstart_focus_roles": READERS[workflow] if focus_steps else (),
            "warmstart_focus_steps": focus_steps,
            "warmstart_focus_target": focus_target if focus_steps else 1.0,
            "warmstart_init": (str(warm_folder(WARM_ROOT, INIT_FROM[workflow]) / "warmstart")
                               if workflow in INIT_FROM else ""),
            "extra_env_kwargs": {"hops": [1], "top_k": top_k}}


def warm_folder(out: str | Path, workflow: str) -> Path:
    """Where a workflow's warm start is built: the harness's pair folder name."""
    return Path(out) / f"SRPO-Search-v0-{workflow}"
