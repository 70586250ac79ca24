"""``make demo``: SRPO trains a three-role search team, and you watch it learn.

    python -m srpo_agents.running.demo [--seed 0] [--out runs/demo] [--steps N]

The team (SRPO-Search-v0, ``search_answer_verify``): a searcher writes a query, the env
retrieves a passage, an answerer reads it and answers, a verifier accepts the answer or
sends the team back to search (two rounds at most). One shared tiny policy plays all
three roles from role prompts; the reward is exact match with the gold answer.

What runs, in order (a progress bar with an ETA for each):

1. **the start point**: the team's supervised warm start, committed in
   ``benchmarks/warmstarts/SRPO-Search-v0-search_answer_verify`` (4 MB) and keyed by
   everything that shapes it (``srpo_agents.tiny.warmstart``). It is checked, not rebuilt;
   when it is missing or its key no longer matches the code, the demo says which
   settings changed and rebuilds it once into ``runs/demo-start`` (the committed build
   took 1401 s on 2 cores) before it goes on;
2. the team's actions: one validation episode, each event's active set printed once;
3. held-out avg@4 before training (500 test-split questions x 4 samples);
4. SRPO: ``steps`` (42) steps of 16 questions x G=8 episodes, one epoch of 8 clipped
   updates per batch (mini-batches of two questions' 16 episodes), with a validation
   curve of 50 questions every 10 steps;
5. held-out avg@4 after, the paired difference with its standard error and a one-line
   verdict, the learning-curve PNG, and one validation question played before and after,
   each role's text side by side.

Why this setting (``benchmarks/results/demo_seeds.md``, docs/training.md): the old
demo (math, three solvers and an aggregator) spent 10 to 35 of its 34-44 minutes
building its start point and missed its bar on every seed. This team learned on every
seed the comparison ran (+0.108, +0.127 and +0.128 over 100 steps at lr 3e-5), and its
start point is committed. The steps and lr were then chosen on seeds 10 and 11, before
seeds 0-4 ran: first to fit 15 minutes on 2 cores, then (issue 61, pilot 61b) the fewer,
larger steps of a 5-minute target.
"""

from __future__ import annotations

import argparse
import itertools
import math
import textwrap
import time
from pathlib import Path

import torch

from srpo_agents.cli.tables import format_table
from srpo_agents.config import TrainConfig
from srpo_agents.learning.events import ActionUnit, build_units
from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ALGORITHMS, kappa_value
from srpo_agents.models.policy import Policy, load_policy
from srpo_agents.models.registry import prepare_policy
from srpo_agents.rollout.engine import Rollout, engine_for
from srpo_agents.rollout.envs import env_factory
from srpo_agents.running.evaluate import evaluate, held_out
from srpo_agents.running.plots import plot_curve
from srpo_agents.running.search_recipe import WARM_ROOT, track_settings, warm_folder
from srpo_agents.running.train import train
from srpo_agents.running.verdicts import cleared
from srpo_agents.tiny.config import tiny_run
from srpo_agents.tiny.source import warm_start_status

ENV, WORKFLOW = "SRPO-Search-v0", "search_answer_verify"
REPO = Path(__file__).resolve().parents[2]
COMMITTED_START = warm_folder(REPO / WARM_ROOT, WORKFLOW)
"""The committed start point (its ``warmstart/`` folder holds the model)."""

START = dict(env=ENV, workflow=WORKFLOW, compact_prompts=True, **track_settings(WORKFLOW))
"""The start point's settings: the search track's warm start (``search_recipe``), built
with seed 0 whatever the demo's seed (the seed moves the RL run, not its start)."""

DEMO = dict(START, algo="srpo", steps=42, group_size=8, tasks_per_step=16, lr=7e-5,
            epochs=1, minibatch_episodes=16, minibatch_by="task", microbatch_rows=16,
            skip_zero_advantage=True, eps_high=0.28, eval_tasks=500, eval_k=4,
            eval_every=10, curve_tasks=50, eval_processes=1, save_every=0)
