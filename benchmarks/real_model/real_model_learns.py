"""A real LLM learns under srpo on two CPU cores (issue 50): SmolLM2-135M-Instruct as a
team trained with SRPO, weighed against one agent trained alone and the team under GRPO.

    python benchmarks/real_model/real_model_learns.py pilot      # seed 10: the grid below
    python benchmarks/real_model/real_model_learns.py run [--seeds 0 1 2] [--only team-srpo ...]
        [--speed]                                                # issue 61: the recipe's SPEED
    python benchmarks/real_model/real_model_learns.py report     # the tables of what has finished

**The setting** is ``srpo_agents.running.real_recipe``: the candidate that
``benchmarks/real_model/real_model_candidates.py``'s rule chooses (its table:
real_model_candidates.md; a test holds the two equal); its env prompt version is recorded
with every run. The team is the env's team workflow (``TEAM``); the single agent plays
``single``.

**The pilot, and its rule (fixed before any pilot ran).** Team SRPO on seed 10,
``PILOT_STEPS`` steps of ``TASKS_PER_STEP`` tasks x G = 8, for each entry of ``GRID``
(full update at two learning rates; one LoRA per role). After each, the trained policy
plays ``PILOT_TASKS`` tasks of the **validation** split ``PILOT_K`` times; so does the
starting policy once. A grid entry's score is its mean gain in validation avg@k over the
pilot seeds. The chosen entry is the highest score; an entry within 0.01 of a higher one
wins if it is a full update and the other LoRA, then the smaller lr (the simpler, slower
change). The test split is not read (the runs' own before/after use ``eval_tasks`` 4 and
nothing reads them). Steps of the real runs: as many as fit 2 hours with both
evaluations, from the pilot's measured seconds a step and an evaluation's measured cost.
Fixed, not searched (each costs a pilot run, about 40 minutes on 2 cores): G = 8 and
128 new tokens, where the candidates' table measured 69% mixed groups and 11% of answers
cut off; 4 tasks a step, as the earlier real-model runs. One pilot seed, three entries:
two seeds of four entries (the first plan) would take over 5 hours of the 2 cores.

**When the chosen entry collapses** (added after the first run, team SRPO at full lr
3e-5 on seed 0, fell into repeating itself; written before any run of another entry).
A run has collapsed when, for ``COLLAPSE_STEPS`` training steps in a row, its mean
response length was at least ``COLLAPSE_LENGTH`` of ``max_new_tokens`` while its training
accuracy was below its first step's. Its entry is then dropped (kept in the pilot's
record with the evidence, its run folder renamed ``*-collapsed``) and the runs start
again from seed 0 with the rule's next choice among the entries left. A run is checked
when ``run`` reaches it (an unfinished one by its metrics so far) and when it finishes.

**The tasks** are issue 50's: level 0 split by question text (``real_recipe.ISSUE_50_TASKS``),
as every split was before issue 60, so a run today pairs with a committed one task by task.
Held out by wording only: a score here says the team learned the level's arithmetic, not
that it carries to arithmetic it never trained on.

**The runs.** Seeds 0, 1, 2 of: the team under SRPO (``team-srpo``), the single agent
under SRPO (one agent: SRPO's sets have K = 1, so it is GRPO there) (``single``) and the
team under GRPO (``team-grpo``), same steps, tasks and lr; ``EVAL_TASKS`` held-out test
tasks x ``EVAL_K`` episodes before and after. A run resumes from its checkpoint (run the
command again); a finished one is read back. Records:
``benchmarks/results/real_model_learns.json`` (a list, one object per finished run) and
the table beside it, made from it.

**Learning unchanged (issue 61).** ``run --speed`` runs the same seeds with the recipe's
speed settings (``real_recipe.speed_settings``: vLLM samples and evaluates where it is
installed, so run it with ``.venv-vllm/bin/python``) into folders of their own; their records say
``"config": "speed"`` (issue 50's, ``"issue50"``), and the report weighs each run name's
speed runs against its issue-50 runs, "after" against "after" on the same tasks, by the
verdict rule.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from srpo_agents.config import TrainConfig
from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.engine import engine_for
from srpo_agents.running.evaluate import evaluate, held_out, majority_at
from srpo_agents.running.real_recipe import (
    BATCH,
    ISSUE_50_TASKS,
    RUN,
    SPEED,
    TEAM,
    real_config,
    run_one,
    speed_settings,
)
from srpo_agents.running.verdicts import diff_cell, difference, task_difference
from srpo_bench.machine import cpu_model
from srpo_bench.real_model import chosen

RESULTS = Path(__file__).resolve().parents[1] / "results"

def setting_name() -> str:
    """The candidates' rule's choice (real_model_candidates.json)."""
    path = RESULTS / "real_model_candidates.json"
    name = chosen(json.loads(path.read_text())) if path.exists() else None
    if name is None:
        sys.exit("no setting chosen yet: run benchmarks/real_model/real_model_candidates.py first")
    return name


TASKS_PER_STEP, GROUP = BATCH["tasks_per_step"], BATCH["group_size"]
PILOT_SEEDS, PILOT_STEPS, PILOT_TASKS, PILOT_K = (10,), 16, 200, 2
GRID = {"full lr 1e-5": {"lr": 1e-5}, "full lr 3e-5": {"lr": 3e-5},
        "lora lr 3e-4": {"lr": 3e-4, "per_role_adapters": "lora"}}
EVAL_TASKS, EVAL_K = RUN["eval_tasks"], RUN["eval_k"]
FORMAT_NOTE = (
    "Readable: the team's final answer was in \\boxed{} (the format the prompts ask for); "
    "accuracy when readable: the right share of those. The env grades every final "
    "answer, its last \\boxed{} or else its last number, so a team that learns to end on "
    "its answer gains without boxing it: a gain that is only format shows as a readable "
    "rate or a cut-off rate that moves while accuracy when readable does not.")
ANYWHERE_NOTE = (
    "Written anywhere: the team wrote the right answer somewhere in its texts, as any box "
    "or number (the env's answer_anywhere); a trained accuracy above the untrained team's "
    "rate is more than a better reading of answers it already wrote.")
BUDGET_S = 2 * 3600
"""Each run's wall-time budget, evaluations included (issue 50)."""
RUNS = {"team-srpo": {"workflow": TEAM, "algo": "srpo"},
        "single": {"workflow": "single", "algo": "srpo"},
        "team-grpo": {"workflow": TEAM, "algo": "grpo"}}


