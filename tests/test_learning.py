"""Learning tests in the spirit of Stable-Baselines3's identity-env tests: on envs whose
best policy is known, every registered algorithm must raise the mean training reward
from where it starts to a stated level within a bounded number of steps. A run whose
advantages are all forced to 0 must not get there, so the tests can fail.

The envs are built here on ``srpo_envs.event_env.EventEnv``, so the learner reads them
exactly as it reads the real ones: through Transitions. They ask for one letter out of
a small alphabet:

- ``copy``: one agent sees a letter and is rewarded when its output starts with it;
- ``pair``: two agents see the letter in one event (an active set of K = 2) and the
  team is rewarded only when both start with it;
- ``relay``: two roles in sequence. The caller sees the letter; the echo sees only the
  caller's output and must pass it on. The team is rewarded only when the caller named
  the letter and the echo repeated the caller: the multi-role, one-team-reward path
  (an aggregator that must follow its solvers).

The starting policy is a fresh tiny model given, by supervised steps, the skill but not
the habit: it copies the letter when the prompt says ``copy``, and answers the prompts
of these envs (``say``, ``relay``) with the named letter only a little more often than
chance (a habit of 10% on top of a uniform letter). RL has to make it use its skill where
the reward asks for it.

The start is trained to a *measured level*, not for a fixed number of steps: after each
chunk of supervised steps the fixture computes the exact first-token probabilities (no
sampling) and stops once the copy skill is >= 0.95 and the habit is in its band. With a
fixed step count the start depended on the CPU's float kernels (AVX-512 against AVX2),
because the old fixture stopped on a plateau where the model still answered uniformly.

Why the letter is written eight times (``say cccccccc:``): a 2-layer model at
initialization attends almost uniformly, so a repeated letter reaches the answer position
without a learned positional head. With the letter written once, the copy skill stayed at
chance for 600 supervised steps (measured, seed 0, lr 3e-3 and 1e-2); written eight
times it passes 0.95 in about 100 steps. Found while building these tests: a policy that
answers uniformly at random (no dependence on the prompt) barely learns in this budget,
and with a sparse team reward it can collapse onto always naming one letter, which leaves
every group with one return and no advantage to learn from.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping

import numpy as np
import pytest
import torch

from srpo_agents.learning.learner import Learner, LearnerConfig
from srpo_agents.learning.objective import ADVANTAGE_ESTIMATORS, ALGORITHMS
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.running.step import learn, train_step
from srpo_agents.tiny import build_tiny_policy
from srpo_agents.tiny.warmstart import sft_loss
from srpo_envs.event_env import EventEnv, EventOutcome

ALPHABET = "abcd"
REPEAT = 8            # the letter is written this many times in a prompt (module doc)
HABIT = 0.1           # supervised share of "name the letter" answers to say/relay prompts
COPY_LEVEL = 0.95     # the start's copy skill: mean P(letter | "copy <letter>")
# the start's habit: mean P(named letter | say/relay prompt); HABIT + (1 - HABIT) / 4 = 0.325
# at convergence, and 0.25 means the answer ignores the prompt
HABIT_BAND = (0.28, 0.37)
SFT_CHUNK, SFT_MAX_STEPS = 10, 800
START_SEEDS = (0, 1, 2)
# Every algorithm learns from start 0; starts 1 and 2 check the three distinct update
# paths (the set ratio, the per-token ratio, REINFORCE) so the margin is not one start's
# luck. benchmarks/validity/learning_margin.py runs every case from every start under each
# CPU kernel path (default, avx2, avx512).
OTHER_START_ALGOS = ("srpo", "grpo", "magrpo")


def say(letter: str) -> str:
    return f"say {letter * REPEAT}:"


def relay(letter: str) -> str:
    return f"relay {letter * REPEAT}:"


def copy_prompt(letter: str) -> str:
    return f"copy {letter * REPEAT}:"


class LetterEnv(EventEnv):
    """A one-letter team task (see the module docstring); ``task_index`` picks the letter."""

    metadata = {"name": "letter_env", "render_modes": ["ansi"], "is_parallelizable": True}
    max_output_chars = 8
    max_prompt_chars = 32

    def __init__(self, kind: str, seed: int | None = None):
        if kind not in ("copy", "pair", "relay"):
            raise ValueError(f"kind={kind!r}: expected copy, pair or relay")
        self.kind = kind
        self.possible_agents = {"copy": ["agent_0"], "pair": ["agent_0", "agent_1"],
                                "relay": ["caller_0", "echo_0"]}[kind]
        self.roles = {a: a.rsplit("_", 1)[0] for a in self.possible_agents}
        super().__init__(seed=seed)

    def _pick_task(self, options: Mapping) -> str:
        return ALPHABET[options.get("task_index", self._rng.randrange(4)) % len(ALPHABET)]

    def _begin(self, letter: str) -> str:
        self._letter = letter
        first = ["caller_0"] if self.kind == "relay" else self.possible_agents
        self._first_prompts = {a: say(letter) for a in first}
        return f"letter-{letter}"

    def _consume(self, texts: Mapping[str, str | None]) -> EventOutcome:
        if "caller_0" in texts:
            self._called = (texts["caller_0"] or "")[:1]
            return EventOutcome("call", next_prompts={"echo_0": relay(self._called or " ")})
        if self.kind == "relay":
            ok = self._called == self._letter and (texts["echo_0"] or "")[:1] == self._called
        else:
            ok = all((text or "").startswith(self._letter) for text in texts.values())
        return EventOutcome("answer", reward=float(ok), terminated=True,
                            info={"correct": ok})


def first_token_levels(policy) -> dict[str, float]:
    """Exact mean probabilities of the first answer token (eval mode, no sampling):
    ``copy`` = P(letter | copy prompt), ``habit`` = P(named letter | say or relay prompt)."""
    levels = {"copy": [], "habit": []}
    was_training = policy.model.training
    policy.model.eval()
    with torch.no_grad():
        for letter in ALPHABET:
            letter_id = policy.tokenizer(letter, add_special_tokens=False)["input_ids"][0]
            for kind, prompt in (("copy", copy_prompt(letter)), ("habit", say(letter)),
                                 ("habit", relay(letter))):
                ids = torch.tensor([policy.prompt_ids("any", prompt)])
                probs = torch.softmax(policy.model(ids).logits[0, -1].float(), -1)
                levels[kind].append(float(probs[letter_id]))
    policy.model.train(was_training)
    return {kind: float(np.mean(values)) for kind, values in levels.items()}


def skilled_start(seed: int, out_dir) -> tuple:
    """A fresh tiny policy trained by supervised chunks until its copy skill and habit
    reach their levels (module docstring); returns (policy, levels, steps)."""
    prompts = [say(c) for c in ALPHABET] + [relay(c) for c in ALPHABET]
    copies = [copy_prompt(c) for c in ALPHABET]
    policy = build_tiny_policy(prompts + copies, out_dir, hidden_size=64, num_layers=2,
                               num_heads=2, seed=seed)
    eos = policy.tokenizer.eos_token_id
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=3e-3)
    encoded = {p: policy.prompt_ids("any", p) for p in prompts + copies}
    letter_ids = {c: policy.tokenizer(c, add_special_tokens=False)["input_ids"] for c in ALPHABET}
    policy.model.train()
    levels, steps = first_token_levels(policy), 0
    while steps < SFT_MAX_STEPS and not (
            levels["copy"] >= COPY_LEVEL and HABIT_BAND[0] <= levels["habit"] <= HABIT_BAND[1]):
        for _ in range(SFT_CHUNK):
            batch = []
            for _ in range(64):
                if rng.random() < 0.5:
                    letter = rng.choice(ALPHABET)
                    prompt = encoded[copy_prompt(letter)]
                else:
                    text = rng.choice(prompts)
                    prompt = encoded[text]
                    letter = text[-2] if rng.random() < HABIT else rng.choice(ALPHABET)
                batch.append((prompt + letter_ids[letter] + [eos], len(prompt)))
            optimizer.zero_grad()
            sft_loss(policy, batch).backward()
            optimizer.step()
        steps += SFT_CHUNK
        levels = first_token_levels(policy)
    policy.model.eval()
    return policy, levels, steps


_STARTS: dict[int, object] = {}


@pytest.fixture(scope="module")
def skilled(tmp_path_factory):
    """The skilled start of a seed (module docstring), built once, its levels asserted."""
    def start(seed: int):
        if seed not in _STARTS:
            policy, levels, steps = skilled_start(seed, tmp_path_factory.mktemp(f"tiny{seed}"))
            assert levels["copy"] >= COPY_LEVEL, (
                f"start {seed}: copy skill {levels} after {steps} supervised steps")
            assert HABIT_BAND[0] <= levels["habit"] <= HABIT_BAND[1], (
                f"start {seed}: habit {levels} after {steps} steps is outside {HABIT_BAND}")
            _STARTS[seed] = policy
        return _STARTS[seed]
    return start


def zero_advantage(units, eps: float = 1e-6) -> np.ndarray:
    return np.zeros(len(units))


def train_rewards(policy, kind: str, algo: str, steps: int, estimator=None,
                  seed: int = 0, return_policy: bool = False, adapters: bool = False,
                  lr: float = 5e-4, staleness: int = 0):
    """Mean training reward per step of ``algo`` on the ``kind`` env (and the trained
    policy with ``return_policy``). ``adapters``: the start frozen, one LoRA adapter per
    role of the env trained on it (``srpo_agents.models.adapters``). ``staleness`` 1:
    asynchronous SRPO's one-step-off schedule, played in order: step s + 1's episodes
    come from a copy of the weights that step s starts from (version s), and step s
    + 1 updates on them at version s + 1 with the decoupled objective
    (``max_staleness=1``, pi_prox recomputed)."""
    policy = copy.deepcopy(policy)
    if adapters:
        from srpo_agents.models.adapters import attach_role_adapters

        policy = attach_role_adapters(policy, sorted(set(LetterEnv(kind).roles.values())),
                                      rank=8, alpha=16)
    algorithm = ALGORITHMS[algo]
    estimator = estimator or ADVANTAGE_ESTIMATORS[algorithm.advantage]
    torch.manual_seed(seed)
    generator = copy.deepcopy(policy) if staleness else policy
    engine = RolloutEngine(generator, max_new_tokens=3, seed=seed)
    learner = Learner(policy, algorithm, LearnerConfig(lr=lr, epochs=2, minibatch_episodes=32,
                                                       max_staleness=staleness),
                      seed=seed)
    tasks, group = 8, 8
    envs = [LetterEnv(kind, seed=i) for i in range(tasks * group)]

    def options(step):
        return [{"task_index": t, "episode_id": f"s{step}-t{t}-g{g}"}
                for t in range(tasks) for g in range(group)]

    rewards = []
    ahead = engine.run(envs, options(0)) if staleness else None
    for step in range(steps):
        if not staleness:
            rollouts, _, _ = train_step(engine, envs, options(step), algorithm, estimator,
                                        {"shared": learner})
        else:
            rollouts = ahead
            generator.model.load_state_dict(policy.model.state_dict())  # version `step`
            engine.policy_version = step
            ahead = engine.run(envs, options(step + 1))
            _, update = learn(rollouts, algorithm, estimator, {"shared": learner},
                              version=step, max_staleness=staleness)
            assert update["sets_dropped_stale"] == 0
        rewards.append(float(np.mean([r.reward for r in rollouts])))
    return (rewards, policy) if return_policy else rewards


# kind: (steps, level the mean reward of the last 3 steps must reach). From the start
# (about 0.33 copy, 0.2 pair, 0.15 relay; 0 advantages stay there) every case measured
# reached 0.69 or more by then, on every start and kernel path, and most 0.8 or more
# (benchmarks/results/learning_margin.md). The level was 0.7 for that measurement and
# came down to 0.6 after it, because start 2 cleared 0.7 by 0.02 at most under the
# default and avx2 kernels: 0.6 keeps about 3 standard errors of a 192-episode mean.
CASES = {"copy": (10, 0.6), "pair": (10, 0.6), "relay": (10, 0.6)}
START_LIMIT = 0.45  # the first step's reward (before any update) is near chance
LEARNING_CASES = [(0, kind, algo) for kind in sorted(CASES) for algo in sorted(ALGORITHMS)]
LEARNING_CASES += [(seed, kind, algo) for seed in START_SEEDS[1:] for kind in sorted(CASES)
                   for algo in OTHER_START_ALGOS]


@pytest.mark.parametrize("seed,kind,algo", LEARNING_CASES,
                         ids=[f"start{s}-{k}-{a}" for s, k, a in LEARNING_CASES])
def test_every_algorithm_learns(skilled, seed, kind, algo):
    steps, level = CASES[kind]
    rewards = train_rewards(skilled(seed), kind, algo, steps)
    start, end = rewards[0], float(np.mean(rewards[-3:]))
    assert start < START_LIMIT, f"{kind}: the start is not near chance ({start:.2f})"
    assert end >= level, f"{algo} on {kind} from start {seed}: reward {start:.2f} -> {end:.2f} < {level}"


# One frozen start and a LoRA adapter per role (rank 8, alpha 16) at twice the full
# model's lr. Measured on start 0 (the last 3 steps' mean reward, ATEN_CPU_CAPABILITY
# default / avx2): at lr 1e-3 copy srpo 0.95/0.95, pair srpo 0.94/0.95, relay srpo
# 0.93/0.94, grpo 0.94/0.94, magrpo 0.92/0.95. Higher lrs cost MAGRPO (no clip) first:
# 0.62/0.86 at 2e-3, 0.63/0.83 at 3e-3, 0.00/0.21 at 5e-3. The relay env has two roles,
# so each event trains its own role's adapter.
ADAPTER_LR = 1e-3
ADAPTER_CASES = [("copy", "srpo"), ("pair", "srpo"), ("relay", "srpo"), ("relay", "grpo"),
                 ("relay", "magrpo")]


@pytest.mark.parametrize("kind,algo", ADAPTER_CASES, ids=[f"{k}-{a}" for k, a in ADAPTER_CASES])
def test_role_adapters_learn(skilled, kind, algo):
    pytest.importorskip("peft")
    steps, level = CASES[kind]
    rewards = train_rewards(skilled(0), kind, algo, steps, adapters=True, lr=ADAPTER_LR)
    start, end = rewards[0], float(np.mean(rewards[-3:]))
    assert start < START_LIMIT, f"{kind}: the start is not near chance ({start:.2f})"
    assert end >= level, (f"{algo} with role adapters on {kind}: reward {start:.2f} -> "
                          f"{end:.2f} < {level}")


# Asynchronous SRPO one step off (max_staleness 1, the decoupled objective): the same
# levels as the synchronous runs, for the set ratio and the per-token ratio.
ASYNC_CASES = [(kind, algo) for kind in sorted(CASES) for algo in ("grpo", "srpo")]


@pytest.mark.parametrize("kind,algo", ASYNC_CASES, ids=[f"{k}-{a}" for k, a in ASYNC_CASES])
def test_learning_one_step_off(skilled, kind, algo):
    steps, level = CASES[kind]
    rewards = train_rewards(skilled(0), kind, algo, steps, staleness=1)
    start, end = rewards[0], float(np.mean(rewards[-3:]))
    assert start < START_LIMIT, f"{kind}: the start is not near chance ({start:.2f})"
    assert end >= level, (f"{algo} one step off on {kind}: reward {start:.2f} -> "
                          f"{end:.2f} < {level}")


@pytest.mark.parametrize("kind", sorted(CASES))
def test_no_learning_without_advantages(skilled, kind):
    """The same run with every advantage forced to 0: the policy must not move, and the
    reward must stay below the level the learning tests ask for (so reaching it there
    is learning, not the starting policy's luck)."""
    steps, level = CASES[kind]
    start = skilled(0)
    rewards, policy = train_rewards(start, kind, "srpo", steps, estimator=zero_advantage,
                                    return_policy=True)
    assert np.mean(rewards[-3:]) < level and np.mean(rewards) < level, rewards
    for before, after in zip(start.model.parameters(), policy.model.parameters(),
                             strict=True):
        assert torch.equal(before, after)


def test_letter_env_rewards_only_the_full_team():
    env = LetterEnv("relay", seed=0)
    env.reset(options={"task_index": 1})                  # letter b
    observations, *_ = env.step({"caller_0": "b"})
    assert observations["echo_0"] == relay("b")
    _, rewards, *_ = env.step({"echo_0": "b"})
    assert rewards["caller_0"] == 1.0
    env.reset(options={"task_index": 1})
    env.step({"caller_0": "a"})
    _, rewards, *_ = env.step({"echo_0": "a"})           # a faithful relay of a wrong call
    assert rewards["echo_0"] == 0.0
    env.reset(options={"task_index": 1})
    env.step({"caller_0": "b"})
    _, rewards, *_ = env.step({"echo_0": "c"})           # a right call, not passed on
    assert rewards["echo_0"] == 0.0
    pair = LetterEnv("pair", seed=0)
    pair.reset(options={"task_index": 2})
    _, rewards, *_ = pair.step({"agent_0": "c", "agent_1": "d"})
    assert rewards["agent_0"] == 0.0 and pair.last_transition.set_size == 2