"""The RL run: the harness's search_compare settings (``benchmarks/comparisons/harness.py``) but
for ``steps`` and ``lr``, chosen on seeds 10 and 11 (``benchmarks/results/demo_pilot.md``:
50 at 6e-5; then ``demo_pilot_61b.md``: 42 at 7e-5, the same total movement in the time
issue 61 asks for),
and mini-batches by task in micro-batches of 16 rows, which took the update from 10.0 s
to 4.2 s on one thread (``demo_levers.md``; by task: ``demo_pilot_61.md``, seeds 10, 11).
Units of all-right or all-wrong groups skip their passes (the same update: advantage 0
and beta 0; 3.0 -> 2.5 s at two threads), and one helper process shares the held-out
evaluations (``eval_processes.md``: 1.38x on the "before" one); the validation curve
reads 50 questions (100 before issue 61)."""

BAR = (0.05, 3.0)
"""The demo's bar: held-out avg@k after minus before >= 0.05 and >= 3 paired SE."""

SHOW_TASKS = 20
"""Validation questions played before and after to pick the one shown side by side."""


def setting_text(config: TrainConfig) -> str:
    """The demo's setting in one sentence (printed by the demo and its reports)."""
    start = Path(config.model)
    size = sum(f.stat().st_size for f in start.iterdir()) / 1e6 if start.is_dir() else 0.0
    return (f"{config.env} {config.workflow}, {config.algo}, {config.steps} steps of "
            f"{config.tasks_per_step} questions x G={config.group_size}, lr {config.lr:g}, "
            f"{config.epochs} epoch in mini-batches of {config.minibatch_episodes} episodes "
            f"by {config.minibatch_by}, "
            f"eps_high {config.eps_high}, at most {config.max_new_tokens} new tokens a turn, "
            f"held-out {config.eval_tasks} questions x k={config.eval_k}; start point "
            f"{start.parent.name}/{start.name} ({size:.1f} MB)")


def demo_config(out: str = "runs/demo", seed: int = 0, **overrides) -> TrainConfig:
    """The demo's RL run for ``seed`` (its ``model`` is set by ``ensure_start``)."""
    return TrainConfig(**tiny_run(DEMO, out=out, seed=seed, **overrides))


def start_config(folder: Path) -> TrainConfig:
    return TrainConfig(**tiny_run(START, seed=0, out=str(folder), warmstart_dir=str(folder)))


def ensure_start(rebuild_folder: Path, log=print, committed: Path = COMMITTED_START) -> Path:
    """The start point's model folder: the committed one when its key matches the code,
    else one built (once, then cached) in ``rebuild_folder``, after saying why and how
    long the build takes."""
    status = warm_start_status(start_config(committed), committed)
    if status["cached"]:
        log(f"start point: {committed / 'warmstart'} (committed; its key matches)")
        return committed / "warmstart"
    why = (f"its key no longer matches the code (changed: {', '.join(status['changed'][:6])})"
           if status["changed"] else f"it is missing from {committed}")
    built = warm_start_status(start_config(rebuild_folder), rebuild_folder)
    if built["cached"]:
        log(f"start point: the committed one is unusable ({why}); using the one rebuilt "
            f"earlier in {rebuild_folder / 'warmstart'}")
        return rebuild_folder / "warmstart"
    seconds = status.get("seconds") or 1401.0
    log(f"start point: the committed one is unusable ({why}).\nRebuilding it in "
        f"{rebuild_folder} (once; later runs reuse it): a supervised warm start that took "
        f"{seconds / 60:.0f} min on 2 cores when it was committed, up to its 60-minute cap.")
    prepare_policy(start_config(rebuild_folder), rebuild_folder, log)
    return rebuild_folder / "warmstart"


