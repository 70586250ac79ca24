"""Rollouts: play many episodes of srpo environments with one policy, batching every due
agent of every live episode into one generation call per round.

Deliberate choices:
- **Batch across episodes, step in lockstep.** Each round gathers the due agents of all
  live envs, generates for all of them at once, then steps every live env with its
  agents' texts. Episodes of different lengths simply drop out of later rounds. A round
  is as wide as the team sizes summed over live episodes (e.g. 64 parallel math episodes
  with K=3 solvers: 192 prompts, then 64 aggregator prompts).
- **Samples are keyed by what the env recorded.** After stepping, the engine reads
  ``env.last_transition`` and stores each due agent's sample under
  ``(transition.step_index, agent_id)``, the key the learner joins on
  ``Transition.consumed``. Agents that were not due get no sample.
- **No re-tokenization.** ``Sample.response_ids`` and ``Sample.logprobs`` are exactly what
  was sampled; ``Sample.text`` is ``policy.decode(response_ids)``, the string the env was
  sent. The env may clip an over-long text (``info["clipped_agents"]``); the sample keeps
  the full ids, which are the action the behaviour policy took.
- **Unfinished samples.** A response that hit ``max_new_tokens`` has ``finished=False``.
  With ``drop_unfinished=True`` the env is sent ``None`` for it, so the transition lists
  the agent in ``expected_agents`` but not in ``consumed`` and the learner drops the event
  whole. The sample is still kept (its tokens were generated and count as cost); its
  ``text`` is what the env would have received.
- **Where the time goes.** ``RolloutEngine.seconds`` accumulates wall time spent in
  generation (``"generation"``: prompt building, sampling, decoding) and in the envs
  (``"env"``: reset and step); a trainer reads the difference per step.
- **Policy version.** The learner bumps ``RolloutEngine.policy_version`` after each update;
  every sample records the version that produced it, and a backend holding its own copy of
  the weights (vLLM) is synced before the next generation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from srpo_agents import faults
from srpo_agents.models.policy import Policy
from srpo_agents.models.sharding import full_weights
from srpo_agents.rollout.generation import BACKENDS
from srpo_agents.rollout.sampling import GenerationOutput, Sampling
from srpo_envs import Transition

if TYPE_CHECKING:
    from srpo_agents.config import TrainConfig


@dataclass
class Sample:
    """One generated output of one agent at one event."""

    episode_id: str
    step_index: int
    agent_id: str
    role: str
    prompt_ids: list[int]
    response_ids: list[int]
    """Sampled ids, ending with the EOS id when ``finished``."""
    logprobs: list[float]
    """Behaviour log-prob of each response id; ``len(logprobs) == len(response_ids)``."""
    finished: bool
    """True if the response ended with EOS, False if it hit ``max_new_tokens``."""
    text: str
    """``policy.decode(response_ids)``: the text sent to the env (``None`` was sent instead
    when ``finished`` is False under ``drop_unfinished``)."""
    policy_version: int
    temperature: float | None = None
    """The temperature it was sampled at (its role's own, with ``role_sampling``), which
    the learner divides its logits by; None (rollouts from before it was recorded): the
    learner's temperature."""


@dataclass
class Rollout:
    """One episode: its transitions and the sample behind every due agent of each."""

    episode_id: str
    task_id: str
    transitions: list[Transition]
    samples: dict[tuple[int, str], Sample] = field(default_factory=dict)
    """Keyed by ``(step_index, agent_id)``."""

    @property
    def reward(self) -> float:
        """The episode outcome: the sum of transition rewards."""
        return sum(t.reward for t in self.transitions)

    @property
    def correct(self) -> bool | None:
        """``info["correct"]`` of the last transition, or None if it has none."""
        if not self.transitions or "correct" not in self.transitions[-1].info:
            return None
        return bool(self.transitions[-1].info["correct"])

    @property
    def generated_tokens(self) -> int:
        return sum(len(s.response_ids) for s in self.samples.values())

    @property
    def tool_calls(self) -> int:
        return sum(int(t.info.get("tool_calls", 0)) for t in self.transitions)


class RolloutEngine:
    """Plays episodes with ``policy``; see the module docstring.

    Args:
        policy: the policy to sample from.
        max_new_tokens: response length limit (tokens).
        temperature: sampling temperature; 0 means greedy (argmax, log-probs of the
            untempered softmax).
        top_p: nucleus mass in (0, 1]; below 1 the recorded log-probs are not the
            nucleus' (see ``srpo_agents.rollout.sampling``).
        max_batch: most prompts per forward batch (hf); vLLM's ``max_num_seqs``.
        drop_unfinished: send ``None`` for responses that hit ``max_new_tokens``.
        backend: "hf" (built-in loop) or "vllm" (optional extra).
        seed: seeds the sampler, so a run is reproducible.
        role_policies: optional per-role policies; a role listed here is played by its
            own policy (own generator, own weights), every other role by ``policy``.
            Each policy's agents are still batched across all episodes.
        role_sampling: optional per-role ``Sampling`` (temperature, top_p,
            max_new_tokens, stop strings); other roles use the arguments above.
        eval_temperature: the temperature of every role inside ``evaluating()`` (the
            held-out evaluations); None: each role's own.
        vllm_gpu_memory: with ``backend="vllm"`` on a GPU, the share of its memory the
            engines take together, split evenly between them (one per role policy).
        hf_compile: with ``backend="hf"``, the compiled static-cache decode loop.
        vllm_compile: with ``backend="vllm"`` on the CPU, vLLM's compiled model, not eager.
        vllm_sleep_level: with ``backend="vllm"`` on a GPU, the sleep level of the
            engines while the learner updates (``rest``); 0 keeps them awake.
    """

    def __init__(self, policy: Policy, *, max_new_tokens: int = 64, temperature: float = 1.0,
                 top_p: float = 1.0, max_batch: int = 256, drop_unfinished: bool = False,
                 backend: str = "hf", seed: int = 0,
                 role_policies: Mapping[str, Policy] | None = None,
                 role_sampling: Mapping[str, Sampling] | None = None,
                 eval_temperature: float | None = None, vllm_gpu_memory: float = 0.3,
                 hf_compile: bool = False, vllm_sleep_level: int = 1,
                 vllm_compile: bool = False):
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens!r}: expected >= 1")
        if temperature < 0:
            raise ValueError(f"temperature={temperature!r}: expected >= 0 (0 = greedy)")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p={top_p!r}: expected 0 < top_p <= 1")
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch!r}: expected >= 1")
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: expected one of {sorted(BACKENDS)}")
        self.policy = policy
        self.drop_unfinished = drop_unfinished
        self.policy_version = 0
        self.role_policies = dict(role_policies or {})
        self.default_sampling = Sampling(temperature, top_p, max_new_tokens)
        self.role_sampling = dict(role_sampling or {})
        self.eval_temperature = eval_temperature
        self._evaluating = False

        # vLLM engines share the GPU's memory left beside the learner, one share each
        engines = 1 + len(self.role_policies)
        extra = ({"gpu_memory": vllm_gpu_memory / engines, "sleep_level": vllm_sleep_level,
                  "compile": vllm_compile}
                 if backend == "vllm" else {"compile": hf_compile})

        def backend_for(p: Policy, offset: int):
            return BACKENDS[backend](p, max_new_tokens=max_new_tokens, temperature=temperature,
                                     top_p=top_p, max_batch=max_batch, seed=seed + offset,
                                     **extra)

        self._generator = backend_for(policy, 0)
        self._role_generators = {role: backend_for(p, i + 1) for i, (role, p)
                                 in enumerate(sorted(self.role_policies.items()))}
        self._synced_version = 0
        self.seconds = {"generation": 0.0, "env": 0.0}

    def policy_for(self, role: str) -> Policy:
        return self.role_policies.get(role, self.policy)

    def sampler_generators(self) -> dict[str, torch.Generator]:
        """The random generators behind sampling, by name, for checkpoints: restoring
        their states makes a resumed run draw the samples an uninterrupted one would."""
        named = {"sampler": self._generator}
        named.update({f"sampler:{r}": g for r, g in self._role_generators.items()})
        return {name: g.generator for name, g in named.items()
                if getattr(g, "generator", None) is not None}

    def rest(self) -> None:
        """The learner is about to update: generators that can free their memory for it
        (vLLM's sleep mode) do; the next sync or generation wakes them."""
        for generator in (self._generator, *self._role_generators.values()):
            getattr(generator, "sleep", lambda: None)()

    def _sync(self) -> None:
        if self._synced_version != self.policy_version:
            self._generator.sync_weights(self.policy.model)
            for role, generator in self._role_generators.items():
                generator.sync_weights(self.role_policies[role].model)
            self._synced_version = self.policy_version

    def generate(self, prompts: list[list[int]], sampling: list[Sampling] | None = None
                 ) -> list[GenerationOutput]:
        """Sample one response per prompt from the shared policy:
        ``(response_ids, logprobs, finished)`` each (``sampling``: each prompt's settings,
        default the engine's)."""
        self._sync()
        if sampling is None:
            return self._generator.generate(prompts)
        return self._generator.generate(prompts, sampling=sampling)

    def _prompt_ids(self, roles: list[str], texts: list[str]) -> list[list[int]]:
        """Prompt ids of ``texts``, one tokenizer call per role; in the callers' order."""
        by_role: dict[str, list[int]] = {}
        for i, role in enumerate(roles):
            by_role.setdefault(role, []).append(i)
        ids: list[list[int]] = [[] for _ in texts]
        for role, indices in by_role.items():
            batch = self.policy_for(role).prompt_ids_batch(role, [texts[i] for i in indices])
            for i, row in zip(indices, batch, strict=True):
                ids[i] = row
        return ids

    def sampling_for(self, role: str) -> Sampling:
        """A role's sampling settings now (its own, or the run's; inside ``evaluating()``
        with ``eval_temperature``, at that temperature)."""
        setting = self.role_sampling.get(role, self.default_sampling)
        if self._evaluating and self.eval_temperature is not None:
            setting = dataclasses.replace(setting, temperature=self.eval_temperature)
        return setting

    @contextlib.contextmanager
    def evaluating(self):
        """Held-out evaluation: every role samples at ``eval_temperature`` (when set)."""
        self._evaluating = True
        try:
            yield self
        finally:
            self._evaluating = False

    def _generate_by_role(self, roles: list[str], prompts: list[list[int]]) -> list[GenerationOutput]:
        """One batched call per policy; results in the callers' order. A policy with
        role adapters takes every role in one call (each row under its role's adapter).
        Rows whose role has its own sampling settings carry them (``sampling``)."""
        self._sync()
        settings = [self.sampling_for(role) for role in roles]
        sampling = None if all(s == self.default_sampling for s in settings) else settings
        if self.policy.adapter_roles:
            return self._generator.generate(prompts, roles, sampling=sampling)
        groups: dict[str | None, list[int]] = {}
        for i, role in enumerate(roles):
            groups.setdefault(role if role in self._role_generators else None, []).append(i)
        outputs: list[GenerationOutput | None] = [None] * len(prompts)
        for key, indices in groups.items():
            rows = None if sampling is None else [sampling[i] for i in indices]
            mine = [prompts[i] for i in indices]
            if key is not None:
                results = self._role_generators[key].generate(mine, sampling=rows)
            else:
                results = self.generate(mine) if rows is None else self.generate(mine, rows)
            for i, out in zip(indices, results, strict=True):
                outputs[i] = out
        return outputs  # type: ignore[return-value]

    def run(self, envs: Sequence, options: Sequence[dict]) -> list[Rollout]:
        """Reset ``envs[i]`` with ``options[i]`` and play every episode to its end.

        Returns one ``Rollout`` per env, in order. A policy sharded over ranks (FSDP2) is
        gathered whole for the call (``sharding.full_weights``, one collective): every
        rank calls ``run`` as often as the others, and decodes without collectives.
        """
        if len(envs) != len(options):
            raise ValueError(f"got {len(envs)} envs but {len(options)} options")
        with full_weights(self.policy.model):
            return self._play(envs, options)

    def _play(self, envs: Sequence, options: Sequence[dict]) -> list[Rollout]:
        tick = time.perf_counter()
        observations = [env.reset(options=dict(opt))[0]
                        for env, opt in zip(envs, options, strict=True)]
        samples: list[dict[tuple[int, str], Sample]] = [{} for _ in envs]
        self.seconds["env"] += time.perf_counter() - tick
        while live := [i for i, env in enumerate(envs) if env.agents]:
            tick = time.perf_counter()
            due = [(i, agent) for i in live for agent in envs[i].due_agents]
            roles = [envs[i].roles[agent] for i, agent in due]
            prompts = self._prompt_ids(roles, [observations[i][agent] for i, agent in due])
            outputs = self._generate_by_role(roles, prompts)
            faults.kill_point("generation")  # fault-injection tests: a kill mid-rollout
            version = self.policy_version
            texts = [self.policy_for(role).decode(ids)
                     for role, (ids, _, _) in zip(roles, outputs, strict=True)]
            actions: dict[int, dict[str, str | None]] = {i: {} for i in live}
            for (i, agent), (_, _, finished), text in zip(due, outputs, texts, strict=True):
                send = finished or not self.drop_unfinished
                actions[i][agent] = text if send else None
            middle = time.perf_counter()
            self.seconds["generation"] += middle - tick
            for i in live:
                observations[i] = envs[i].step(actions[i])[0]
            self.seconds["env"] += time.perf_counter() - middle
            for (i, agent), prompt, (ids, logprobs, finished), text in zip(
                    due, prompts, outputs, texts, strict=True):
                transition = envs[i].last_transition
                samples[i][(transition.step_index, agent)] = Sample(
                    episode_id=transition.episode_id, step_index=transition.step_index,
                    agent_id=agent, role=envs[i].roles[agent], prompt_ids=prompt,
                    response_ids=ids, logprobs=logprobs, finished=finished, text=text,
                    policy_version=version,
                    # greedy (0) records the untempered softmax's log-probs: temperature 1
                    temperature=self.sampling_for(envs[i].roles[agent]).temperature or 1.0)
        rollouts = []
        for env, episode_samples in zip(envs, samples, strict=True):
            transitions = list(env.transitions)
            first = transitions[0] if transitions else None
            rollouts.append(Rollout(
                episode_id=first.episode_id if first else "",
                task_id=first.task_id if first else "",
                transitions=transitions, samples=episode_samples))
        return rollouts


