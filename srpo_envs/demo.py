"""`make demo` until the learner lands: one episode of each SRPO-Math-v0 workflow played
by a scripted team, printing every transition (its active set) and the rewards."""

from __future__ import annotations

import textwrap

from srpo_envs import math_v0
from srpo_envs.scripted import ScriptedMathTeam


def show_episode(workflow: str, seed: int) -> None:
    env = math_v0.parallel_env(workflow=workflow, n_solvers=3, difficulty=(1, 2, 3), seed=seed)
    team = ScriptedMathTeam(skill=0.6, seed=seed)
    observations, _ = env.reset()
    print(f"\n=== workflow={workflow!r}  task={env.current_task.task_id}  "
          f"gold={env.current_task.answer}")
    print(textwrap.indent(textwrap.fill(env.current_task.question, 88), "    "))
    while env.agents:
        observations, rewards, *_ = env.step(team.act(env, observations))
        t = env.last_transition
        print(f"  event {t.step_index} [{t.event_type}] K={t.set_size} "
              f"reward={t.reward} terminated={t.terminated}")
        for member in t.consumed:
            print(f"    {member.agent_id:<13} {member.text}")
        shown = {k: v for k, v in t.to_dict()["info"].items() if k != "gold"}
        print(f"    info: {shown}")


def main() -> None:
    for seed, workflow in enumerate(math_v0.WORKFLOWS):
        show_episode(workflow, seed)


if __name__ == "__main__":
    main()