def play(policy: Policy, config: TrainConfig, tasks: int, seed: int) -> list[Rollout]:
    """One episode of each of the first ``tasks`` validation questions (held out from
    training; the test split is left to the evaluations), sampled with ``seed``."""
    engine = engine_for(config, policy)  # its sampler is seeded by the config's seed
    make = env_factory(config, "validation")
    envs = [make(seed * 1_000_003 + i) for i in range(tasks)]
    return engine.run(envs, [{"task_index": i, "episode_id": f"show-{i}"}
                             for i in range(tasks)])


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def active_set_lines(rollout: Rollout) -> list[str]:
    """Each event type's active set once: which outputs, how many, and that it is one
    action with one ratio."""
    units, _ = build_units([rollout])
    seen, lines = set(), ["| event | active set: the outputs it consumed | K | kappa(K) |",
                          "|---|---|---:|---:|"]
    for unit in units:
        if unit.info.event_type in seen:
            continue
        seen.add(unit.info.event_type)
        members = "; ".join(f"{m.agent_id}: {_short(m.text, 40)}" for m in unit.members)
        lines.append(f"| {unit.info.event_type} | {members} | {unit.size} | "
                     f"{kappa_value('inv_sqrt', unit.size):.2f} |")
    return lines + ["Each set is ONE action with ONE ratio rho = exp(kappa(K) * sum over its "
                    "members of log pi_new / pi_old),", "clipped once; its advantage is the "
                    "episode's return against the other episodes of its question.",
                    "Here every transition consumes one output (K = 1, division of labor); "
                    "in the parallel workflow two searchers' queries form one set (K = 2)."]


def set_ratios(policy: Policy, rollout: Rollout) -> dict[str, float]:
    """Per event type, the trained policy's set ratio on the action the start policy
    took (rho = exp(kappa(K) * sum of member log-ratios), SRPO.md section 2)."""
    learner = Learner(policy, ALGORITHMS["srpo"], LearnerConfig())
    units: list[ActionUnit] = build_units([rollout])[0]
    ratios = {}
    with torch.no_grad():
        for unit in units:
            if unit.info.event_type in ratios:
                continue
            logp, mask, _ = learner.response_logprobs(policy.model, unit.members)
            old = sum(sum(m.logprobs) for m in unit.members)
            log_ratio = float((logp * mask).sum()) - old
            ratios[unit.info.event_type] = math.exp(
                kappa_value("inv_sqrt", unit.size) * log_ratio)
    return ratios


def _turns(rollout: Rollout) -> list[tuple[str, str]]:
    return [(c.role, c.text) for t in rollout.transitions for c in t.consumed]


def side_by_side(before: list[Rollout], after: list[Rollout], question: str,
                 gold: str, index: int, width: int = 44, wrap: bool = False) -> list[str]:
    """One validation question played by the start and the trained team, role by role;
    ``wrap``: each text in full, wrapped to its column (else cut to one line)."""
    b, a = before[index], after[index]
    right = (sum(bool(r.correct) for r in before), sum(bool(r.correct) for r in after))
    lines = [f"Q: {question}   (gold: {gold})",
             f"validation question {index + 1}: the first of {len(before)} whose outcome "
             f"changed (or the first, if none did); one sample each.",
             f"Right before: {right[0]}/{len(before)}, after: {right[1]}/{len(after)}.",
             f"{'role':<10} {'before training':<{width}} {'after training':<{width}}"]
    for left, right_turn in itertools.zip_longest(_turns(b), _turns(a), fillvalue=("", "")):
        role = left[0] or right_turn[0]
        if wrap:
            columns = [textwrap.wrap(" ".join(t[1].split()), width) or [""]
                       for t in (left, right_turn)]
        else:
            columns = [[_short(t[1], width)] for t in (left, right_turn)]
        for row, (l_text, r_text) in enumerate(itertools.zip_longest(*columns, fillvalue="")):
            lines.append(f"{role if row == 0 else '':<10} {l_text:<{width}} {r_text:<{width}}")
    verdict = {True: "right", False: "wrong", None: "-"}
    lines.append(f"{'outcome':<10} {verdict[b.correct]:<{width}} {verdict[a.correct]}")
    return [line.rstrip() for line in lines]


def redraw_curve(config: TrainConfig, start_policy: Policy, summary: dict) -> None:
    """The learning curve with the starting policy's validation point at step 0 (the
    run's validation points start after its first ``eval_every`` steps), measured on
    the same validation questions by an engine of its own, so the run's random numbers
    are not touched."""
    envs, indices = held_out(config, split="validation", wanted=config.curve_tasks)
    start = evaluate(engine_for(config, start_policy), envs, indices, config.eval_k,
                     tag="curve-start", progress="validation, start policy (curve)")
    out = Path(config.out)
    plot_curve(out / "metrics.jsonl", out / "learning_curve.png",
               f"{config.env} {config.workflow} {config.algo}", summary["before"],
               summary["after"], config.steps, start_validation=start)


