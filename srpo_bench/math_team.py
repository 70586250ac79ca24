"""The math team's settings that ``make demo`` ran until issue 36 (SRPO-Math-v0
parallel: 3 solvers in one event, then an aggregator; a tiny policy warm-started for 400
steps, then SRPO), kept here because the harness's math presets (compare, routing) and
the earlier benchmarks (demo_sweep, team_roles, labs/demo_lora) were run with them.
``make demo`` now trains a search team (``srpo_agents.running.demo``)."""

from __future__ import annotations

from srpo_agents.config import TrainConfig
from srpo_agents.tiny.config import tiny_run

# max_turns=3: the solve_verify rounds every run of these settings used (srpo train's
# default until untyped flags took the env's own, 2 rounds for math)
MATH_DEMO = dict(env="SRPO-Math-v0", workflow="parallel", n_agents=3, max_turns=3, algo="srpo",
                 model="tiny",
                 steps=60, group_size=8, tasks_per_step=16, lr=3e-5, epochs=1,
                 minibatch_episodes=32, eps_high=0.28, difficulty=(0,), max_new_tokens=32,
                 eval_tasks=500, eval_k=8, eval_every=30, curve_tasks=100,
                 warmstart_steps=400, warmstart_decay=True, warmstart_minutes=60.0,
                 warmstart_target=1.0, warmstart_skill=0.5, save_every=6)


def math_demo_config(out: str = "runs/math-demo", seed: int = 0, **overrides) -> TrainConfig:
    return TrainConfig(**tiny_run(MATH_DEMO, out=out, seed=seed, **overrides))
