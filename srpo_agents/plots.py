"""``srpo plot RUN_DIR...``: redraw learning curves from run directories, overlaid.

Each run's ``metrics.jsonl`` gives a line of one metric per step (``--metric``, default
the training episodes' accuracy); where its ``summary.json`` exists, its held-out avg@k
before (step 0), during (``eval_every``) and after training is drawn in the same colour
with standard-error bars."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(run_dir: str | Path) -> list[dict]:
    from srpo_agents.metrics_log import read_metrics_rows

    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} has no metrics.jsonl "
                                f"(expected {path})")
    return read_metrics_rows(path)


def plot_runs(run_dirs: list[str], out: str | Path, metric: str = "accuracy",
              labels: list[str] | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if labels and len(labels) != len(run_dirs):
        raise ValueError(f"--labels has {len(labels)} names for {len(run_dirs)} runs")
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, run_dir in enumerate(run_dirs):
        rows = read_metrics(run_dir)
        steps = [r for r in rows if metric in r]
        if not steps:
            known = sorted({k for r in rows for k, v in r.items() if isinstance(v, int | float)})
            raise ValueError(f"--metric={metric!r} is not in {run_dir}/metrics.jsonl; "
                             f"numbers there: {known}")
        label = labels[i] if labels else Path(run_dir).name
        line, = ax.plot([r["step"] + 1 for r in steps], [r[metric] for r in steps],
                        label=f"{label}: {metric}")
        summary = Path(run_dir) / "summary.json"
        if summary.is_file():
            data = json.loads(summary.read_text())
            points = [(0, data["before"]["avg_at_k"], data["before"]["avg_at_k_stderr"]),
                      (data["config"]["steps"], data["after"]["avg_at_k"],
                       data["after"]["avg_at_k_stderr"])]
            x, y, err = zip(*points, strict=True)
            ax.errorbar(x, y, yerr=err, fmt="o", capsize=3, color=line.get_color(),
                        label=f"{label}: test avg@{data['after']['k']}")
            # the evaluations during training read the validation split, not test
            mids = [(r["step"] + 1, r["eval_avg_at_k"], r["eval_avg_at_k_stderr"])
                    for r in rows if "eval_avg_at_k" in r]
            if mids:
                x, y, err = zip(*mids, strict=True)
                ax.errorbar(x, y, yerr=err, fmt="s--", capsize=3, color=line.get_color(),
                            label=f"{label}: validation avg@{data['after']['k']}")
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
