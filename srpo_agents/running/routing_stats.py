"""Diagnostics of a routed workflow, read from the Transitions alone.

A routed env (``srpo_envs.routing``) marks each router event with ``event_type ==
"route"`` and ``info["route_k"]``; nothing here knows which env produced them, and the
learner trains on these episodes with no routed-specific code. An episode's *chosen K*
is the K of its first route event (math routes once; search routes every round, and
``route_k_counts`` counts every route event).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np


def _route_events(rollout) -> list:
    return [t for t in rollout.transitions
            if t.event_type == "route" and "route_k" in t.info]


def episode_route(rollout) -> int | None:
    """The K chosen at the episode's first route event, or None without one."""
    events = _route_events(rollout)
    return int(events[0].info["route_k"]) if events else None


def routing_summary(rollouts, correct_of) -> dict[str, Any]:
    """Routing figures of a batch of episodes; empty when none was routed.

    ``route_k_counts``: route events by chosen K; ``route_mean_k``: their mean;
    ``route_parse_failures``: router replies that could not be read (the default route
    was taken); ``route_verify_fraction``: episodes whose route asked for a verifier (math);
    ``by_route_k``: per chosen K (of the episode's first route), its episodes, accuracy
    and generated tokens per episode; ``by_level``: where route events carry the task's
    ``level``, the count of each chosen K per level, and ``level_accuracy``: per level
    (the episode's first route's), its episodes and accuracy. ``correct_of(rollout) ->
    bool``."""
    counts: Counter[int] = Counter()
    by_level: dict[str, Counter] = defaultdict(Counter)
    failures = verify = 0
    by_k: dict[int, list] = defaultdict(list)
    level_correct: dict[str, list[bool]] = defaultdict(list)
    for rollout in rollouts:
        events = _route_events(rollout)
        if events and "level" in events[0].info:
            level_correct[str(events[0].info["level"])].append(bool(correct_of(rollout)))
        for event in events:
            counts[int(event.info["route_k"])] += 1
            failures += not event.info.get("route_parsed", True)
            if "level" in event.info:
                by_level[str(event.info["level"])][str(event.info["route_k"])] += 1
        if events:
            verify += bool(rollout.transitions[-1].info.get("route_verify"))
            by_k[int(events[0].info["route_k"])].append(rollout)
    if not counts:
        return {}
    total = sum(counts.values())
    return {
        "route_k_counts": {str(k): counts[k] for k in sorted(counts)},
        "route_mean_k": sum(k * n for k, n in counts.items()) / total,
        "route_parse_failures": failures,
        "route_verify_fraction": verify / sum(len(v) for v in by_k.values()),
        "by_route_k": {str(k): {"episodes": len(group),
                                "accuracy": float(np.mean([correct_of(r) for r in group])),
                                "tokens_per_task": float(np.mean([r.generated_tokens
                                                                  for r in group]))}
                       for k, group in sorted(by_k.items())},
        **({"by_level": {level: dict(sorted(c.items())) for level, c in sorted(by_level.items())}}
           if by_level else {}),
        **({"level_accuracy": {level: {"episodes": len(v), "accuracy": float(np.mean(v))}
                               for level, v in sorted(level_correct.items())}}
           if level_correct else {}),
    }


def plot_routing(rows: list[dict], png, title: str, reference: float | None = 1.638) -> None:
    """Mean active-set size and mean chosen K per training step, with the share of each
    K; ``reference``: the SRPO paper's settled mean active-set size (a dashed line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "route_mean_k" in r]
    if not rows:
        return
    steps = [r["step"] + 1 for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6, 5), sharex=True)
    top.plot(steps, [r["mean_set_size"] for r in rows], label="mean active-set size")
    top.plot(steps, [r["route_mean_k"] for r in rows], label="mean chosen K")
    if reference is not None:
        top.axhline(reference, linestyle="--", color="gray",
                    label=f"paper's settled set size ({reference})")
    top.set_ylabel("size")
    top.legend(fontsize=8)
    ks = sorted({int(k) for r in rows for k in r["route_k_counts"]})
    shares = np.array([[r["route_k_counts"].get(str(k), 0) / sum(r["route_k_counts"].values())
                        for k in ks] for r in rows])
    bottom.stackplot(steps, shares.T, labels=[f"K = {k}" for k in ks])
    bottom.set_ylabel("share of route events")
    bottom.set_xlabel("step")
    bottom.legend(fontsize=8, loc="upper right")
    top.set_title(title)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
