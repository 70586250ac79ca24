"""The verdicts of the comparison preset (``benchmarks/comparisons/harness.py --preset compare``):
statistics over seeds and tasks, the noise floor from twin runs, the compute-matched
references, the clip fraction by update, and the forest plot and learning curves.

Every difference is A minus B on the same held-out tasks, paired by seed (the runs of
one seed share their start, their "before" evaluation and their step-0 rollouts) and by
task within a seed; ``srpo_agents.running.verdicts`` computes its standard error and decides it.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np

from srpo_agents.running.verdicts import Floor, common_seeds, diff_cell, difference, seeds_for

DELTAS = (0.01, 0.02)  # the differences the noise floor is asked to resolve


def _by_seed(rows: list[dict]) -> dict[int, dict]:
    return {r["seed"]: r for r in rows}


def _difference(rows_a: list[dict], rows_b: list[dict]) -> dict | None:
    """``difference``, or None when the two share no seed yet (a partial run)."""
    if not common_seeds(rows_a, rows_b):
        return None
    return difference(rows_a, rows_b)


def _select(rows: list[dict], pair, algo: str, checkpoint: str = "after",
            rollout_seed: int = 0) -> list[dict]:
    return [r for r in rows if (r["env"], r["workflow"]) == tuple(pair) and r["algo"] == algo
            and r["checkpoint"] == checkpoint and r.get("rollout_seed", 0) == rollout_seed]


def noise_floor(rows: list[dict], pair, algo: str) -> dict | None:
    """The run-to-run spread of one algorithm's gain from one start: per seed, the twin
    runs (rollout_seed 0 and 1) differ only in what they sampled, so their gap has
    variance 2 sigma^2 (sigma: one run's spread around its expected gain, evaluation
    noise included). Two algorithms' per-seed difference then has sd sqrt(2) sigma, and
    resolving a difference delta takes the n seeds at which it clears the verdict's bar:
    delta > bar(n) sqrt(2) sigma / sqrt(n) (about 8 sigma^2 / delta^2 for many seeds)."""
    first, twin = _select(rows, pair, algo), _select(rows, pair, algo, rollout_seed=1)
    start = _select(rows, pair, algo, "before")
    seeds = sorted(set(_by_seed(first)) & set(_by_seed(twin)) & set(_by_seed(start)))
    if len(seeds) < 2:  # one gap says nothing of a spread
        return None
    a, b, s0 = _by_seed(first), _by_seed(twin), _by_seed(start)
    gains = [(a[s]["avg_at_k"] - s0[s]["avg_at_k"], b[s]["avg_at_k"] - s0[s]["avg_at_k"])
             for s in seeds]
    gap = difference([a[s] for s in seeds], [b[s] for s in seeds])
    floor = Floor.from_twin_gaps(gap["per_seed"])
    return {"seeds": seeds, "gains": gains, "gap": gap, "sigma": floor.sigma, "floor": floor,
            "task_se": statistics.mean(gap["per_seed_se"]) / math.sqrt(2),
            # two algorithms' one-seed difference spreads sqrt(2) sigma
            "seeds_for": {delta: seeds_for(delta, math.sqrt(2) * floor.sigma)
                          for delta in DELTAS}}


def _noise_lines(rows, pairs, reference) -> list[str]:
    floors = [(pair, noise_floor(rows, pair, reference)) for pair in pairs]
    floors = [(p, f) for p, f in floors if f]
    if not floors:
        return []
    lines = ["", "## The noise floor", "",
             f"{reference} twice per seed from the same start, the second run with "
             "`rollout_seed=1` (other training draws, rollouts and evaluation samples; the "
             "same warm start, held-out tasks and 'before'). sigma is one run's spread "
             "around its expected gain (evaluation noise included): sqrt(mean gap^2 / 2). "
             "Seeds needed: the n at which a true difference delta between two algorithms "
             "clears the verdicts' bar, delta > bar(n) sqrt(2) sigma / sqrt(n).", "",
             "| env | workflow | seed: gain, twin gain | twin gap (pooled) | sigma | "
             "per-task SE of one gain | seeds for 0.01 | seeds for 0.02 |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    for (env, workflow), f in floors:
        gains = "; ".join(f"{s}: {g:+.3f}, {t:+.3f}" for s, (g, t) in zip(
            f["seeds"], f["gains"], strict=True))
        lines.append(f"| {env} | {workflow} | {gains} | {f['gap']['diff']:+.3f} ± "
                     f"{f['gap']['se']:.3f} | {f['sigma']:.3f} | {f['task_se']:.3f} | "
                     + " | ".join(str(f["seeds_for"][d] or "> 1000") for d in DELTAS) + " |")
    return lines


def _verdict_lines(rows, pairs, reference, algos, same_as, kappa) -> list[str]:
    lines = ["", "## Verdicts", "",
             f"{reference} minus each baseline, held-out avg@k after training (see "
             "`srpo_agents/running/verdicts.py` for the standard error). A baseline shown as "
             "\"= X\" is identical to X on that pair by construction (proven by "
             "`tests/test_compare.py`, which trains both 2 steps and compares the weights), "
             "so it was run once.", "",
             "| env | workflow | baseline | after - start (baseline) | "
             f"{reference} - baseline |", "|---|---|---|---|---|"]
    for pair in pairs:
        ref = _select(rows, pair, reference)
        for algo in algos:
            other = _select(rows, pair, algo)
            if algo == reference or not ref or not other:
                continue
            alias = same_as.get(tuple(pair), {}).get(algo)
            name = f"{algo} (= {alias})" if alias else algo
            gain = _difference(other, _select(rows, pair, algo, "before"))
            against = _difference(ref, other)
            if gain is None or against is None:
                continue
            versus = diff_cell(against) if alias != reference else "identical by construction"
            lines.append(f"| {pair[0]} | {pair[1]} | {name} | {gain['diff']:+.3f} ± "
                         f"{gain['se']:.3f} | {versus} |")
    ref_gains = [(p, _select(rows, p, reference), _select(rows, p, reference, "before"))
                 for p in pairs]
    lines += ["", f"{reference} after minus the shared start (did the team learn?):", "",
              "| env | workflow | after - start |", "|---|---|---|"]
    lines += [f"| {p[0]} | {p[1]} | {diff_cell(d)} |" for p, a, b in ref_gains
              if (d := _difference(a, b)) is not None]
    if set(kappa) <= set(algos):
        lines += ["", "Kappa (the paper's ordering: 1/sqrt K above sum above mean):", "",
                  "| env | workflow | srpo - srpo_sum | srpo_sum - srpo_mean | ordering |",
                  "|---|---|---|---|---|"]
        for pair in pairs:
            sel = [_select(rows, pair, a) for a in kappa]
            if not all(sel):
                continue
            if same_as.get(tuple(pair), {}).get(kappa[1]) == kappa[0]:
                lines.append(f"| {pair[0]} | {pair[1]} | identical (every set has K = 1) "
                             "| identical | not testable here |")
                continue
            top, low = _difference(sel[0], sel[1]), _difference(sel[1], sel[2])
            if top is None or low is None:
                continue
            held = ("held" if top["verdict"] == low["verdict"] == "ahead" else
                    "contradicted" if "behind" in (top["verdict"], low["verdict"]) else
                    "not separated")
            lines.append(f"| {pair[0]} | {pair[1]} | {diff_cell(top)} | {diff_cell(low)} | "
                         f"{held} |")
    return lines


def _reference_lines(rows, references, reference) -> list[str]:
    """references: {team pair: single-agent pair label}."""
    lines = []
    for team, single_label in references.items():
        single_pair = (team[0], single_label)
        trained = _select(rows, team, reference)
        single = _select(rows, single_pair, reference)
        common = set(_by_seed(trained)) & set(_by_seed(single))
        if not common:
            continue
        # every column over the seeds both sides have, as the paired differences are
        trained = [r for r in trained if r["seed"] in common]
        single = [r for r in single if r["seed"] in common]
        voted = [r for r in single if "majority" in r]
        if not lines:
            lines = ["", "## The team against one agent at the same budget", "",
                     "The single agent is trained from the team's warm start with the same "
                     "steps, tasks per step and G, and evaluated alone. Its majority vote "
                     "is the trained single agent's plurality answer over K samples "
                     "(exact over every K-subset of its held-out samples; ties credited by "
                     "their share of right answers), at K times its tokens. The team's "
                     "ceiling: the share of the trained team's held-out episodes in which "
                     "more than half of its solvers were right.", "",
                     "| env | team | avg@k | tokens/task | team - it |", "|---|---|---|---:|---|"]
        mean = statistics.mean
        lines.append(f"| {team[0]} | {team[1]}: the trained team | "
                     f"{mean(r['avg_at_k'] for r in trained):.3f} | "
                     f"{mean(r['tokens_per_task'] for r in trained):.0f} | |")
        if all("solver_majority" in r for r in trained):
            lines.append(f"| {team[0]} | {team[1]}: its solvers' majority (ceiling) | "
                         f"{mean(r['solver_majority'] for r in trained):.3f} | | |")
        lines.append(f"| {team[0]} | {single_label}: one agent, trained alone | "
                     f"{mean(r['avg_at_k'] for r in single):.3f} | "
                     f"{mean(r['tokens_per_task'] for r in single):.0f} | "
                     f"{diff_cell(difference(trained, single))} |")
        if voted:
            size = voted[0]["majority"]["size"]
            lines.append(
                f"| {team[0]} | {single_label}: its majority vote over {size} | "
                f"{mean(r['majority']['avg'] for r in voted):.3f} | "
                f"{mean(r['majority']['tokens_per_task'] for r in voted):.0f} | "
                f"{diff_cell(_vote_difference(trained, voted))} |")
    return lines


def _vote_difference(team: list[dict], voted: list[dict]) -> dict:
    shadow = [{"seed": r["seed"], "per_task_avg": r["majority"]["per_task"]} for r in voted]
    return difference(team, shadow)


def _clip_lines(rows, pairs, algos) -> list[str]:
    lines = []
    for pair in pairs:
        table = {}
        for algo in algos:
            curves = [r["clip_fraction_by_update"] for r in _select(rows, pair, algo)
                      if r.get("clip_fraction_by_update") and r.get("same_as") is None]
            if curves and max(r.get("mean_set_size", 1.0) for r in _select(rows, pair, algo)) > 1:
                n = min(len(c) for c in curves)
                table[algo] = [statistics.mean(c[i] for c in curves) for i in range(n)]
        if not table:
            continue
        if not lines:
            lines = ["", "## Where the set ratio acts", "",
                     "Clip fraction by optimizer step within a batch (the first is "
                     "on-policy, ratio 1), mean over training steps and seeds, on pairs "
                     "with sets of K >= 2. srpo and its kappa variants clip whole sets "
                     "(one ratio per active set); srpo_singleton clips each output's "
                     "sequence ratio; grpo, dr_mas and at_grpo clip each token.", ""]
        n = max(len(v) for v in table.values())
        lines += [f"{pair[0]} {pair[1]}:", "",
                  "| algo | unit clipped | " + " | ".join(f"update {i + 1}" for i in range(n))
                  + " |", "|---|---|" + "---:|" * n]
        for algo, values in table.items():
            unit = ("set" if algo.startswith("srpo") and algo != "srpo_singleton" else
                    "output" if algo == "srpo_singleton" else
                    "none (no ratio)" if algo == "magrpo" else "token")
            cells = [f"{v:.3f}" for v in values] + [""] * (n - len(values))
            lines.append(f"| {algo} | {unit} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _time_lines(rows: list[dict]) -> list[str]:
    runs = [r for r in rows if r["checkpoint"] == "after" and not r.get("same_as")]
    groups: dict[tuple, list[float]] = {}
    for r in runs:
        name = r["algo"] + (f" (twin r{r['rollout_seed']})" if r.get("rollout_seed") else "")
        groups.setdefault((r["env"], r["workflow"], name), []).append(r["wall_time_s"])
    lines = ["", "## Wall time per run", "",
             f"{len(runs)} runs, {sum(r['wall_time_s'] for r in runs) / 3600:.1f} h summed "
             "(warm starts and start evaluations not included; two one-thread workers side "
             "by side, so each run shared the machine).", "",
             "| env | workflow | algo | runs | minutes per run (mean) |", "|---|---|---|---:|---:|"]
    lines += [f"| {env} | {workflow} | {name} | {len(times)} | "
              f"{statistics.mean(times) / 60:.1f} |"
              for (env, workflow, name), times in sorted(groups.items())]
    return lines


def compare_lines(rows: list[dict], preset: dict, reference: str, kappa) -> list[str]:
    pairs = [tuple(p) for p in preset.get("team_pairs", [])]
    algos = list(preset["algos"])
    same_as = {tuple(k): v for k, v in preset.get("same_as", {}).items()}
    lines = _noise_lines(rows, pairs, reference)
    lines += _verdict_lines(rows, pairs, reference, algos, same_as, kappa)
    lines += _reference_lines(rows, {tuple(k): v for k, v in
                                     preset.get("references", {}).items()}, reference)
    lines += _clip_lines(rows, pairs, algos)
    lines += _time_lines(rows)
    return lines


def write_compare_plots(rows: list[dict], preset: dict, out: Path, reference: str) -> None:
    """``forest.png``: the reference minus each baseline per pair (pooled difference,
    bars of 2 standard errors, dots per seed); ``learning_curves_seeds.png``: training
    accuracy per step, mean over seeds with a band from the lowest to the highest seed
    (a moving average over 5 steps)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [tuple(p) for p in preset.get("team_pairs", [])]
    algos = [a for a in preset["algos"] if a != reference]
    same_as = {tuple(k): v for k, v in preset.get("same_as", {}).items()}
    ready = [p for p in pairs if _select(rows, p, reference)]
    if not ready:
        return
    fig, axes = plt.subplots(1, len(ready), figsize=(4.2 * len(ready), 3.6), squeeze=False)
    for ax, pair in zip(axes[0], ready, strict=True):
        names, ys = [], []
        for algo in algos:
            alias = same_as.get(pair, {}).get(algo)
            d = _difference(_select(rows, pair, reference), _select(rows, pair, algo))
            if d is None or alias == reference:  # not run yet, or srpo itself
                continue
            y = len(names)
            names.append(f"{algo} (= {alias})" if alias else algo)
            ys.append(y)
            color = {"ahead": "tab:green", "behind": "tab:red"}.get(d["verdict"], "tab:gray")
            ax.errorbar(d["diff"], y, xerr=2 * d["se"], fmt="o", color=color, capsize=3)
            ax.scatter(d["per_seed"], [y + 0.18] * len(d["per_seed"]), s=8, color="black")
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks(ys, names, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{pair[0]} {pair[1]}", fontsize=8)
        ax.set_xlabel(f"{reference} - baseline, held-out avg@k (bars: 2 SE)", fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "forest.png", dpi=120)
    plt.close(fig)
    shown = [reference] + algos  # each pair's own copies are skipped below
    fig, axes = plt.subplots(1, len(ready), figsize=(4.2 * len(ready), 3.4), squeeze=False)
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(preset["algos"])}
    for ax, pair in zip(axes[0], ready, strict=True):
        for algo in shown:
            if same_as.get(pair, {}).get(algo):
                continue
            curves = [r["train_accuracy"] for r in _select(rows, pair, algo)]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            smooth = np.array([np.convolve(c[:n], np.ones(5) / 5, mode="valid")
                               for c in curves])
            x = np.arange(smooth.shape[1]) + 3
            ax.plot(x, smooth.mean(0), color=colors[algo], label=algo, linewidth=1)
            if len(curves) > 1:
                ax.fill_between(x, smooth.min(0), smooth.max(0), color=colors[algo],
                                alpha=0.15)
        ax.set_title(f"{pair[0]} {pair[1]}", fontsize=8)
        ax.set_xlabel("step")
    axes[0][0].set_ylabel("training accuracy (5-step mean; band: seeds)")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "learning_curves_seeds.png", dpi=120)
    plt.close(fig)
