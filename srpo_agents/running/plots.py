"""Learning curves: ``plot_curve`` draws one run's ``learning_curve.png`` as it ends, and
``srpo plot RUN_DIR...`` (``plot_runs``) redraws several runs' curves overlaid.

Each run's ``metrics.jsonl`` gives a line of one metric per step (``--metric``, default
the training episodes' accuracy); its held-out avg@k on the test split before (step 0)
and after training, and on the validation split during training (``eval_every``), are
drawn in the same colour with standard-error bars."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(run_dir: str | Path) -> list[dict]:
    from srpo_agents.running.metrics_log import read_metrics_rows

    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} has no metrics.jsonl "
                                f"(expected {path})")
    return read_metrics_rows(path)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _evaluations(ax, rows: list[dict], before: dict, after: dict, steps: int, color=None,
                 prefix: str = "", start_validation: dict | None = None) -> None:
    """Test avg@k before (step 0) and after (the last step), and validation avg@k during
    training: a split of its own, so the points between are not read from the test
    tasks; from step 0 when ``start_validation`` (the start on those tasks) is given."""
    def point(step: int, result: dict) -> tuple[int, float, float]:
        return step, result["avg_at_k"], result["avg_at_k_stderr"]

    k = after["k"]
    x, y, err = zip(point(0, before), point(steps, after), strict=True)
    ax.errorbar(x, y, yerr=err, fmt="o", capsize=3, color=color,
                label=f"{prefix}test avg@{k} ({after['tasks']} tasks)")
    mids = [(r["step"] + 1, r["eval_avg_at_k"], r["eval_avg_at_k_stderr"])
            for r in rows if "eval_avg_at_k" in r]
    tasks = next((r["eval_tasks"] for r in reversed(rows) if "eval_tasks" in r), None)
    if start_validation is not None:
        mids.insert(0, point(0, start_validation))
        tasks = start_validation["tasks"]
    if mids:
        x, y, err = zip(*mids, strict=True)
        ax.errorbar(x, y, yerr=err, fmt="s--", capsize=3, color=color,
                    label=f"{prefix}validation avg@{k} ({tasks} tasks)")


def plot_curve(metrics_path: Path, png: Path, title: str, before: dict, after: dict,
               steps: int, start_validation: dict | None = None) -> None:
    """One run: training accuracy per step and its held-out evaluations."""
    from srpo_agents.running.metrics_log import read_metrics_rows

    plt = _pyplot()
    rows = read_metrics_rows(metrics_path)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] + 1 for r in rows], [r["accuracy"] for r in rows],
            label="training episodes: accuracy")
    _evaluations(ax, rows, before, after, steps, start_validation=start_validation)
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def plot_runs(run_dirs: list[str], out: str | Path, metric: str = "accuracy",
              labels: list[str] | None = None) -> Path:
    plt = _pyplot()
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
            _evaluations(ax, rows, data["before"], data["after"], data["config"]["steps"],
                         line.get_color(), f"{label}: ")
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
