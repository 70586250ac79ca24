"""Plain RL code against an srpo env's Gymnasium view: no learner, no model.

Each ``env.step`` is one event: the observation says which agents are due
(``obs["due"]``) and gives their prompts; the action is a dict of texts for them. The
policy here is a stand-in: a scripted team that is right with probability ``--skill``
(or, with ``--random``, random texts). Swap in your own model's replies.

    python examples/gym_random_agent.py --env SRPO-Countdown-v0 --workflow parallel
"""

from __future__ import annotations

import argparse
import random
import string

import gymnasium as gym

import srpo_envs
from srpo_envs import registry

gym.register_envs(srpo_envs)  # the Gymnasium 1.x idiom: registers every srpo id


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(string.digits + "+-*/() ") for _ in range(rng.randint(1, 12)))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="SRPO-Countdown-v0", help="a registered env id")
    parser.add_argument("--workflow", default="parallel", help="one of the env's workflows")
    parser.add_argument("--episodes", type=int, default=20, help="episodes to play")
    parser.add_argument("--skill", type=float, default=0.6,
                        help="accuracy of the env's scripted team (its EnvSpec.reference_team)")
    parser.add_argument("--random", action="store_true", help="send random texts instead")
    parser.add_argument("--seed", type=int, default=0, help="seeds the env and the policy")
    args = parser.parse_args(argv)

    env = gym.make(args.env, workflow=args.workflow)
    parallel = env.unwrapped.parallel  # the PettingZoo env behind the view
    team = registry.get(args.env).team(skill=args.skill, seed=args.seed)
    rng = random.Random(args.seed)
    returns, events = [], 0
    for episode in range(args.episodes):
        obs, info = env.reset(seed=args.seed + episode)
        done, total = False, 0.0
        while not done:
            due = [agent for agent, flag in zip(parallel.possible_agents, obs["due"],
                                                strict=True) if flag]
            if args.random:
                action = {agent: random_text(rng) for agent in due}
            else:
                action = team.act(parallel, obs["prompts"])
            obs, reward, terminated, truncated, info = env.step(action)
            transition = info["transition"]  # the event, its active set in .consumed
            assert [c.agent_id for c in transition.consumed] == due
            total += reward
            events += 1
            done = terminated or truncated
        returns.append(total)
    env.close()
    result = {"episodes": len(returns), "events": events,
              "mean_return": sum(returns) / len(returns)}
    print(f"{args.env} {args.workflow}: {result['episodes']} episodes, {events} events, "
          f"mean return {result['mean_return']:.3f}")
    return result


if __name__ == "__main__":
    main()
