"""The harness's jobs, each run in a process of its own (``runner.make_pool``): a pair's
warm start, a pair and seed's starting evaluation, one training run read into table rows,
and the claim that keeps two harness invocations over one ``--out`` off the same run.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from srpo_agents.config import TrainConfig, holds_config
from srpo_agents.files import write_json_atomic
from srpo_agents.running.metrics_log import read_metrics_rows


def run_rows(config: TrainConfig, summary: dict, run_dir: Path, label: str = "") -> list[dict]:
    """A finished run's table rows: its "before" and "after" results with what its
    ``metrics.jsonl`` says of its training (tokens, gradient norms, set sizes, curves)."""
    steps = read_metrics_rows(run_dir / "metrics.jsonl")
    norms = [s["grad_norm"] for s in steps if "grad_norm" in s]
    mean_norm = statistics.mean(norms) if norms else 0.0
    train_tokens = sum(s["tokens_per_task"] for s in steps) * config.tasks_per_step * config.group_size
    common = {"env": config.env, "workflow": label or config.workflow, "algo": config.algo,
              "seed": config.seed, "steps": config.steps, "train_tokens": train_tokens,
              "grad_norm_cv": statistics.pstdev(norms) / mean_norm if mean_norm else 0.0,
              "mean_set_size": statistics.mean(s["mean_set_size"] for s in steps) if steps else 0.0,
              "events_dropped": sum(s["events_dropped"] for s in steps),
              # issue 60: equal steps and one clip rule, checkable per run
              "optimizer_steps": sum(s.get("updates", 0) for s in steps),
              "grad_clipped": _clipped_share(steps), "grad_norm_mean": mean_norm,
              "n_agents": config.n_agents,
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


def _clipped_share(steps: list[dict]) -> float | None:
    """The share of the run's optimizer steps whose pre-clip gradient norm exceeded
    ``max_grad_norm`` (None for runs logged before ``grad_clipped`` existed)."""
    logged = [s for s in steps if "grad_clipped" in s and s.get("updates")]
    if not logged:
        return None
    return sum(s["grad_clipped"] * s["updates"] for s in logged) / sum(
        s["updates"] for s in logged)


same_config = holds_config  # re-exported: the harness's name for it


def warm_start_job(config: TrainConfig) -> dict:
    """Build the pair's starting policy (cached in its ``warmstart_dir`` option)."""
    from srpo_agents.models.registry import prepare_policy

    _, meta = prepare_policy(config, Path(config.out), log=lambda *_: None)
    return meta


def _engine(config: TrainConfig, model: str):
    from srpo_agents.models.policy import load_policy, precision_kwargs, resolve_device
    from srpo_agents.rollout.engine import engine_for

    device = resolve_device(config.device)
    return engine_for(config, load_policy(model, device=device,
                                           **precision_kwargs(config.dtype, device)))


def benchmark_results(config: TrainConfig, engine, names: str, tasks: int) -> dict:
    """The engine's policy on each named benchmark file."""
    from srpo_agents.running.benchmark_sets import evaluate_benchmarks

    return evaluate_benchmarks(engine, config, names, config.eval_k, tasks)


def before_job(config: TrainConfig, path: Path, benchmarks: str = "", tasks: int = 0) -> dict:
    """The starting policy's held-out result for one pair and seed (cached in ``path``),
    and with ``benchmarks`` its result on each benchmark file."""
    from srpo_agents.running.evaluate import evaluate_start

    if not same_config(path, config):
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
    from srpo_agents.running.evaluate import evaluate, held_out, majority_at

    path = run_dir / "majority.json"
    if same_config(path, config):
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
    from srpo_agents.running.train import train

    run_dir = Path(config.out)
    if not same_config(run_dir / "summary.json", config):
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
    if majority and (not report_only or same_config(run_dir / "majority.json", config)):
        rows[-1]["majority"] = majority_result(config, run_dir, majority)
    return rows


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
