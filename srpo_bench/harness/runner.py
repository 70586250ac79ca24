"""Running a preset: its pairs' settings and warm starts, the jobs in order on a pool of
worker processes, finished runs read back and rows kept from earlier invocations, then
the table and plots (``report``, ``plots``, ``compare``).
"""

from __future__ import annotations

import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from srpo_agents.config import TrainConfig
from srpo_agents.files import write_json_atomic
from srpo_agents.running.metrics_log import write_json_lines_atomic
from srpo_agents.tiny.config import tiny_run
from srpo_bench.harness.compare import compare_lines, write_compare_plots
from srpo_bench.harness.jobs import before_job, run_job, same_config, warm_start_job
from srpo_bench.harness.plots import write_plots
from srpo_bench.harness.presets import KAPPA_ABLATION, PRESETS, REFERENCE
from srpo_bench.harness.report import twin_floors, write_table


def _one_thread() -> None:
    # Two workers on two cores: one OpenMP thread each, or they fight over the cores.
    import torch

    torch.set_num_threads(1)


def make_pool(workers: int):
    """A pool of ``workers`` spawned processes of one torch thread each (None for one
    worker: ``map_jobs`` then runs the jobs here, in order)."""
    if workers <= 1:
        return None
    return ProcessPoolExecutor(max_workers=workers, initializer=_one_thread,
                               mp_context=multiprocessing.get_context("spawn"))


def map_jobs(pool, function, jobs: list[tuple]) -> list:
    """``function(*job)`` for each job, in the pool (``make_pool``) or here; in order."""
    if pool is None:
        return [function(*job) for job in jobs]
    return [future.result() for future in [pool.submit(function, *job) for job in jobs]]


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
    scripts (``benchmarks/learning/search_track.py`` builds the search track's there), or a
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

    pool = make_pool(workers)
    try:
        starts: dict[tuple[str, str], str] = {}
        if base["model"] == "tiny":
            starts, own, jobs = warm_start_plan(preset, out, base)
            if not report_only:
                log(f"harness: {len(jobs)} warm starts")
                metas = map_jobs(pool, warm_start_job, jobs)
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
                       if same_config(job[1], job[0])}
        else:
            log(f"harness: {len(keys)} starting evaluations")
            befores = dict(zip(keys, map_jobs(pool, before_job, before_jobs), strict=True))
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
        rows = [row for rows_ in map_jobs(pool if not report_only else None, run_job, jobs)
                for row in rows_]
        rows += same_as_rows(preset, rows)
    finally:
        if pool is not None:
            pool.shutdown()
    kept = kept_rows(out / "results.jsonl", rows, PRESETS[name])
    rows += kept
    write_json_lines_atomic(out / "results.jsonl", rows)
    command = f"python benchmarks/comparisons/harness.py --preset {name} --out {out}"
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
    note = ("Kept from an earlier invocation into this folder (read from results.jsonl, "
            "not run again): " + ", ".join(
                f"{e} {w} {a} seed {s}" + (f" twin {t}" if t else "")
                for e, w, a, s, t in kept_runs) + ".") if kept_runs else ""
    write_table([r for r in rows if not r.get("rollout_seed")], out / "table.md", command,
                0.0 if report_only else time.monotonic() - started,
                [c for c in preset.get("compare", []) if c[0] in {e for e, _ in preset["pairs"]}],
                extra, note, twin_floors(rows, preset))
    write_plots([r for r in rows if not r.get("rollout_seed")], out)
    if preset.get("team_pairs"):
        write_compare_plots(rows, preset, out, REFERENCE)
    return rows
