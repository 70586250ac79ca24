"""``srpo plot``: redraw learning curves of run directories in one figure."""

from __future__ import annotations

import argparse


def cmd_plot(args: argparse.Namespace) -> int:
    from srpo_agents.running.plots import plot_runs

    out = plot_runs(args.runs, args.out, metric=args.metric, labels=args.labels or None)
    print(f"wrote {out}")
    return 0


def add_parser(commands) -> None:
    """``srpo plot`` under ``commands``."""
    pl = commands.add_parser("plot", help="redraw learning curves of run directories, "
                                          "overlaid in one figure")
    pl.add_argument("runs", nargs="+", help="run directories (each with metrics.jsonl)")
    pl.add_argument("--out", default="learning_curves.png",
                    help="PNG file to write (default: %(default)s)")
    pl.add_argument("--metric", default="accuracy",
                    help="metrics.jsonl key to draw per step, e.g. reward, mean_set_size, "
                         "route_mean_k (default: %(default)s)")
    pl.add_argument("--labels", nargs="*", default=[],
                    help="one legend name per run (default: the directories' names)")
    pl.set_defaults(run=cmd_plot)
