"""Configuration of a training run (``srpo train``), checked on construction.

``TrainConfig`` is flat (``config.lr``) and made of sections (``SECTIONS``): the env, model,
algorithm, evaluation and run sections in ``config.sections``, the sampler's in
``config.rollout``, the learner's in ``config.learner``; what no section can check alone is
checked here (``TrainConfig._check_together``)."""

from __future__ import annotations

from dataclasses import InitVar, asdict, dataclass, fields
from pathlib import Path
from typing import Any

from srpo_agents.config.learner import LearnerConfig
from srpo_agents.config.rollout import RolloutConfig
from srpo_agents.config.sections import (
    AlgorithmConfig,
    EnvConfig,
    EvalConfig,
    ModelConfig,
    RunConfig,
)
from srpo_agents.models.registry import model_source
from srpo_envs import registry

REMOVED_SETTINGS = {
    "minibatch_units": "mini-batches are sized in episodes since issue 60, so that every "
                       "algorithm takes the same optimizer steps (a unit is a set for SRPO "
                       "but one output for the baselines): use minibatch_episodes"}
"""Settings a run file may still hold, and what replaced them (``srpo train --config``
names the new one instead of calling the old one unknown)."""


SECTIONS = (EnvConfig, ModelConfig, AlgorithmConfig, RolloutConfig, LearnerConfig, EvalConfig,
            RunConfig)