def validation(config: TrainConfig, model: str) -> dict:
    """``model`` (a run's trained policy folder, or the base) on the validation split."""
    config = TrainConfig(**{**config.to_dict(), "model": model, "per_role_adapters": ""})
    policy = load_policy(model)
    engine = engine_for(config, policy)
    envs, indices = held_out(config, policy.count_tokens, split="validation",
                             wanted=PILOT_TASKS)
    start = time.monotonic()
    result = evaluate(engine, envs, indices, PILOT_K, tag="pilot")
    return {**result, "seconds": time.monotonic() - start}


def pilot(out: Path) -> None:
    path = RESULTS / "real_model_pilot_v2.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    if "base" not in data:
        team = real_config(PILOT_SEEDS[0], out / "pilot-base", workflow=TEAM, **ISSUE_50_TASKS)
        data["base"] = validation(team, team.model)   # the untrained team
        path.write_text(json.dumps(data, indent=1) + "\n")
    for name, changes in GRID.items():
        for seed in PILOT_SEEDS:
            key = f"{name}, seed {seed}"
            if key in data:
                continue
            config = real_config(seed, out / f"pilot-{name.replace(' ', '-')}-s{seed}",
                                 workflow=TEAM, algo="srpo", steps=PILOT_STEPS,
                                 eval_tasks=4, eval_k=1, **changes, **ISSUE_50_TASKS)
            summary = run_one(config)
            rows = [json.loads(line) for line in
                    (Path(config.out) / "metrics.jsonl").read_text().splitlines()]
            trained = validation(config, str(Path(config.out) / "policy"))
            data[key] = {"validation": trained, "diff": task_difference(data["base"], trained),
                         "step_seconds": [r["seconds"] for r in rows],
                         "reward": [r["reward"] for r in rows],
                         "wall_s": summary["time_breakdown"]["total"]}
            path.write_text(json.dumps(data, indent=1) + "\n")
            write_pilot(data)
    write_pilot(data)


