"""The run files of ``examples/``: each documented setting as ``srpo train --config``
reads it, written from the code that defines it, so a file cannot drift from its
setting (``tests/test_examples.py`` checks each against the code).

    python -m srpo_bench.examples        # rewrite examples/*.yaml

- ``demo.yaml``: ``make demo``'s run (``srpo_agents.running.demo``), from the committed
  start point;
- ``compare-<env>-<workflow>.yaml``: the comparison's team pairs (the harness's
  ``compare`` preset), with srpo (``--algo`` picks a baseline); the tiny model's warm
  start is built on first use, with the harness's settings;
- ``search-compare.yaml``: the search comparison's pair (``search_compare``), from the
  committed warm start.

A file holds only what differs from ``srpo train``'s defaults, plus the env, workflow,
algorithm and model. Paths are relative to the repository root, where the commands run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from srpo_agents.config import TrainConfig
from srpo_agents.running.demo import COMMITTED_START, REPO, demo_config
from srpo_agents.running.search_recipe import WARM_ROOT, warm_folder
from srpo_agents.tiny.config import tiny_run
from srpo_bench.harness.presets import COMPARE_TEAMS, PRESETS
from srpo_bench.harness.runner import pair_settings

EXAMPLES = REPO / "examples"
ALWAYS = ("env", "workflow", "algo", "model")


def short(env: str) -> str:
    return env.removeprefix("SRPO-").removesuffix("-v0").lower()


def example_configs() -> dict[str, TrainConfig]:
    start = (COMMITTED_START / "warmstart").relative_to(REPO)
    configs = {"demo": demo_config("runs/demo", 0, model=str(start))}
    for env, workflow in COMPARE_TEAMS:
        wf, settings, _ = pair_settings(PRESETS["compare"], env, workflow, run=True)
        name = f"compare-{short(env)}-{workflow}"
        configs[name] = TrainConfig(**tiny_run(settings, env=env, workflow=wf, algo="srpo",
                                               seed=0, save_every=0, out=f"runs/{name}"))
    env, workflow = PRESETS["search_compare"]["pairs"][0]
    wf, settings, _ = pair_settings(PRESETS["search_compare"], env, workflow, run=True)
    start = warm_folder(Path(WARM_ROOT), workflow) / "warmstart"
    configs["search-compare"] = TrainConfig(**tiny_run(
        settings, env=env, workflow=wf, algo="srpo", seed=0, save_every=0,
        model=str(start), compact_prompts=True, out="runs/search-compare"))
    return configs


def run_file(config: TrainConfig) -> dict[str, Any]:
    """``config`` as a run file: the values that differ from a default run of its env and
    workflow, and always the env, workflow, algorithm and model."""
    plain = json.loads(json.dumps(config.to_dict()))
    default = json.loads(json.dumps(TrainConfig(env=config.env, workflow=config.workflow,
                                                model=config.model).to_dict()))
    values = {k: v for k, v in plain.items()
              if k in ALWAYS or (k != "model_options" and v != default[k])}
    options = {k: v for k, v in plain["model_options"].items()
               if v != default["model_options"].get(k)}
    if options:
        values["model_options"] = options
    return values


def main() -> None:
    import yaml

    EXAMPLES.mkdir(exist_ok=True)
    for name, config in example_configs().items():
        path = EXAMPLES / f"{name}.yaml"
        head = f"# srpo train --config examples/{name}.yaml   (python -m srpo_bench.examples)\n"
        path.write_text(head + yaml.safe_dump(run_file(config), sort_keys=False))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