@dataclass
class TrainConfig(RunConfig, EvalConfig, LearnerConfig, RolloutConfig, AlgorithmConfig,
                  ModelConfig, EnvConfig):
    """A training run: every field of its sections (``SECTIONS``, in this order in
    ``srpo train --help``) is a flag, underscores become dashes. Flat: ``config.lr``,
    ``TrainConfig(lr=...)``, and a run's ``config.json`` is one JSON object."""

    training: InitVar[bool] = True
    """False for a config that only samples episodes (srpo eval, srpo rollout): the
    checks that only an update needs (group_size >= 2) are skipped. Not a field: it is
    neither recorded nor a flag."""

    def __post_init__(self, training: bool = True) -> None:
        spec = registry.get(self.env)  # an unknown id names the closest registered one
        self.check_env(spec)
        self.check_algorithm(training)
        self.check_rollout()
        self.check_learner()
        self.check_eval()
        self.check_run()
        self.check_model()
        self._check_together()
        self.compact_prompts = self.compact_prompts or model_source(self.model).compact_prompts
        if not self.out:
            self.out = f"runs/{self.env}-{self.workflow}-{self.algo}-s{self.seed}"
        # The env's own config checks every argument the run will build it with (levels,
        # agent counts, routes, prompts, extra_env_kwargs), here and not at step 1.
        for split in ("train", "validation", "test"):
            try:
                spec.check_kwargs(self.env_kwargs(split))
            except registry.EnvArgumentError:
                raise  # names the env and the EnvSpec field already
            except (ValueError, TypeError) as err:
                raise spec.explain(err, split) from None

    def _check_together(self) -> None:
        """What one section cannot check alone."""
        if self.role_sampling:
            roles = registry.get(self.env).roles(self.workflow)
            unknown = sorted(set(self.role_sampling) - set(roles))
            if unknown:
                raise ValueError(f"role_sampling: role {unknown[0]!r} is not a role of "
                                 f"{self.env} {self.workflow}; its roles: {roles}")
        if self.ray_address and not (self.rollout_workers or self.ray_ranks):
            raise ValueError(f"ray_address={self.ray_address!r} needs rollout_workers >= 1 "
                             f"or ray_ranks >= 1")
        if self.ray_ranks and not self.data_parallel:
            raise ValueError(f"ray_ranks={self.ray_ranks} without data_parallel: the Ray "
                             f"actors are the ranks of a data-parallel run (add "
                             f"--data-parallel)")
        if self.data_parallel and (self.rollout_workers or self.per_role_policies):
            raise ValueError("data_parallel works with one shared policy and in-process "
                             "rollouts (not rollout_workers or per_role_policies)")
        if self.per_role_adapters and self.rollout_workers:
            raise ValueError("per_role_adapters is not supported with rollout_workers "
                             "yet: the workers hold one plain policy")
        if self.rollout_workers and self.per_role_policies:
            raise ValueError("rollout_workers with per_role_policies is not supported: the "
                             "workers play one shared policy")
        if self.data_parallel and self.backend != "hf":
            raise ValueError(f"data_parallel with backend={self.backend!r}: the learner is "
                             f"sharded (FSDP2) and only the hf backend generates there yet "
                             f"(inside the gathered weights); vLLM's weight sync reads "
                             f"whole tensors")
        if self.data_parallel and self.dynamic_sampling:
            raise ValueError("data_parallel with dynamic_sampling: its extra rounds differ "
                             "by rank, and every rollout of a sharded (FSDP2) learner is a "
                             "collective that all ranks must call together")
        clash = ("data_parallel" if self.data_parallel else
                 "rollout_workers" if self.rollout_workers else
                 f"backend={self.backend!r}" if self.backend != "hf" else "")
        if self.eval_processes and clash:
            raise ValueError(f"eval_processes={self.eval_processes} with {clash}: the "
                             f"evaluation helpers copy the hf policy of one process "
                             f"(expected eval_processes=0 there)")
        if self.max_staleness and self.data_parallel:
            raise ValueError(f"max_staleness={self.max_staleness} with data_parallel: "
                             f"asynchronous rollouts need one learner process (use "
                             f"rollout_workers to spread generation instead)")

    @property
    def sampling_seed(self) -> int:
        """The seed of everything the run samples: ``seed`` itself when ``rollout_seed``
        is 0 (so existing runs are unchanged), else a value derived from both."""
        return self.seed if not self.rollout_seed else self.seed + 1_000_003 * self.rollout_seed

    def learner(self) -> LearnerConfig:
        """The learner's section, as ``Learner`` takes it, with ``pi_old`` "auto" decided
        for this run (``sampler_is_learner``)."""
        values = {f.name: getattr(self, f.name) for f in fields(LearnerConfig)}
        values["token_budget"] = self.token_budget or self.max_new_tokens
        if self.pi_old == "auto":
            values["pi_old"] = "sampler" if self.sampler_is_learner else "learner"
        return LearnerConfig(**values)

    @property
    def sampler_is_learner(self) -> bool:
        """Whether the rollouts' log-probs are the learner's own computation, bit for bit
        up to float noise: the hf backend, in this process, in float32. vLLM's kernels,
        16-bit compute (incremental decoding and a full forward round differently) and
        another process's copy of the weights are not."""
        import torch

        from srpo_agents.models.policy import resolve_device, resolve_precision

        precision = resolve_precision(self.dtype, resolve_device(self.device))
        return (self.backend == "hf" and not self.hf_compile and not self.rollout_workers
                and not self.max_staleness and precision.compute == torch.float32)

    def env_kwargs(self, split: str, token_counter=None) -> dict[str, Any]:
        """The env's constructor arguments for the "train", "validation" or "test" split,
        through its registered ``EnvSpec`` (any env, built-in or plug-in, the same way).
        ``token_counter``: counts a text's tokens for the team cost (the policy's
        tokenizer)."""
        kwargs = registry.get(self.env).kwargs(self.run_settings(split, token_counter))
        kwargs.update(self.extra_env_kwargs)
        return kwargs

    def run_settings(self, split: str, token_counter=None) -> registry.RunSettings:
        return registry.RunSettings(
            workflow=self.workflow, split=split, n_agents=self.n_agents,
            max_turns=self.max_turns,
            # Dataset files keep their own splits: the training file serves the validation
            # checks made during training; the test file is read by the final evaluation.
            dataset=self.dataset if split in ("train", "validation") else self.eval_dataset,
            compact=self.compact_prompts, max_new_tokens=self.max_new_tokens,
            difficulty=self.difficulty, corpus=self.corpus, retriever=self.retriever,
            cost_per_token=self.cost_per_token, cost_per_tool_call=self.cost_per_tool_call,
            token_counter=token_counter)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def same_settings(stored: dict[str, Any], config: TrainConfig,
                  ignore: tuple[str, ...] = ("out",)) -> bool:
    """Whether a recorded config (a run's summary or checkpoint, as JSON) is ``config``.
    A field added since it was written counts as its default there (the run could not
    have set it); a field since removed counts as nothing (the tiny model's warm-start
    settings, now its ``model_options``, shaped only its warm start, never a run from a
    saved folder). ``ignore``: fields that say where, not what (``out``)."""
    import json

    defaults = json.loads(json.dumps(TrainConfig(env=config.env, workflow=config.workflow,
                                                 out=config.out).to_dict()))
    current = json.loads(json.dumps(config.to_dict()))
    stored = {k: v for k, v in stored.items() if k in defaults and k not in ignore}
    current = {k: v for k, v in current.items() if k not in ignore}
    return {**{k: defaults[k] for k in current.keys() - stored.keys()}, **stored} == current


def holds_config(path: Path, config: TrainConfig, ignore: tuple[str, ...] = ()) -> bool:
    """Whether the JSON file ``path`` holds a result of this very config (its "config"
    entry, compared by ``same_settings``). Where a result was written is not what it is:
    the same run under an absolute and a relative --out is still it. ``ignore``: fields
    the result does not depend on besides."""
    import json

    if not Path(path).is_file():
        return False
    stored = json.loads(Path(path).read_text()).get("config")
    return isinstance(stored, dict) and same_settings(stored, config,
                                                      ignore=("out", *ignore))
