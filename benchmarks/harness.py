"""The paired comparison harness: envs x workflows x algorithms x seeds on identical task
splits and an identical budget of generated samples (every run: the same steps x tasks
per step x group size, the same held-out tasks and k).

    python benchmarks/harness.py --preset smoke --out runs/harness-smoke
    python benchmarks/harness.py --preset small --out runs/harness-small --workers 2

The runs of one env/workflow pair start from one policy (for the tiny model: one warm
start per pair, built once), and the runs of one pair and seed share their "before"
evaluation and their random numbers, so step 0 of every algorithm samples the very same
rollouts: the algorithms differ only in what they do with them.

Writes, under ``--out``:
- ``results.jsonl``: one row per run and checkpoint ("before" = the shared starting
  policy, "after" = the trained one) with avg@k, pass@k, per-task accuracy, tokens and
  tool calls per task, token-normalized utility, gradient-norm CV, mean active-set size
  and events dropped;
- ``table.md``: mean ± std over seeds per env/workflow and algorithm, the macro average
  over pairs, SRPO against each baseline paired by seed and task, and the kappa ablation;
- ``learning_curves.png`` (training accuracy per step, per algorithm, mean over seeds)
  and ``accuracy_vs_tokens.png`` (held-out avg@k against generated tokens spent).

Presets: ``smoke`` (a fresh untrained tiny policy, 2 algorithms, 2 steps; a test runs it),
``small`` (the warm-started tiny policy, both envs, parallel and division-of-labor
workflows, every algorithm, 3 seeds), ``routing`` (mode switching: the routed workflow,
with and without the team cost, against fixed K = 1 and fixed K = K_max on the same
budget and starting policy), ``compare`` (SRPO against every baseline on three pairs
with the demo's settings, 3 seeds, twins for the noise floor, single-agent references
and verdicts: ``benchmarks/compare_report.py``) and ``paper`` (a Qwen-class model with
the vLLM backend on a GPU).

``--report`` runs nothing and writes the table and plots over the runs already finished
(a preset that spans sittings reports as it goes).

A pair is ``(env, workflow)``, or ``(env, label)`` with the label's settings in the
preset's ``variants`` (a workflow and config overrides, e.g. the routed workflow with a
cost, or a fixed K); ``warm_pair`` there names the pair whose warm start it shares. Finished runs are kept, so an interrupted harness picks up where it
stopped when started again with the same ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from compare_report import compare_lines, noise_floor, write_compare_plots
from machine import describe
from math_team import MATH_DEMO
from search_track import WARM_ROOT, track_settings

from srpo_agents.benchmark_sets import default_data_dir
from srpo_agents.checkpoint import write_json_atomic
from srpo_agents.config import TrainConfig, same_settings
from srpo_agents.metrics_log import read_metrics_rows, write_json_lines_atomic
from srpo_agents.objective import ALGORITHMS
from srpo_agents.tiny.config import tiny_run
from srpo_agents.verdicts import contrast, diff_cell, difference

ALL_ALGOS = sorted(ALGORITHMS)
DATA = default_data_dir()
REFERENCE = "srpo"
KAPPA_ABLATION = ("srpo", "srpo_sum", "srpo_mean")  # kappa = 1/sqrt K, 1, 1/K
RULE = ("Verdicts by `srpo_agents/verdicts.py`: over several seeds \"ahead\"/\"behind\" "
        "only beyond max(2, t) standard errors (bootstrap over seeds and tasks, or the "
        "between-seed SE if larger) with every seed agreeing in sign, else \"within "
        "noise\"; a one-seed difference gives its per-task SE and is not called, since it "
        "says nothing of run-to-run spread.")
COUNTDOWN_BASE = dict(model="tiny", steps=40, group_size=8, tasks_per_step=16, lr=3e-5,
                      epochs=1, minibatch_units=64, eps_high=0.28, difficulty=(0, 1),
                      max_new_tokens=16, eval_tasks=500, eval_k=4, n_agents=3,
                      warmstart_steps=400, warmstart_decay=True, warmstart_minutes=60.0,
                      warmstart_target=1.0, warmstart_skill=0.5)
# The comparison (issue 24): the math demo's hyperparameters, fixed before the run and the
# same for every algorithm and pair; 500 distinct held-out tasks per pair (Countdown mixes
# levels 0 and 1, as level 0's test split holds 43); k = 4 per task.
COMPARE_BASE = {**{k: v for k, v in MATH_DEMO.items()
                   if k not in ("env", "workflow", "algo", "eval_every", "curve_tasks",
                                "save_every")}, "eval_k": 4}
COMPARE_TEAMS = [("SRPO-Math-v0", "parallel"), ("SRPO-Math-v0", "solve_verify"),
                 ("SRPO-Countdown-v0", "parallel")]
# srpo and its twins first (the noise floor), then the baselines, then the references.
COMPARE_ORDER = ["srpo", "grpo", "magrpo", "srpo_singleton", "dr_mas", "at_grpo",
                 "srpo_sum", "srpo_mean"]
COUNTDOWN_VARIANTS = {("SRPO-Countdown-v0", "single"): dict(workflow="single",
                                                           warm_pair="parallel")}
SEARCH = "SRPO-Search-v0"
# The search track's warm starts are committed (about 4 MB each): built once by
# benchmarks/search_track.py, they are read by every later run, session and CI clone
# (the path is relative to the repository root, where the harness runs).
SEARCH_WARM_ROOT = WARM_ROOT
# The math demo's RL settings on the search track: 16 questions x G=8 per step, one epoch
# in mini-batches of 64 units, lr 3e-5, clip-higher; 500 held-out questions x k=4.
SEARCH_RL = {**{k: MATH_DEMO[k] for k in ("group_size", "tasks_per_step", "lr", "epochs",
                                          "minibatch_units", "eps_high")},
             "eval_tasks": 500, "eval_k": 4}
SEARCH_VARIANTS = {
    (SEARCH, "search_answer_verify"): track_settings("search_answer_verify"),
    (SEARCH, "routed"): track_settings("routed"),
    (SEARCH, "parallel"): {**track_settings("routed"), "workflow": "parallel",
                           "warm_pair": "routed"}}
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": {"pairs": [("SRPO-Math-v0", "parallel")], "algos": ["srpo", "grpo"],
              "seeds": [0], "base": dict(model="fresh-tiny", steps=2, group_size=2,
                                         tasks_per_step=2, eval_tasks=4, eval_k=2,
                                         max_new_tokens=12, n_agents=2)},
    "small": {"pairs": [("SRPO-Math-v0", "parallel"), ("SRPO-Math-v0", "solve_verify"),
                        ("SRPO-Search-v0", "parallel"),
                        ("SRPO-Search-v0", "search_answer_verify")],
              "algos": ALL_ALGOS, "seeds": [0, 1, 2],
              # Two epochs over each batch: the second is off-policy (ratio != 1), which
              # is where the set ratio and its clip act; with one on-policy step per batch
              # every ratio is 1 and only the weighting of the gradient differs.
              "base": dict(model="tiny", steps=6, group_size=4, tasks_per_step=8,
                           eval_tasks=64, eval_k=4, max_new_tokens=32, difficulty=(0,),
                           lr=1e-4, epochs=2, warmstart_minutes=3.0),
              # A search episode costs the character-level policy 3-8x a math one (the
              # retrieved passages are in its prompts): one-hop questions, two searchers,
              # two rounds and a smaller budget keep the preset near an hour on 2 cores.
              # 48 new tokens: "<search>" + a name + "</search>" is up to ~45 characters,
              # and a query cut off before its closing tag is no query.
              "overrides": {"SRPO-Search-v0": dict(
                  n_agents=2, max_turns=2, steps=3, eval_tasks=32, max_new_tokens=48,
                  extra_env_kwargs={"hops": [1]})}},
    # Mode switching (issue 11): the routed workflow against fixed K = 1 and fixed
    # K = K_max, one algorithm (srpo), the same budget and the same starting policy (the
    # routed pair's warm start, which imitates a scripted team routing at random, so it
    # covers every route). "routed+cost" charges COST_PER_TOKEN per generated token.
    # Math mixes levels 0 and 1 so the router can condition on difficulty. Settings are
    # the demo's (lr 3e-5, 4 clipped updates per batch, clip-higher), fixed before the run.
    "routing": {"pairs": [("SRPO-Math-v0", "routed"), ("SRPO-Math-v0", "routed+cost"),
                          ("SRPO-Math-v0", "K=1"), ("SRPO-Math-v0", "K=3"),
                          ("SRPO-Search-v0", "routed"), ("SRPO-Search-v0", "routed+cost"),
                          ("SRPO-Search-v0", "K=1"), ("SRPO-Search-v0", "K=2")],
                "algos": ["srpo"], "seeds": [0],
                "compare": [(env, a, b) for env, k_max in (("SRPO-Math-v0", "K=3"),
                                                           ("SRPO-Search-v0", "K=2"))
                            for a, b in (("routed", "K=1"), ("routed", k_max),
                                         ("routed+cost", "K=1"), ("routed", "routed+cost"),
                                         ("K=1", k_max))],
                "base": dict(model="tiny", steps=40, group_size=8, tasks_per_step=16,
                             lr=3e-5, epochs=1, minibatch_units=64, eps_high=0.28,
                             difficulty=(0, 1), max_new_tokens=32, eval_tasks=500, eval_k=4,
                             n_agents=3, warmstart_steps=400, warmstart_decay=True,
                             warmstart_minutes=60.0, warmstart_target=1.0,
                             warmstart_skill=0.5),
                # Search (issue 26): from the search track's committed routed warm start
                # (one-hop questions, 2 rounds), 60 steps on 1- to 3-hop questions with 3
                # rounds (run_settings), so the router can condition on hop count; the
                # route events carry it (the table's "by level" is hops here).
                "warm_root": {SEARCH: SEARCH_WARM_ROOT},
                "overrides": {SEARCH: {**track_settings("routed"), "steps": 60,
                                       "warmstart_skill": 0.75}},
                "run_settings": {SEARCH: {"max_turns": 3, "extra_env_kwargs": {
                    "hops": [1, 2, 3], "top_k": track_settings("routed")["extra_env_kwargs"][
                        "top_k"]}}},
                "variants": {
                    ("SRPO-Math-v0", "routed+cost"): dict(workflow="routed", warm_pair="routed",
                                                          cost_per_token=0.002),
                    ("SRPO-Math-v0", "K=1"): dict(workflow="single", warm_pair="routed"),
                    ("SRPO-Math-v0", "K=3"): dict(workflow="parallel", warm_pair="routed"),
                    ("SRPO-Search-v0", "routed+cost"): dict(
                        workflow="routed", warm_pair="routed", cost_per_token=0.002,
                        cost_per_tool_call=0.05),
                    ("SRPO-Search-v0", "K=1"): dict(workflow="parallel", n_agents=1,
                                                    warm_pair="routed"),
                    ("SRPO-Search-v0", "K=2"): dict(workflow="parallel", warm_pair="routed")}},
    # A third environment (issue 12's tutorial env, docs/new-environment.md): does the
    # tiny policy learn Countdown? One solver against three proposers and an aggregator,
    # from one shared warm start (the parallel pair's), two and three numbers 1-9. The
    # settings are the routing preset's, fixed before the run.
    "countdown": {"pairs": [("SRPO-Countdown-v0", "parallel"), ("SRPO-Countdown-v0", "single")],
                  "algos": ["srpo"], "seeds": [0],
                  "compare": [("SRPO-Countdown-v0", "parallel", "single")],
                  "base": COUNTDOWN_BASE, "variants": COUNTDOWN_VARIANTS},
    # The same at four times the steps: whether the parallel team, within noise at 40
    # steps, moves with a longer budget (declared after the 40-step run, as a budget sweep).
    "countdown_long": {"pairs": [("SRPO-Countdown-v0", "parallel"),
                                 ("SRPO-Countdown-v0", "single")],
                       "algos": ["srpo"], "seeds": [0],
                       "compare": [("SRPO-Countdown-v0", "parallel", "single")],
                       "base": {**COUNTDOWN_BASE, "steps": 160},
                       "variants": COUNTDOWN_VARIANTS},
    # SRPO against every baseline where the tiny team learns (issue 24). "same_as": a
    # baseline identical by construction on a pair (tests/test_compare.py proves it by
    # weights) is run once and its rows copied. "twins": srpo again per seed with these
    # rollout seeds (the noise floor). "references": each team's single agent, trained
    # from the team's warm start with the same budget, and its majority vote over
    # "majority" samples.
    "compare": {"pairs": COMPARE_TEAMS + [(env, f"single@{w}") for env, w in COMPARE_TEAMS],
                "team_pairs": COMPARE_TEAMS, "algos": COMPARE_ORDER, "seeds": [0, 1, 2],
                "twins": [1], "majority": 3,
                "same_as": {("SRPO-Math-v0", "parallel"): {"dr_mas": "grpo", "at_grpo": "grpo"},
                            ("SRPO-Math-v0", "solve_verify"): {
                                "srpo_sum": "srpo", "srpo_mean": "srpo",
                                "srpo_singleton": "srpo"},
                            ("SRPO-Countdown-v0", "parallel"): {"dr_mas": "grpo",
                                                                "at_grpo": "grpo"}},
                "references": {(env, w): f"single@{w}" for env, w in COMPARE_TEAMS},
                "base": COMPARE_BASE,
                "overrides": {"SRPO-Countdown-v0": dict(difficulty=(0, 1), max_new_tokens=16)},
                "variants": {(env, f"single@{w}"): dict(workflow="single", warm_pair=w,
                                                         algos=["srpo"])
                             for env, w in COMPARE_TEAMS}},
    # The search track's pilot (issue 26): SRPO from the track's cached warm start
    # (benchmarks/search_track.py builds it into warm_root; the routed workflow's serves
    # parallel), the demo's RL settings, and a validation curve every 10 steps, to size
    # the steps of the runs that follow.
    "search_pilot": {"pairs": [(SEARCH, "search_answer_verify"), (SEARCH, "parallel")],
                     "algos": ["srpo"], "seeds": [0], "warm_root": SEARCH_WARM_ROOT,
                     "base": {**SEARCH_RL, "model": "tiny", "steps": 60, "eval_every": 10,
                              "curve_tasks": 200},
                     "variants": SEARCH_VARIANTS},
    # Must-hold 2 of issue 26 on search_answer_verify: 100 steps from the cached warm
    # start at the demo's lr and at a 3.3 times larger one (the 40-step run at 3e-5 moved
    # held-out accuracy +0.005 +- 0.013 with a clip fraction of 0.004), each with the
    # validation curve every 10 steps. Declared before the runs.
    "search_sav": {"pairs": [(SEARCH, "search_answer_verify"), (SEARCH, "sav@lr1e-4")],
                   "algos": ["srpo"], "seeds": [0], "warm_root": SEARCH_WARM_ROOT,
                   "base": {**SEARCH_RL, "model": "tiny", "steps": 100, "eval_every": 10,
                            "curve_tasks": 200},
                   "variants": {**SEARCH_VARIANTS, (SEARCH, "sav@lr1e-4"): {
                       **track_settings("search_answer_verify"),
                       "workflow": "search_answer_verify",
                       "warm_pair": "search_answer_verify", "lr": 1e-4}}},
    # Must-hold 2 of issue 26 on parallel (two searchers, then the aggregator): the
    # search_sav preset's settings (100 steps at the demo's lr, a validation curve every
    # 10 steps) from the routed team's committed warm start. Declared before the run.
    "search_parallel": {"pairs": [(SEARCH, "parallel")], "algos": ["srpo"], "seeds": [0],
                        "warm_root": SEARCH_WARM_ROOT,
                        "base": {**SEARCH_RL, "model": "tiny", "steps": 100, "eval_every": 10,
                                 "curve_tasks": 200},
                        "variants": SEARCH_VARIANTS},
    # Must-hold 4 of issue 26: SRPO against GRPO and Dr. MAS on the search pair that
    # learns, with the search_sav preset's settings (its srpo seed-0 run is this preset's
    # when both write to the same --out), three seeds and one twin of srpo per seed (the
    # noise floor). Declared before its baselines ran; about 22 min per run on one thread.
    "search_compare": {"pairs": [(SEARCH, "search_answer_verify")],
                       "team_pairs": [(SEARCH, "search_answer_verify")],
                       "algos": ["srpo", "grpo", "dr_mas"], "seeds": [0, 1, 2], "twins": [1],
                       # One unit per role per rollout under one team reward: each
                       # (task, agent) group holds the task group's returns, so Dr. MAS's
                       # advantages are GRPO's (seeds 0 and 1 were run both ways and gave
                       # identical results; tests/test_compare.py proves it by weights).
                       "same_as": {(SEARCH, "search_answer_verify"): {"dr_mas": "grpo"}},
                       "warm_root": SEARCH_WARM_ROOT,
                       "base": {**SEARCH_RL, "model": "tiny", "steps": 100, "eval_every": 10,
                                "curve_tasks": 200},
                       "variants": SEARCH_VARIANTS},
    # The GPU preset: the paper's setting on the real benchmark files (see
    # srpo_agents.benchmark_sets). Training data: the MATH train stand-in; for search,
    # HotpotQA train questions over a Wikipedia retrieval server (Search-R1's protocol)
    # that you start yourself at the URL below.
    "paper": {"pairs": [("SRPO-Math-v0", "parallel"), ("SRPO-Math-v0", "solve_verify"),
                        ("SRPO-Search-v0", "parallel"),
                        ("SRPO-Search-v0", "search_answer_verify")],
              "algos": ALL_ALGOS, "seeds": [0, 1, 2],
              "base": dict(model="Qwen/Qwen2.5-3B-Instruct", backend="vllm", device="cuda",
                           steps=200, group_size=8, tasks_per_step=32, eval_tasks=200,
                           eval_k=16, max_new_tokens=1024, lr=1e-6),
              "overrides": {
                  "SRPO-Math-v0": dict(
                      dataset=str(DATA / "math" / "math_test_minus_math500.jsonl"),
                      eval_dataset=str(DATA / "math" / "math500.jsonl")),
                  "SRPO-Search-v0": dict(
                      dataset=str(DATA / "search" / "hotpotqa_train_100.jsonl"),
                      eval_dataset=str(DATA / "search" / "hotpotqa_dev_500.jsonl"),
                      retriever="http://127.0.0.1:8000/retrieve", max_new_tokens=512)},
              "benchmarks": {"SRPO-Math-v0": "aime24,amc23,math500,gsm8k",
                             "SRPO-Search-v0": "all"},
              "benchmark_tasks": 500},
}


def _read_metrics(run_dir: Path) -> list[dict]:
    return read_metrics_rows(run_dir / "metrics.jsonl")


def run_rows(config: TrainConfig, summary: dict, run_dir: Path, label: str = "") -> list[dict]:
    steps = _read_metrics(run_dir)
    norms = [s["grad_norm"] for s in steps if "grad_norm" in s]
    mean_norm = statistics.mean(norms) if norms else 0.0
    train_tokens = sum(s["tokens_per_task"] for s in steps) * config.tasks_per_step * config.group_size
    common = {"env": config.env, "workflow": label or config.workflow, "algo": config.algo,
              "seed": config.seed, "steps": config.steps, "train_tokens": train_tokens,
              "grad_norm_cv": statistics.pstdev(norms) / mean_norm if mean_norm else 0.0,
              "mean_set_size": statistics.mean(s["mean_set_size"] for s in steps) if steps else 0.0,
              "events_dropped": sum(s["events_dropped"] for s in steps),
              "train_accuracy": [s["accuracy"] for s in steps],
              "wall_time_s": summary.get("wall_time_s", 0.0)}
    clips = [s["clip_fraction_by_update"] for s in steps if s.get("clip_fraction_by_update")]
    if clips:  # each optimizer step of a batch, mean over the run's steps
        n = min(len(c) for c in clips)
        common["clip_fraction_by_update"] = [statistics.mean(c[i] for c in clips)
                                             for i in range(n)]
    if config.rollout_seed:
        common["rollout_seed"] = config.rollout_seed
    routing = [s for s in steps if "route_mean_k" in s]
    if routing:
        common["route_mean_k_curve"] = [s["route_mean_k"] for s in routing]
        common["mean_set_size_curve"] = [s["mean_set_size"] for s in routing]
    rows = []
    for checkpoint in ("before", "after"):
        result = summary[checkpoint]
        utility = result["avg_at_k"] / result["tokens_per_task"] * 1e6 if result[
            "tokens_per_task"] else 0.0
        rows.append({**common, "checkpoint": checkpoint, **result,
                     "correct_per_million_tokens": utility})
    return rows


# ---------------------------------------------------------------- the jobs (one process each)

def _one_thread() -> None:
    # Two workers on two cores: one OpenMP thread each, or they fight over the cores.
    import torch

    torch.set_num_threads(1)


def _same_config(path: Path, config: TrainConfig) -> bool:
    """Whether ``path`` holds a result of this very config. A field added to TrainConfig
    after the result was written counts as its default there (the run could not have
    set it), so adding a field does not make every stored run stale."""
    if not path.is_file():
        return False
    stored = json.loads(path.read_text()).get("config")
    if not isinstance(stored, dict):
        return False
    # Where a result was written is not what it is: the same run under an absolute and a
    # relative --out (or a results folder moved into benchmarks/results) is still it.
    return same_settings(stored, config, ignore=("out",))


def warm_start_job(config: TrainConfig) -> dict:
    """Build the pair's starting policy (cached in its ``warmstart_dir`` option)."""
    from srpo_agents.train import prepare_policy

    _, meta = prepare_policy(config, Path(config.out), log=lambda *_: None)
    return meta