def verdict_line(difference: dict, k: int, bar: tuple[float, float] = BAR) -> str:
    gain, z = difference["avg_at_k"], difference["avg_at_k_z"]
    met = cleared(difference, *bar)
    parts = ([f">= +{bar[0]}"] if bar[0] > 0 else []) + [f">= {bar[1]:.0f} SE"]
    return (f"Verdict: {'LEARNED' if met else 'below the bar'}: held-out avg@{k} "
            f"{gain:+.3f} ± {difference['avg_at_k_stderr']:.3f} ({z:+.1f} SE) "
            f"{'meets' if met else 'misses'} the demo's bar ({' and '.join(parts)}).")


def before_after_lines(summary: dict, k: int, items: str = "questions") -> list[str]:
    """The held-out table before and after, the paired difference and what it means."""
    d = summary["difference"]
    return [format_table(summary["before"], summary["after"]),
            f"| after - before, paired by task | avg@{k} {d['avg_at_k']:+.3f} ± "
            f"{d['avg_at_k_stderr']:.3f} ({d['avg_at_k_z']:+.1f} SE) | pass@{k} "
            f"{d['pass_at_k']:+.3f} ± {d['pass_at_k_stderr']:.3f} |",
            f"\nheld-out: {d['tasks']} test-split {items} x k={k}; ± is the standard error "
            f"over {items} (of the per-{items[:-1]} difference in the last row)."]


def shown_lines(config: TrainConfig, before: list[Rollout], after: list[Rollout],
                **layout) -> list[str]:
    """``side_by_side`` of the first validation task whose outcome changed."""
    changed = next((i for i, (b, a) in enumerate(zip(before, after, strict=True))
                    if b.correct != a.correct), 0)
    task = env_factory(config, "validation")(0).task(changed)
    gold = task.answers[0] if hasattr(task, "answers") else task.answer
    return side_by_side(before, after, task.question, gold, changed, **layout)


def closing_lines(summary: dict, seconds: float, out: str) -> list[str]:
    times = summary["time_breakdown"]
    return [f"\nWall time {seconds:.0f} s: " + ", ".join(
                f"{name} {value:.0f} s" for name, value in times.items() if name != "total"),
            f"Learning curve: {Path(out) / 'learning_curve.png'}; run folder: {out} "
            f"(metrics.jsonl, summary.json, policy/)"]


def run(seed: int = 0, out: str = "runs/demo", steps: int = DEMO["steps"], log=print) -> dict:
    started = time.monotonic()
    out_path = Path(out)
    model = ensure_start(out_path.parent / "demo-start", log)
    config = demo_config(out, seed, model=str(model), steps=steps,
                         eval_every=min(DEMO["eval_every"], max(1, steps // 2)))
    log(f"setting: {setting_text(config)}")
    start_policy = load_policy(str(model))
    shown_before = play(start_policy, config, SHOW_TASKS, seed)
    log("\nThe team: searcher -> (retrieval) -> answerer -> verifier, one shared policy.")
    log("\n".join(active_set_lines(shown_before[0])))
    log("")
    summary = train(config, log=log)
    redraw_curve(config, start_policy, summary)
    trained = load_policy(str(out_path / "policy"))
    shown_after = play(trained, config, SHOW_TASKS, seed)
    ratios = set_ratios(trained, shown_before[0])
    log("")
    log("\n".join(before_after_lines(summary, config.eval_k)))
    log(verdict_line(summary["difference"], config.eval_k))
    log("\nThe trained policy's set ratio on the start policy's actions above: " + ", ".join(
        f"{event} {value:.2f}" for event, value in ratios.items()))
    log("")
    log("\n".join(shown_lines(config, shown_before, shown_after)))
    log("\n".join(closing_lines(summary, time.monotonic() - started, out)))
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/demo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=DEMO["steps"])
    args = parser.parse_args(argv)
    run(args.seed, args.out, args.steps)


if __name__ == "__main__":
    main()
