"""The harness's table (``table.md``): mean ± std over seeds per pair and algorithm, the
macro average, the paired differences and their verdicts (``srpo_agents.running.verdicts``), the
kappa ablation, the benchmark files and the routing sections; and ``retable``, which
rewrites a committed table from its rows.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from srpo_agents.running.verdicts import contrast, diff_cell, difference
from srpo_bench.harness.compare import compare_lines, noise_floor
from srpo_bench.harness.presets import KAPPA_ABLATION, PRESETS, REFERENCE, SEARCH
from srpo_bench.machine import describe

RULE = ("Verdicts by `srpo_agents/running/verdicts.py`: over several seeds \"ahead\"/\"behind\" "
        "only beyond max(2, t) standard errors (bootstrap over seeds and tasks, or the "
        "between-seed SE if larger) with every seed agreeing in sign, else \"within "
        "noise\"; a one-seed difference gives its per-task SE and is not called, since it "
        "says nothing of run-to-run spread.")


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
             "correct/M tokens | grad-norm CV | mean set size | events dropped | "
             "optimizer steps | clipped |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
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
                   f"{statistics.mean(col('mean_set_size')):.2f} | {sum(col('events_dropped'))} | "
                   f"{_steps_and_clipped(sel)} |"
                   if trained else "| | | | |"))
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
    return lines + route_level_lines(routed)


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


def route_level_lines(routed: list[tuple[tuple[str, str], list[dict]]]) -> list[str]:
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


def _steps_and_clipped(rows: list[dict]) -> str:
    """"optimizer steps | clipped" cells: each run's total steps (one number when the
    seeds agree) and the mean share of steps ``max_grad_norm`` clipped; blank for rows
    written before issue 60 logged them."""
    steps = sorted({r["optimizer_steps"] for r in rows if "optimizer_steps" in r})
    clipped = [r["grad_clipped"] for r in rows if r.get("grad_clipped") is not None]
    return (("/".join(map(str, steps)) if steps else "") + " | "
            + (f"{statistics.mean(clipped):.2f}" if clipped else ""))