def _engine(config: TrainConfig, model: str):
    from srpo_agents.policy import load_policy, resolve_device, resolve_dtype
    from srpo_agents.train import make_engine

    device = resolve_device(config.device)
    return make_engine(config, load_policy(model, device=device,
                                           dtype=resolve_dtype(config.dtype, device)))


def benchmark_results(config: TrainConfig, engine, names: str, tasks: int) -> dict:
    """The engine's policy on each named benchmark file."""
    from srpo_agents.benchmark_sets import evaluate_benchmarks

    return evaluate_benchmarks(engine, config, names, config.eval_k, tasks)


def before_job(config: TrainConfig, path: Path, benchmarks: str = "", tasks: int = 0) -> dict:
    """The starting policy's held-out result for one pair and seed (cached in ``path``),
    and with ``benchmarks`` its result on each benchmark file."""
    from srpo_agents.train import evaluate_start

    if not _same_config(path, config):
        # One model load serves the start evaluation and the benchmark files.
        engine = _engine(config, config.model) if benchmarks else None
        result = evaluate_start(config, log=lambda *_: None, engine=engine)
        if benchmarks:
            result["benchmarks"] = benchmark_results(config, engine, benchmarks, tasks)
        write_json_atomic(path, {"config": config.to_dict(), "before": result})
    return json.loads(path.read_text())["before"]