def engine_for(config: TrainConfig, policy: Policy,
               role_policies: Mapping[str, Policy] | None = None,
               seed_offset: int = 0) -> RolloutEngine:
    """The run's rollout engine: its backend, length limit, temperature and sampling seed
    (plus ``seed_offset``: a rollout worker's index)."""
    return RolloutEngine(policy, max_new_tokens=config.max_new_tokens,
                         temperature=config.temperature, backend=config.backend,
                         seed=config.sampling_seed + seed_offset,
                         role_policies=role_policies or {},
                         drop_unfinished=config.drop_unfinished,
                         role_sampling=role_sampling(config),
                         eval_temperature=config.eval_temperature,
                         vllm_gpu_memory=config.vllm_gpu_memory,
                         max_batch=config.max_batch, hf_compile=config.hf_compile,
                         vllm_sleep_level=config.vllm_sleep_level,
                         vllm_compile=config.vllm_compile)


def role_sampling(config: TrainConfig) -> dict[str, Sampling]:
    """``config.role_sampling`` as ``Sampling``s: a role's unset keys take the run's
    temperature, top_p 1, max_new_tokens and no stop strings."""
    return {role: Sampling(temperature=float(s.get("temperature", config.temperature)),
                           top_p=float(s.get("top_p", 1.0)),
                           max_new_tokens=int(s.get("max_new_tokens", config.max_new_tokens)),
                           stop=tuple(s.get("stop", ())))
            for role, s in config.role_sampling.items()}
