"""The harness's plots, written beside its table."""

from __future__ import annotations

import statistics
from pathlib import Path


def write_plots(rows: list[dict], out: Path) -> None:
    """``learning_curves.png`` (training accuracy per step, per algorithm, mean over
    seeds), ``accuracy_vs_tokens.png`` (held-out avg@k against generated training tokens)
    and, for routed pairs, ``routing_set_size.png``."""
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