def choose(data: dict) -> str | None:
    """The pilot's rule (module docstring) over the grid entries with every seed done,
    less those dropped for a collapse."""
    scores, dropped = {}, data.get("dropped", {})
    for name in GRID:
        gains = [data[f"{name}, seed {s}"]["diff"]["avg_at_k"] for s in PILOT_SEEDS
                 if f"{name}, seed {s}" in data]
        if len(gains) == len(PILOT_SEEDS):
            scores[name] = sum(gains) / len(gains)
    if len(scores) < len(GRID):
        return None
    scores = {name: score for name, score in scores.items() if name not in dropped}
    if not scores:
        return None
    simple = sorted(scores, key=lambda n: ("lora" in n, GRID[n]["lr"]))  # simplest first
    best = max(scores.values())
    return next(n for n in simple if scores[n] >= best - 0.01)


def write_pilot(data: dict) -> None:
    base = data["base"]
    lines = ["# Real-model pilot (issue 50): team SRPO on the validation split", "",
             "`python benchmarks/real_model/real_model_learns.py pilot`: "
             f"setting \"{setting_name()}\", "
             f"{PILOT_STEPS} steps of {TASKS_PER_STEP} tasks x G = {GROUP}, seeds "
             f"{', '.join(map(str, PILOT_SEEDS))}; the trained policy on {PILOT_TASKS} "
             f"validation tasks x k = {PILOT_K}. Base: avg@{PILOT_K} "
             f"{base['avg_at_k']:.3f} +- {base['avg_at_k_stderr']:.3f}, readable "
             f"{base.get('boxed_rate', float('nan')):.3f}. The rule is in the script's "
             "docstring, fixed before the pilot ran.", "",
             "| grid entry | seed | validation avg@k | gain (paired) | readable | accuracy "
             "when readable | tokens / task | cut off | seconds a step | validation (s) | "
             "wall (min) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| untrained team | - | {base['avg_at_k']:.3f} | | {base['boxed_rate']:.3f} | "
             f"{base['boxed_accuracy']:.3f} | {base['tokens_per_task']:.0f} | "
             f"{base['cut_off_rate']:.3f} | | {base['seconds']:.0f} | |"]
    for name in GRID:
        for seed in PILOT_SEEDS:
            row = data.get(f"{name}, seed {seed}")
            if row is None:
                lines.append(f"| {name} | {seed} | not run yet | | | | | | | | |")
                continue
            v, d = row["validation"], row["diff"]
            lines.append(
                f"| {name} | {seed} | {v['avg_at_k']:.3f} | {d['avg_at_k']:+.3f} +- "
                f"{d['avg_at_k_stderr']:.3f} | {v['boxed_rate']:.3f} | "
                f"{v['boxed_accuracy']:.3f} | {v['tokens_per_task']:.0f} | "
                f"{v['cut_off_rate']:.3f} | "
                f"{sum(row['step_seconds']) / len(row['step_seconds']):.0f} | "
                f"{v['seconds']:.0f} | {row['wall_s'] / 60:.0f} |")
    chosen = choose(data)
    lines += ["", FORMAT_NOTE, ""]
    for name, why in data.get("dropped", {}).items():
        lines += [f"Dropped after the pilot: {name}. Its run {why['run']} collapsed at step "
                  f"{why['collapsed_at_step']} (the rule in the script's docstring): mean "
                  f"response length a step {', '.join(map(str, why['response_length']))} "
                  f"of at most {why['max_new_tokens']} tokens; training accuracy "
                  f"{', '.join(f'{a:.3f}' for a in why['accuracy'])}.", ""]
    lines += [f"Chosen by the rule: {chosen}. Steps of the runs: "
              f"{fitting_steps(data, chosen)}, as many as fit {BUDGET_S // 3600} hours with "
              f"both evaluations ({EVAL_TASKS} tasks x k = {EVAL_K}, each costed from the "
              "validations above by the episodes it plays) at its mean seconds a step."
              if chosen else
              "Not every grid entry has run on every pilot seed: nothing is chosen yet."]
    (RESULTS / "real_model_pilot_v2.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


CONFIGS = {"issue50": dict, "speed": speed_settings}
"""The records' ``config`` and what it adds to the recipe: issue 50's recipe, and the
same with issue 61's speed settings, vLLM sampling where it is installed (a record
without the key is issue 50's)."""


def config_name(record: dict) -> str:
    return record.get("config", "issue50")


def record(name: str, seed: int, summary: dict, config_name: str = "issue50") -> dict:
    config, before, after = summary["config"], summary["before"], summary["after"]
    diff = task_difference(before, after)
    return {"config": config_name, "model": config["model"], "env": config["env"],
            "workflow": config["workflow"],
            "algo": config["algo"], "run": name, "seed": seed, "steps": config["steps"],
            "lr": config["lr"], "dtype": config.get("dtype"), "backend": config.get("backend"),
            "tasks": after["tasks"], "k": after["k"], "before": before["avg_at_k"],
            "after": after["avg_at_k"], "diff": diff["avg_at_k"],
            "se": diff["avg_at_k_stderr"], "readable_before": before.get("boxed_rate"),
            "readable_after": after.get("boxed_rate"),
            "accuracy_when_readable_before": before.get("boxed_accuracy"),
            "accuracy_when_readable_after": after.get("boxed_accuracy"),
            "anywhere_before": before.get("answer_anywhere_rate"),
            "anywhere_after": after.get("answer_anywhere_rate"),
            "cut_off_before": before.get("cut_off_rate"),
            "cut_off_after": after.get("cut_off_rate"),
            "tokens_per_task_before": before["tokens_per_task"],
            "tokens_per_task_after": after["tokens_per_task"],
            # the shared "before" counts in each run that uses it
            "wall_s": summary["time_breakdown"]["total"] + summary.get("before_seconds", 0.0),
            "seconds": {"before": summary.get("before_seconds", 0.0),
                        **summary["time_breakdown"]},
            "prompt_version": "example-v1" if config["extra_env_kwargs"] else "default",
            "per_task_after": after["per_task_avg"],
            "per_task_votes_after": after.get("per_task_votes"),
            "machine": cpu_model()}


def fitting_steps(data: dict, name: str) -> int:
    """As many steps as fit ``BUDGET_S`` with both evaluations: the entry's mean seconds
    a step in the pilot; the evaluations' cost scaled from the pilot's validations by the
    episodes they play (the base's for "before", the trained policy's for "after")."""
    rows = [data[f"{name}, seed {s}"] for s in PILOT_SEEDS]
    seconds = [x for row in rows for x in row["step_seconds"]]
    scale = EVAL_TASKS * EVAL_K / (PILOT_TASKS * PILOT_K)
    before = data["base"]["seconds"] * scale
    after = sum(row["validation"]["seconds"] for row in rows) / len(rows) * scale
    return int((BUDGET_S - before - after) // (sum(seconds) / len(seconds)))


COLLAPSE_STEPS, COLLAPSE_LENGTH = 3, 0.9


def collapse_step(rows: list[dict], max_new_tokens: int) -> int | None:
    """The step at which a run's metrics rows show it collapsed (module docstring), or
    None: ``COLLAPSE_STEPS`` steps in a row of mean response length at least
    ``COLLAPSE_LENGTH`` x ``max_new_tokens`` and training accuracy below the first
    step's."""
    streak = 0
    for row in rows:
        long = row["response_length"] >= COLLAPSE_LENGTH * max_new_tokens
        streak = streak + 1 if long and row["accuracy"] < rows[0]["accuracy"] else 0
        if streak == COLLAPSE_STEPS:
            return row["step"]
    return None


def drop_if_collapsed(pilot_data: dict, name: str, config: TrainConfig) -> bool:
    """Drop grid entry ``name`` if ``config``'s run (finished or not) has collapsed: the
    evidence goes into the pilot's record, the run's folder to ``*-collapsed``."""
    folder = Path(config.out)
    metrics = folder / "metrics.jsonl"
    if not metrics.is_file():
        return False
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    step = collapse_step(rows, config.max_new_tokens)
    if step is None:
        return False
    pilot_data.setdefault("dropped", {})[name] = {
        "run": folder.name, "seed": config.seed, "collapsed_at_step": step,
        "max_new_tokens": config.max_new_tokens,
        "response_length": [round(r["response_length"], 1) for r in rows],
        "accuracy": [r["accuracy"] for r in rows]}
    folder.rename(folder.with_name(f"{folder.name}-collapsed"))
    (RESULTS / "real_model_pilot_v2.json").write_text(json.dumps(pilot_data, indent=1) + "\n")
    write_pilot(pilot_data)
    print(f"{folder.name} collapsed at step {step}: {name} is dropped")
    return True


def run(args, out: Path) -> None:
    """The runs, with the recipe's ``RUN``, which must be the pilot's choice; from seed 0
    again with the next choice when a run of it collapses."""
    pilot_data = json.loads((RESULTS / "real_model_pilot_v2.json").read_text())
    while not run_choice(args, out, pilot_data):
        pass


def run_choice(args, out: Path, pilot_data: dict) -> bool:
    """The runs of the pilot's current choice; False when one collapsed (dropped)."""
    name = choose(pilot_data)
    if name is None:
        sys.exit("the pilot has not finished, or every entry was dropped")
    wanted = {**GRID[name], "steps": args.steps or fitting_steps(pilot_data, name)}
    variant = "speed" if args.speed else "issue50"
    suffix = "" if variant == "issue50" else f"-{variant}"
    configs = {(run_name, seed): real_config(seed, out / f"{run_name}-s{seed}{suffix}",
                                             **{**RUN, **wanted, **changes,
                                                **ISSUE_50_TASKS, **CONFIGS[variant]()})
               for seed in args.seeds for run_name, changes in RUNS.items()
               if not args.only or run_name in args.only}
    # a run left unfinished may have collapsed already (it holds the choice's settings)
    if any(drop_if_collapsed(pilot_data, name, c) for c in configs.values()):
        return False
    differ = {k: (RUN.get(k), v) for k, v in wanted.items() if RUN.get(k) != v}
    if differ and not args.steps:
        sys.exit(f"srpo_agents/running/real_recipe.py RUN is not the pilot's choice "
                 f"({name}): (RUN's, the pilot's) {differ}")
    path = RESULTS / "real_model_learns.json"
    records = json.loads(path.read_text()) if path.exists() else []
    # runs of an entry dropped earlier stay in the file, out of this choice's tables
    ours = [r for r in records if r.get("lr") == wanted["lr"]]
    done = {(r["run"], r["seed"]) for r in ours if config_name(r) == variant}
    for (run_name, seed), config in configs.items():
        if (run_name, seed) in done:
            continue
        summary = run_one(config)
        if drop_if_collapsed(pilot_data, name, config):
            return False
        records.append(record(run_name, seed, summary, variant))
        ours.append(records[-1])
        path.write_text(json.dumps(records, indent=1) + "\n")
    write_report(ours)
    return True


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def write_report(all_records: list[dict]) -> None:
    records = [r for r in all_records if config_name(r) == "issue50"]
    speed = [r for r in all_records if config_name(r) == "speed"]
    steps = sorted({r["steps"] for r in records})
    lines = ["# A real LLM learns on two CPU cores (issue 50)", "",
             "`python benchmarks/real_model/real_model_learns.py run`: "
             f"{'/'.join(map(str, steps))} "
             f"steps of the recipe (srpo_agents/running/real_recipe.py); setting "
             f"\"{setting_name()}\"; {EVAL_TASKS} held-out test tasks x k = {EVAL_K} before and "
             "after; gain is after - before, paired by task (+- its standard error).", "",
             "| run | seed | before | after | gain | z | readable | accuracy when readable "
             "| written anywhere | cut off | tokens / task | wall (min) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(records, key=lambda r: (r["run"], r["seed"])):
        lines.append(f"| {r['run']} | {r['seed']} | {r['before']:.3f} | {r['after']:.3f} | "
                     f"{r['diff']:+.3f} +- {r['se']:.3f} | {z_score(r['diff'], r['se'])} | "
                     f"{r['readable_before']:.3f} -> {r['readable_after']:.3f} | "
                     f"{r['accuracy_when_readable_before']:.3f} -> "
                     f"{r['accuracy_when_readable_after']:.3f} | "
                     f"{rate(r['anywhere_before'])} -> {rate(r['anywhere_after'])} | "
                     f"{r['cut_off_before']:.3f} -> "
                     f"{r['cut_off_after']:.3f} | {r['tokens_per_task_before']:.0f} -> "
                     f"{r['tokens_per_task_after']:.0f} | {r['wall_s'] / 60:.0f} |")
    lines += ["", FORMAT_NOTE + " " + ANYWHERE_NOTE]
    by_run = {name: [{"seed": r["seed"], "per_task_avg": r["per_task_after"]}
                     for r in records if r["run"] == name] for name in RUNS}
    if by_run["team-srpo"] and by_run["single"]:
        lines += ["", "Team - single agent (after): "
                  + diff_cell(difference(by_run["team-srpo"], by_run["single"])) + "."]
        lines += ["", "Team - the single agent's majority vote at about the team's tokens: "
                  + majority_line(records) + "."]
    if by_run["team-srpo"] and by_run["team-grpo"]:
        lines += ["", "SRPO - GRPO (the team, after): "
                  + diff_cell(difference(by_run["team-srpo"], by_run["team-grpo"])) + "."]
    if speed:
        lines += speed_lines(speed, by_run)
    (RESULTS / "real_model_learns.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def speed_lines(speed: list[dict], by_run: dict[str, list[dict]]) -> list[str]:
    """Issue 61's check: the runs with the speed settings (``SPEED``), and each run
    name's "after" against its issue-50 run's on the same tasks, by the verdict rule."""
    lines = ["", "## With issue 61's speed settings (learning unchanged?)", "",
             f"The same runs with `{SPEED}` and vLLM sampling where installed (`run --speed`, "
             "run by `.venv-vllm/bin/python`; each record's `backend` says which).", "",
             "Minutes of each run: the shared \"before\" evaluation, the steps' sampling "
             "and updates, the \"after\" evaluation, the rest (model and engine loading, "
             "checkpoints), and the whole run.", "",
             "| run | seed | machine | sampler | before | after | gain | z | tokens / task "
             "| before eval | sampling | update | after eval | rest | wall (min) |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(speed, key=lambda r: (r["run"], r["seed"])):
        parts = r.get("seconds", {})
        minutes = " | ".join(f"{parts[k] / 60:.1f}" if k in parts else "-" for k in
                             ("before", "generation", "update", "evaluation"))
        rest = (f"{(parts['total'] - parts['generation'] - parts['update'] - parts['evaluation']) / 60:.1f}"
                if parts else "-")
        lines.append(f"| {r['run']} | {r['seed']} | {r.get('machine', '-')} | "
                     f"{r.get('backend', '-')} | {r['before']:.3f} | "
                     f"{r['after']:.3f} | {r['diff']:+.3f} +- {r['se']:.3f} | "
                     f"{z_score(r['diff'], r['se'])} | {r['tokens_per_task_after']:.0f} | "
                     f"{minutes} | {rest} | {r['wall_s'] / 60:.1f} |")
    lines += [f"\nSeed {r['seed']}'s minutes: {r['timing_note']}" for r in speed
              if r.get("timing_note")]
    for name in RUNS:
        fast = [{"seed": r["seed"], "per_task_avg": r["per_task_after"]}
                for r in speed if r["run"] == name]
        if fast and by_run[name]:
            lines += ["", f"{name}, speed settings - issue 50's (after): "
                      + diff_cell(difference(fast, by_run[name])) + "."]
    return lines


def z_score(diff: float, se: float) -> str:
    """diff / se, or "-" where the paired differences were all equal (se 0)."""
    return f"{diff / se:+.1f}" if se > 0 else "-"


def majority_line(records: list[dict]) -> str:
    """The team against the single agent's plurality vote over as many of its episodes
    as the team's tokens buy (at most its k), seed by seed, under the verdict rule."""
    teams, votes, sizes = [], [], []
    for team in (r for r in records if r["run"] == "team-srpo"):
        single = next((r for r in records if r["run"] == "single"
                       and r["seed"] == team["seed"]), None)
        if single is None or not single["per_task_votes_after"]:
            continue
        size = max(1, min(EVAL_K, round(team["tokens_per_task_after"]
                                        / single["tokens_per_task_after"])))
        teams.append({"seed": team["seed"], "per_task_avg": team["per_task_after"]})
        votes.append({"seed": team["seed"], "per_task_avg": [
            majority_at(v, size) for v in single["per_task_votes_after"]]})
        sizes.append(f"seed {team['seed']} a vote of {size}")
    if not teams:
        return "no seed with both"
    return f"{diff_cell(difference(teams, votes))} ({', '.join(sizes)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["pilot", "run", "report"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None,
                        help="override the recipe's steps (a trial; recorded in each run)")
    parser.add_argument("--only", nargs="*", default=None, choices=list(RUNS))
    parser.add_argument("--speed", action="store_true",
                        help="the runs with the recipe's speed settings (issue 61)")
    parser.add_argument("--out", default="runs/real-model-learns")
    args = parser.parse_args()
    out = Path(args.out)
    if args.mode == "pilot":
        pilot(out)
    elif args.mode == "run":
        run(args, out)
    else:
        pilot_path = RESULTS / "real_model_pilot_v2.json"
        pilot_data = json.loads(pilot_path.read_text()) if pilot_path.exists() else {}
        if pilot_data:
            write_pilot(pilot_data)
        path = RESULTS / "real_model_learns.json"
        name = choose(pilot_data) if pilot_data else None
        if path.exists() and name:
            write_report([r for r in json.loads(path.read_text())
                          if r.get("lr") == GRID[name]["lr"]])


if __name__ == "__main__":
    main()