def majority_result(config: TrainConfig, run_dir: Path, size: int) -> dict:
    """The trained single agent's plurality vote over ``size`` samples on the run's
    held-out tasks (``evaluate.majority_at`` over its eval_k samples per task), with the
    tokens of ``size`` episodes; cached in ``majority.json``."""
    from srpo_agents.evaluate import evaluate, majority_at
    from srpo_agents.train import held_out

    path = run_dir / "majority.json"
    if _same_config(path, config):
        return json.loads(path.read_text())["majority"]
    if config.eval_k < size:
        raise ValueError(f"eval_k={config.eval_k}: a vote over {size} samples needs "
                         f"eval_k >= {size}")
    engine = _engine(config, str(run_dir / "policy"))
    envs, indices = held_out(config, engine.policy.count_tokens)
    result = evaluate(engine, envs, indices, config.eval_k, tag="majority", votes=True)
    per_task = [majority_at(votes, size) for votes in result["per_task_votes"]]
    majority = {"size": size, "avg": float(statistics.mean(per_task)), "per_task": per_task,
                "tokens_per_task": size * result["tokens_per_task"],
                "single_avg_at_k": result["avg_at_k"]}
    write_json_atomic(path, {"config": config.to_dict(), "majority": majority})
    return majority


def run_job(config: TrainConfig, before: dict, benchmarks: str = "", tasks: int = 0,
            label: str = "", majority: int = 0, report_only: bool = False) -> list[dict]:
    """Train one algorithm on one pair and seed; a finished run is read back, not redone.
    With ``benchmarks``, the trained policy is also evaluated on each benchmark file;
    with ``majority``, by a majority vote over that many samples. ``report_only``: read
    a finished run back and run nothing ([] for one not finished)."""
    from srpo_agents.train import train

    run_dir = Path(config.out)
    if not _same_config(run_dir / "summary.json", config):
        if report_only:
            return []
        claim = claim_run(run_dir)
        if claim is None:
            print(f"harness: {run_dir} is being trained by another process; skipped here "
                  f"(--report reads it back once it is finished)", file=sys.stderr)
            return []
        try:
            train(config, log=lambda *_: None, before=before)
        finally:
            claim.unlink(missing_ok=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    if benchmarks and "benchmarks" not in summary["after"]:
        summary["after"]["benchmarks"] = benchmark_results(
            config, _engine(config, str(run_dir / "policy")), benchmarks, tasks)
        write_json_atomic(run_dir / "summary.json", summary)
    rows = run_rows(config, summary, run_dir, label)
    if majority and (not report_only or _same_config(run_dir / "majority.json", config)):
        rows[-1]["majority"] = majority_result(config, run_dir, majority)
    return rows


def _row_key(row: dict) -> tuple:
    return (row["env"], row["workflow"], row["algo"], row["seed"],
            row.get("rollout_seed", 0), row["checkpoint"])


def kept_rows(path: Path, rows: list[dict], preset: dict) -> list[dict]:
    """The rows of ``path`` (an earlier invocation's results.jsonl) of the preset's pairs
    and seeds that ``rows`` (this invocation's) do not hold: a preset run seed by seed
    over several sittings reports every seed, even once an earlier seed's run folders are
    gone (runs/ does not outlive a session). A run finished again replaces its row."""
    if not path.is_file():
        return []
    fresh = {_row_key(r) for r in rows}
    pairs, seeds = {tuple(p) for p in preset["pairs"]}, set(preset["seeds"])
    old = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in old if _row_key(r) not in fresh
            and (r["env"], r["workflow"]) in pairs and r["seed"] in seeds]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def claim_run(run_dir: Path) -> Path | None:
    """Mark ``run_dir`` as trained by this process (``training.pid``), or None when
    another live process holds it. Two harness invocations over one --out (seed by seed,
    pair by pair) may reach the same run: a fresh start unlinks the folder's
    metrics.jsonl, which once cost a run 49 of its 60 steps' rows. A claim left by a
    killed process is stale and taken over."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "training.pid"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            text = path.read_text().strip()
            if text.isdigit() and int(text) != os.getpid() and _alive(int(text)):
                return None
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return path
    return None


def _pool(workers: int):
    if workers <= 1:
        return None
    return ProcessPoolExecutor(max_workers=workers, initializer=_one_thread,
                               mp_context=multiprocessing.get_context("spawn"))


def _map(pool, function, jobs: list[tuple]) -> list:
    if pool is None:
        return [function(*job) for job in jobs]
    return [future.result() for future in [pool.submit(function, *job) for job in jobs]]


def _pair_name(env: str, workflow: str) -> str:
    return f"{env}-{workflow}"


def pair_settings(preset: dict, env: str, label: str, base: dict | None = None,
                  run: bool = False) -> tuple[str, dict[str, Any], str]:
    """(workflow, settings, warm-start pair label) of one pair of a preset; ``base``
    replaces the preset's base settings (a run's resolved model). ``run``: the settings
    of its runs and start evaluations, with the preset's ``run_settings`` for the env
    on top (what the runs change from their warm start, such as the search routing's
    1- to 3-hop questions from the one-hop track's warm start)."""
    variant = dict(preset.get("variants", {}).get((env, label), {}))
    workflow = variant.pop("workflow", label)
    warm = variant.pop("warm_pair", label)
    variant.pop("algos", None)
    settings = {**(base or preset["base"]), **preset.get("overrides", {}).get(env, {}),
                **variant, **(preset.get("run_settings", {}).get(env, {}) if run else {})}
    return workflow, settings, warm


def pair_algos(preset: dict, env: str, label: str) -> list[str]:
    """The algorithms a pair runs: its variant's own list, else the preset's, less those
    identical by construction to another on it (``same_as``)."""
    algos = preset.get("variants", {}).get((env, label), {}).get("algos", preset["algos"])
    return [a for a in algos if a not in preset.get("same_as", {}).get((env, label), {})]


def same_as_rows(preset: dict, rows: list[dict]) -> list[dict]:
    """Rows for the algorithms run once as another (``same_as``): the other's rows under
    their own name, marked."""
    copies = []
    for (env, label), aliases in preset.get("same_as", {}).items():
        for algo, target in aliases.items():
            copies += [{**r, "algo": algo, "same_as": target} for r in rows
                       if (r["env"], r["workflow"], r["algo"]) == (env, label, target)
                       and not r.get("rollout_seed")]
    return copies


def warm_root(preset: dict, env: str, out: Path) -> Path:
    """The folder of ``env``'s warm starts in a preset (``warm_start_plan``)."""
    root = preset.get("warm_root")
    if isinstance(root, dict):
        root = root.get(env)
    return Path(root or out / "warmstart")


def warm_start_plan(preset: dict, out: Path, base: dict | None = None
                    ) -> tuple[dict[tuple[str, str], str], list[tuple[str, str]], list[tuple]]:
    """(each pair's warm-start model folder, the warm pairs built, their build jobs).

    One warm start per pair, shared by its seeds and algorithms; a pair with a
    ``warm_pair`` starts from that pair's (built here even when the preset runs no pair
    of that name). ``warm_root``: a folder of warm starts shared with other presets and
    scripts (``benchmarks/search_track.py`` builds the search track's there), or a
    mapping of env ids to such folders (other envs' warm starts are built in ``out``)."""
    starts: dict[tuple[str, str], str] = {}
    own: list[tuple[str, str]] = []
    jobs: list[tuple] = []
    for env, label in preset["pairs"]:
        warm = pair_settings(preset, env, label, base)[2]
        folder = warm_root(preset, env, out) / _pair_name(env, warm)
        starts[(env, label)] = str(folder / "warmstart")
        if (env, warm) in own:
            continue
        own.append((env, warm))
        workflow, settings, _ = pair_settings(preset, env, warm, base)
        jobs.append((TrainConfig(**tiny_run(settings, env=env, workflow=workflow, seed=0,
                                            out=str(folder), warmstart_dir=str(folder))),))
    return starts, own, jobs


def run_preset(name: str, out: Path, log=print, workers: int = 1,
               envs: tuple[str, ...] = (), report_only: bool = False,
               labels: tuple[str, ...] = (), seeds: tuple[int, ...] = ()) -> list[dict]:
    """Run a preset (finished runs are read back) and write its table and plots.
    ``envs``, ``labels``: only the pairs of these env ids and workflow labels; ``seeds``:
    only these of its seeds (a preset too long for one sitting, run seed by seed).
    ``report_only``: run nothing; write them over the runs already finished."""
    preset = dict(PRESETS[name])
    if envs:
        preset["pairs"] = [p for p in preset["pairs"] if p[0] in envs]
    if labels:
        preset["pairs"] = [p for p in preset["pairs"] if p[1] in labels]
    if seeds:
        preset["seeds"] = [s for s in preset["seeds"] if s in seeds]
    out.mkdir(parents=True, exist_ok=True)
    base = dict(preset["base"])
    started = time.monotonic()
    if base["model"] == "fresh-tiny":
        from srpo_agents.tiny import build_tiny_policy

        model_dir = out / "fresh-tiny"
        if not (model_dir / "config.json").is_file():
            build_tiny_policy(["x"], model_dir, hidden_size=64, num_layers=2, num_heads=2)
        base.update(model=str(model_dir), compact_prompts=True)
    def settings_for(env: str, label: str) -> tuple[str, dict[str, Any], str]:
        return pair_settings(preset, env, label, base, run=True)

    pool = _pool(workers)
    try:
        starts: dict[tuple[str, str], str] = {}
        if base["model"] == "tiny":
            starts, own, jobs = warm_start_plan(preset, out, base)
            if not report_only:
                log(f"harness: {len(jobs)} warm starts")
                metas = _map(pool, warm_start_job, jobs)
                (out / "warmstart").mkdir(parents=True, exist_ok=True)
                write_json_atomic(out / "warmstart" / "summary.json", {
                    _pair_name(*p): m for p, m in zip(own, metas, strict=True)})

        def config_for(env: str, label: str, seed: int, algo: str, twin: int = 0
                       ) -> TrainConfig:
            workflow, settings, _ = settings_for(env, label)
            if (env, label) in starts:
                settings.update(model=starts[(env, label)], compact_prompts=True)
            name = f"{_pair_name(env, label)}-{algo}-s{seed}" + (f"-r{twin}" if twin else "")
            return TrainConfig(**tiny_run(settings, env=env, workflow=workflow, algo=algo,
                                          seed=seed, save_every=0, rollout_seed=twin,
                                          out=str(out / "runs" / name)))

        keys = [(env, workflow, seed) for env, workflow in preset["pairs"]
                for seed in preset["seeds"]]
        benchmarks, tasks = preset.get("benchmarks", {}), preset.get("benchmark_tasks", 0)
        before_jobs = [(replace(config_for(*key, REFERENCE), out=str(out / "before")),
                        out / "before" / f"{_pair_name(*key[:2])}-s{key[2]}.json",
                        benchmarks.get(key[0], ""), tasks) for key in keys]
        if report_only:
            befores = {key: json.loads(job[1].read_text())["before"]
                       for key, job in zip(keys, before_jobs, strict=True)
                       if _same_config(job[1], job[0])}
        else:
            log(f"harness: {len(keys)} starting evaluations")
            befores = dict(zip(keys, _map(pool, before_job, before_jobs), strict=True))
        references = set(preset.get("references", {}).values())
        order = {a: i for i, a in enumerate(preset["algos"])}
        runs = []  # (priority, job): srpo, the baselines, srpo's twins, the references
        for key in keys:
            if key not in befores:
                continue
            env, label, seed = key
            majority = preset.get("majority", 0) if label in references else 0
            for algo in pair_algos(preset, env, label):
                rank = len(order) + 1 if label in references else order.get(algo, 0)
                runs.append(((rank, 0), (config_for(*key, algo), befores[key],
                                         benchmarks.get(env, ""), tasks, label, majority,
                                         report_only)))
            if (env, label) in {tuple(p) for p in preset.get("team_pairs", [])}:
                runs += [((len(order), twin),
                          (config_for(*key, REFERENCE, twin), befores[key], "", 0, label, 0,
                           report_only))
                         for twin in preset.get("twins", [])]
        jobs = [job for _, job in sorted(runs, key=lambda item: item[0])]
        if not report_only:
            log(f"harness: {len(jobs)} runs on {max(workers, 1)} worker(s)")
        rows = [row for rows_ in _map(pool if not report_only else None, run_job, jobs)
                for row in rows_]
        rows += same_as_rows(preset, rows)
    finally:
        if pool is not None:
            pool.shutdown()
    kept = kept_rows(out / "results.jsonl", rows, PRESETS[name])
    rows += kept
    write_json_lines_atomic(out / "results.jsonl", rows)
    command = f"python benchmarks/harness.py --preset {name} --out {out}"
    if workers > 1:
        command += f" --workers {workers}"
    if envs:
        command += " --envs " + " ".join(envs)
    if labels:
        command += " --labels " + " ".join(labels)
    if seeds:
        command += " --seeds " + " ".join(map(str, seeds))
    if not rows:
        log("harness: no finished runs to report")
        return rows
    extra = compare_lines(rows, preset, REFERENCE, KAPPA_ABLATION) if preset.get(
        "team_pairs") else []
    kept_runs = sorted({(r["env"], r["workflow"], r["algo"], r["seed"],
                         r.get("rollout_seed", 0)) for r in kept if r["checkpoint"] == "after"})
    note = ("Kept from an earlier invocation into this folder (results.jsonl; their run "
            "folders are not here): " + ", ".join(
                f"{w} {a} seed {s}" + (f" twin {t}" if t else "")
                for _, w, a, s, t in kept_runs) + ".") if kept_runs else ""
    write_table([r for r in rows if not r.get("rollout_seed")], out / "table.md", command,
                0.0 if report_only else time.monotonic() - started,
                [c for c in preset.get("compare", []) if c[0] in {e for e, _ in preset["pairs"]}],
                extra, note, twin_floors(rows, preset))
    write_plots([r for r in rows if not r.get("rollout_seed")], out)
    if preset.get("team_pairs"):
        write_compare_plots(rows, preset, out, REFERENCE)
    return rows


def retable(folder: Path) -> None:
    """Rewrite ``folder/table.md`` from its committed ``results.jsonl`` under today's rules,
    keeping what the old table says of how the rows were made: its command, machine,
    wall time and note. Runs nothing."""
    old = (folder / "table.md").read_text(encoding="utf-8").splitlines()
    command = next(line for line in old if line.startswith("Command: "))[10:-1]
    at = next(i for i, line in enumerate(old) if line.startswith("Machine: "))
    machine = old[at][len("Machine: "):].split(". Wall time: ")[0]
    minutes = old[at].split("Wall time: ")[1].split(" min for this invocation")
    seconds = float(minutes[0]) * 60 if len(minutes) > 1 else 0.0
    note = "\n".join(line for line in old[old.index(f"Command: `{command}`") + 1:at]
                     if line.strip())
    words = command.split()
    preset = dict(PRESETS[words[words.index("--preset") + 1]])
    for flag, index in (("--envs", 0), ("--labels", 1)):
        if flag in words:
            chosen = set(words[words.index(flag) + 1:])
            preset["pairs"] = [p for p in preset["pairs"] if p[index] in chosen]
    rows = [json.loads(line) for line in (folder / "results.jsonl").open(encoding="utf-8")]
    extra = compare_lines(rows, preset, REFERENCE, KAPPA_ABLATION) if preset.get(
        "team_pairs") else []
    write_table([r for r in rows if not r.get("rollout_seed")], folder / "table.md", command,
                seconds, [c for c in preset.get("compare", [])
                          if c[0] in {e for e, _ in preset["pairs"]}],
                extra, note, twin_floors(rows, preset), machine)


# ---------------------------------------------------------------- the table

def twin_floors(rows: list[dict], preset: dict) -> dict:
    """{pair: Floor} for the pairs whose reference ran twins (the comparison preset)."""
    floors = {}
    for pair in {(r["env"], r["workflow"]) for r in rows if r.get("rollout_seed")}:
        found = noise_floor(rows, pair, REFERENCE)
        if found:
            floors[pair] = found["floor"]
    return floors


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def _start_rows(rows: list[dict], pair: tuple[str, str]) -> list[dict]:
    """The pair's shared start, one row per seed, from whichever runs have finished."""
    starts: dict[int, dict] = {}
    for r in rows:
        if (r["env"], r["workflow"]) == pair and r["checkpoint"] == "before" \
                and not r.get("rollout_seed"):
            starts.setdefault(r["seed"], {**r, "same_as": None})
    return [starts[s] for s in sorted(starts)]


def _pair_rows(rows: list[dict], pair: tuple[str, str], algo: str, checkpoint: str) -> list[dict]:
    return [r for r in rows if (r["env"], r["workflow"]) == pair and r["algo"] == algo
            and r["checkpoint"] == checkpoint]


def write_table(rows: list[dict], path: Path, command: str, seconds: float = 0.0,
                comparisons: list[tuple[str, str, str]] = (), extra: list[str] = (),
                note: str = "", floors: dict | None = None, machine: str = "") -> None:
    """``comparisons``: (env, pair label, pair label) whose trained runs are compared;
    ``extra``: lines appended (the comparison preset's verdicts); ``note``: a paragraph
    under the command (rows it did not run); ``floors``: {pair: verdicts.Floor} where
    twin runs measured one (a one-seed difference there may be called against it);
    ``machine``: where the rows ran (default: this machine)."""
    floors = floors or {}

    def cell(rows_a: list[dict], rows_b: list[dict], pair, independent: bool = True) -> str:
        return diff_cell(difference(rows_a, rows_b, floor=floors.get(pair),
                                    independent=independent))

    after = [r for r in rows if r["checkpoint"] == "after"]
    pairs = sorted({(r["env"], r["workflow"]) for r in after})
    algos = sorted({r["algo"] for r in after})
    k = after[0]["k"]
    budgets = sorted({(r["env"], r["workflow"], r["steps"], r["tasks"]) for r in after})
    run_minutes = sum(r["wall_time_s"] for r in after if not r.get("same_as")) / 60
    lines = ["# Paired comparison", "", f"Command: `{command}`", "",
             *([note, ""] if note else []),
             f"Machine: {machine or describe()}. Wall time: "
             + (f"{seconds / 60:.0f} min for this invocation; " if seconds > 60 else "")
             + f"{run_minutes:.0f} min summed over the "
             f"{sum(not r.get('same_as') for r in after)} runs (warm starts and "
             f"start evaluations not included).", "",
             f"avg@{k} / pass@{k} on held-out tasks after training, mean ± std over seeds; "
             "within an env/workflow pair every algorithm has the same tasks, seeds, starting "
             "policy and sample budget. \"start\" is the shared starting policy. Budgets: "
             + "; ".join(f"{e} {w}: {s} steps, {n} held-out tasks" for e, w, s, n in budgets)
             + ".", "",
             "| env | workflow | algo | avg@k | pass@k | tokens/task | tool calls/task | "
             "correct/M tokens | grad-norm CV | mean set size | events dropped |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for pair in pairs:
        start = _start_rows(rows, pair)
        groups = [("start", start)] + [(a, _pair_rows(rows, pair, a, "after")) for a in algos]
        for algo, sel in groups:
            if not sel:
                continue

            def col(key, rows_=sel):
                return [r[key] for r in rows_]

            trained = algo != "start"
            name = algo + (f" (= {sel[0]['same_as']})"
                           if trained and sel[0].get("same_as") else "")
            lines.append(
                f"| {pair[0]} | {pair[1]} | {name} | {_mean_std(col('avg_at_k'))} | "
                f"{_mean_std(col('pass_at_k'))} | {statistics.mean(col('tokens_per_task')):.1f} | "
                f"{statistics.mean(col('tool_calls_per_task')):.2f} | "
                f"{statistics.mean(col('correct_per_million_tokens')):,.0f} | "
                + (f"{statistics.mean(col('grad_norm_cv')):.2f} | "
                   f"{statistics.mean(col('mean_set_size')):.2f} | {sum(col('events_dropped'))} |"
                   if trained else "| | |"))
    # Only pairs every algorithm ran, so each average is over the same pairs.
    common = [p for p in pairs if all(_pair_rows(rows, p, a, "after") for a in algos)]
    if common:
        lines += ["", "Macro average over the env/workflow pairs every algorithm ran (after "
                  f"training; {len(common)} of {len(pairs)} pairs):", "",
                  "| algo | avg@k | pass@k |", "|---|---:|---:|"]
    for algo in algos if common else []:
        per_pair = [_pair_rows(rows, p, algo, "after") for p in common]
        avg = [statistics.mean(r["avg_at_k"] for r in sel) for sel in per_pair]
        pas = [statistics.mean(r["pass_at_k"] for r in sel) for sel in per_pair]
        lines.append(f"| {algo} | {statistics.mean(avg):.3f} | {statistics.mean(pas):.3f} |")
    if REFERENCE in algos and len(algos) > 1 and not extra:
        lines += ["", f"{REFERENCE} minus each algorithm, held-out avg@k after training, paired "
                  "by seed and task. " + RULE, "",
                  "| env | workflow | vs | difference |", "|---|---|---|---|"]
        for pair in pairs:
            ref = _pair_rows(rows, pair, REFERENCE, "after")
            for algo in algos:
                other = _pair_rows(rows, pair, algo, "after")
                if algo != REFERENCE and ref and other:
                    lines.append(f"| {pair[0]} | {pair[1]} | {algo} | "
                                 f"{cell(ref, other, pair)} |")
    if not extra:  # the comparison preset's verdicts (extra) replace these tables
        lines += ["", "Each algorithm after training minus the shared start (did training "
                  "move held-out accuracy at this budget?):", "",
                  "| env | workflow | algo | after - start |", "|---|---|---|---|"]
        for pair in pairs:
            for algo in algos:
                trained = _pair_rows(rows, pair, algo, "after")
                start = _pair_rows(rows, pair, algo, "before")
                if trained and start:
                    lines.append(f"| {pair[0]} | {pair[1]} | {algo} | "
                                 f"{cell(trained, start, pair, independent=False)} |")
    if comparisons:
        lines += ["", "Pair against pair after training (the same algorithm, held-out tasks, "
                  "seeds and budget), paired by seed and task:", "",
                  "| env | algo | pair - pair | avg@k difference |", "|---|---|---|---|"]
        for env, a, b in comparisons:
            for algo in algos:
                rows_a = _pair_rows(rows, (env, a), algo, "after")
                rows_b = _pair_rows(rows, (env, b), algo, "after")
                if rows_a and rows_b:
                    lines.append(f"| {env} | {algo} | {a} - {b} | "
                                 f"{cell(rows_a, rows_b, None)} |")
    if set(KAPPA_ABLATION) <= set(algos) and not extra:
        lines += ["", "Kappa ablation (the paper's ordering: 1/sqrt K above sum above mean):",
                  "", "| env | workflow | srpo - srpo_sum | srpo_sum - srpo_mean | "
                  "ordering held? |", "|---|---|---|---|---|"]
        for pair in pairs:
            sel = {a: _pair_rows(rows, pair, a, "after") for a in KAPPA_ABLATION}
            top = difference(sel["srpo"], sel["srpo_sum"], floor=floors.get(pair))
            low = difference(sel["srpo_sum"], sel["srpo_mean"], floor=floors.get(pair))
            held = ("yes" if top["verdict"] == low["verdict"] == "ahead" else
                    "contradicted" if "behind" in (top["verdict"], low["verdict"]) else
                    "not separated")
            lines.append(f"| {pair[0]} | {pair[1]} | {diff_cell(top)} | {diff_cell(low)} | "
                         f"{held} |")
    lines += _benchmark_lines(rows, pairs, algos)
    lines += _routing_lines(rows, pairs)
    lines += list(extra)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _routing_lines(rows: list[dict], pairs: list[tuple[str, str]]) -> list[str]:
    """Routed pairs: the routes the trained router chose on the held-out tasks (summed
    over seeds), by difficulty level where the tasks have one, and accuracy and tokens
    per task by the chosen K."""
    routed = [(p, [r for r in rows if (r["env"], r["workflow"]) == p and "routing" in r])
              for p in pairs]
    routed = [(p, sel) for p, sel in routed if sel]
    if not routed:
        return []
    lines = ["", "Routing on the held-out tasks (route events summed over seeds; an "
             "episode's K is its first route's). \"mean set size\" is the training "
             "mean over steps of the active-set size (the paper's router settled at "
             "1.638):", "",
             "| env | pair | algo | checkpoint | K chosen (count) | mean K | mean set size | "
             "unreadable routes | by level (search: hops): K (count), accuracy | avg "
             "accuracy / tokens per episode by K |", "|---|---|---|---|---|---:|---:|---:|---|---|"]
    for (env, label), sel in routed:
        for algo in sorted({r["algo"] for r in sel}):
            for checkpoint in ("before", "after"):
                group = [r for r in sel if r["algo"] == algo and r["checkpoint"] == checkpoint]
                if not group:
                    continue
                counts: dict[str, int] = {}
                by_k: dict[str, list[tuple[int, float, float]]] = {}
                for r in group:
                    routing = r["routing"]
                    for k, n in routing["route_k_counts"].items():
                        counts[k] = counts.get(k, 0) + n
                    for k, v in routing["by_route_k"].items():
                        by_k.setdefault(k, []).append((v["episodes"], v["accuracy"],
                                                       v["tokens_per_task"]))
                total = sum(counts.values())
                mean_k = sum(int(k) * n for k, n in counts.items()) / total
                level_name = "{}-hop" if env == SEARCH else "level {}"  # hop count
                level_cell = "; ".join(
                    f"{level_name.format(lv)}: "
                    + ", ".join(f"K={k} ({n})" for k, n in sorted(v["counts"].items()))
                    + (f", accuracy {v['correct'] / v['episodes']:.3f}" if v["episodes"]
                       else "")
                    for lv, v in sorted(_level_totals(group).items())) or "-"
                by_k_cell = "; ".join(
                    f"K={k}: {sum(e * a for e, a, _ in v) / sum(e for e, _, _ in v):.3f} / "
                    f"{sum(e * t for e, _, t in v) / sum(e for e, _, _ in v):.0f}"
                    for k, v in sorted(by_k.items()))
                set_size = (f"{statistics.mean(r['mean_set_size'] for r in group):.2f}"
                            if checkpoint == "after" else "")
                lines.append(
                    f"| {env} | {label} | {algo} | {checkpoint} | "
                    + ", ".join(f"K={k} ({n})" for k, n in sorted(counts.items()))
                    + f" | {mean_k:.2f} | {set_size} | "
                    f"{sum(r['routing']['route_parse_failures'] for r in group)} | "
                    f"{level_cell} | {by_k_cell} |")
    return lines + _route_level_lines(routed)


def _level_totals(group: list[dict]) -> dict[str, dict[str, Any]]:
    """Per level (search: hop count), summed over ``group``'s rows (seeds): its route
    events by chosen K (``counts``), its tasks, and its episodes and correct ones (the
    level of an episode's first route)."""
    totals: dict[str, dict[str, Any]] = {}
    for r in group:
        routing = r["routing"]
        for level, ks in routing.get("by_level", {}).items():
            counts = totals.setdefault(level, {"counts": {}, "tasks": 0.0, "episodes": 0,
                                               "correct": 0.0})["counts"]
            for k, n in ks.items():
                counts[int(k)] = counts.get(int(k), 0) + n
        for level, v in routing.get("level_accuracy", {}).items():
            if level in totals:
                totals[level]["tasks"] += v["episodes"] / r["k"]
                totals[level]["episodes"] += v["episodes"]
                totals[level]["correct"] += v["episodes"] * v["accuracy"]
    return totals


def route_k_by_level(group: list[dict]) -> dict[str, dict[str, float]]:
    """Per level (search: hop count), the mean chosen K of the route events of ``group``
    (rows of one pair, algorithm and checkpoint, summed over seeds) and its standard
    error over tasks: a task's k episodes and their rounds count as one observation with
    the events' spread, which overstates the error when they vary together (conservative)."""
    out = {}
    for level, total in _level_totals(group).items():
        ks = total["counts"]
        n = sum(ks.values())
        mean = sum(k * c for k, c in ks.items()) / n
        var = sum(c * (k - mean) ** 2 for k, c in ks.items()) / max(n - 1, 1)
        n_tasks = total["tasks"] or n / group[0]["k"]
        out[level] = {"mean_k": mean, "se": math.sqrt(var / n_tasks), "events": n,
                      "tasks": n_tasks}
    return out


def _route_level_lines(routed: list[tuple[tuple[str, str], list[dict]]]) -> list[str]:
    """Whether harder tasks (more hops, a higher level) get bigger teams: mean K by
    level, and the hardest level's minus the easiest's (``verdicts.contrast``: about the
    trained policies' behaviour, so their evaluation's standard error decides it)."""
    lines = ["", "Mean chosen K by level (search: hops), ± its standard error over tasks; "
             "the hardest level's minus the easiest's, called beyond 2 standard errors:", "",
             "| env | pair | algo | checkpoint | mean K by level | hardest - easiest | "
             "harder tasks get |", "|---|---|---|---|---|---|---|"]
    rows_out = 0
    for (env, label), sel in routed:
        for algo in sorted({r["algo"] for r in sel}):
            for checkpoint in ("before", "after"):
                group = [r for r in sel if r["algo"] == algo and r["checkpoint"] == checkpoint]
                by_level = route_k_by_level(group) if group else {}
                if len(by_level) < 2:
                    continue
                name = "{}-hop" if env == SEARCH else "level {}"
                levels = sorted(by_level, key=float)
                low, high = by_level[levels[0]], by_level[levels[-1]]
                diff = high["mean_k"] - low["mean_k"]
                se = math.hypot(high["se"], low["se"])
                call = {"higher": "bigger teams", "lower": "smaller teams"}.get(
                    contrast(diff, se), "no difference beyond noise")
                lines.append(
                    f"| {env} | {label} | {algo} | {checkpoint} | "
                    + "; ".join(f"{name.format(lv)}: {by_level[lv]['mean_k']:.2f} ± "
                                f"{by_level[lv]['se']:.2f}" for lv in levels)
                    + f" | {diff:+.2f} ± {se:.2f} | {call} |")
                rows_out += 1
    return lines if rows_out else []


def _benchmark_lines(rows: list[dict], pairs: list[tuple[str, str]], algos: list[str]
                     ) -> list[str]:
    """avg@k per benchmark file (mean over seeds) and their macro average, per env."""
    lines: list[str] = []
    for env in sorted({e for e, _ in pairs}):
        names = list(dict.fromkeys(n for r in rows if r["env"] == env
                                   for n in r.get("benchmarks", {})))
        if not names:
            continue
        lines += ["", f"{env} on the benchmark files: avg@k, mean over seeds:", "",
                  "| workflow | algo | " + " | ".join(names) + " | macro |",
                  "|---|---|" + "---:|" * (len(names) + 1)]
        for workflow in [w for e, w in pairs if e == env]:
            groups = [("start", _start_rows(rows, (env, workflow)))]
            groups += [(a, _pair_rows(rows, (env, workflow), a, "after")) for a in algos]
            for algo, sel in groups:
                sel = [r for r in sel if "benchmarks" in r]
                if not sel:
                    continue
                means = [statistics.mean(r["benchmarks"][n]["avg_at_k"] for r in sel)
                         for n in names]
                lines.append(f"| {workflow} | {algo} | " + " | ".join(f"{m:.3f}" for m in means)
                             + f" | {statistics.mean(means):.3f} |")
    return lines


def write_plots(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    after = [r for r in rows if r["checkpoint"] == "after"]
    pairs = sorted({(r["env"], r["workflow"]) for r in after})
    algos = sorted({r["algo"] for r in after})
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(algos)}
    fig, axes = plt.subplots(1, len(pairs), figsize=(4 * len(pairs), 3.5), squeeze=False)
    for ax, pair in zip(axes[0], pairs, strict=True):
        for algo in algos:
            curves = [r["train_accuracy"] for r in after
                      if (r["env"], r["workflow"]) == pair and r["algo"] == algo]
            if curves:
                mean = [statistics.mean(c[i] for c in curves) for i in range(len(curves[0]))]
                ax.plot(range(1, len(mean) + 1), mean, label=algo, color=colors[algo])
        ax.set_title(f"{pair[0]}\n{pair[1]}", fontsize=8)
        ax.set_xlabel("step")
    axes[0][0].set_ylabel("training accuracy (mean over seeds)")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "learning_curves.png", dpi=120)
    plt.close(fig)
    markers = "osD^v<>p"
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for algo in algos:
        for index, pair in enumerate(pairs):
            sel = [r for r in after if r["algo"] == algo and (r["env"], r["workflow"]) == pair]
            ax.scatter([r["train_tokens"] for r in sel], [r["avg_at_k"] for r in sel],
                       color=colors[algo], marker=markers[index % len(markers)], s=18,
                       label=algo if index == 0 else None)
    ax.set_xscale("log")
    _finish(fig, ax, "generated training tokens (marker: env/workflow pair)", "held-out avg@k",
            7, out / "accuracy_vs_tokens.png")
    _plot_set_size(after, out, plt)


def _finish(fig, ax, xlabel: str, ylabel: str, legend_size: int, path: Path) -> None:
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_set_size(after: list[dict], out: Path, plt) -> None:
    """Routed runs: the mean active-set size and mean chosen K per training step
    (mean over seeds), against the SRPO paper's settled 1.638."""
    routed = sorted({(r["env"], r["workflow"]) for r in after if "mean_set_size_curve" in r})
    if not routed:
        return
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for env, label in routed:
        curves = [r for r in after if (r["env"], r["workflow"]) == (env, label)
                  and "mean_set_size_curve" in r]
        for key, style in (("mean_set_size_curve", "-"), ("route_mean_k_curve", ":")):
            mean = [statistics.mean(c[key][i] for c in curves)
                    for i in range(min(len(c[key]) for c in curves))]
            ax.plot(range(1, len(mean) + 1), mean, style,
                    label=f"{env.split('-')[1]} {label}: "
                          + ("mean set size" if key.startswith("mean") else "mean chosen K"))
    ax.axhline(1.638, color="gray", linestyle="--", label="paper's router (1.638)")
    _finish(fig, ax, "step", "size", 6, out / "routing_set_size.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    parser.add_argument("--out", default="")
    parser.add_argument("--workers", type=int, default=1,
                        help="runs in parallel, one process and one thread each")
    parser.add_argument("--envs", nargs="*", default=[],
                        help="run only the preset's pairs of these env ids")
    parser.add_argument("--labels", nargs="*", default=[],
                        help="run only the preset's pairs with these workflow labels")
    parser.add_argument("--seeds", nargs="*", type=int, default=[],
                        help="run only these of the preset's seeds")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: write the table and plots over the finished runs")
    parser.add_argument("--retable", nargs="+", type=Path, default=[], metavar="FOLDER",
                        help="run nothing: rewrite these folders' table.md from their "
                        "results.jsonl under today's verdict rule")
    args = parser.parse_args()
    if args.retable:
        for folder in args.retable:
            retable(folder)
            print(f"rewrote {folder / 'table.md'}")
        return
    if args.workers < 1:
        sys.exit(f"--workers={args.workers}: expected an int >= 1")
    known = {env for env, _ in PRESETS[args.preset]["pairs"]}
    if set(args.envs) - known:
        sys.exit(f"--envs={args.envs}: expected env ids of the {args.preset} preset, "
                 f"{sorted(known)}")
    labels = {label for _, label in PRESETS[args.preset]["pairs"]}
    if set(args.labels) - labels:
        sys.exit(f"--labels={args.labels}: expected workflow labels of the {args.preset} "
                 f"preset, {sorted(labels)}")
    if set(args.seeds) - set(PRESETS[args.preset]["seeds"]):
        sys.exit(f"--seeds={args.seeds}: expected seeds of the {args.preset} preset, "
                 f"{PRESETS[args.preset]['seeds']}")
    out = Path(args.out or f"runs/harness-{args.preset}")
    rows = run_preset(args.preset, out, workers=args.workers, envs=tuple(args.envs),
                      report_only=args.report, labels=tuple(args.labels),
                      seeds=tuple(args.seeds))
    if rows:
        print((out / "table.md").read_text())


if __name__ == "__main__":
    main()
