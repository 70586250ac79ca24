"""The tiny CPU policy's warm start: supervised fine-tuning on reference trajectories.

A randomly initialized 1M-parameter model never produces a correct answer, so RL would
have no signal. The warm start imitates reference trajectories, played by the env-side
scripted teams (``srpo_envs.scripted``) and read back as ``Transition``s: solvers copy
the task's reference solution, aggregators the majority answer, verifiers a judgement,
searchers the titles of supporting documents. Solver outputs that are not the reference
solution are left out, so wrong arithmetic is never imitated.

It stops at a *modest* accuracy (``target``, checked by sampling on the env's
``validation`` split, never on the test tasks the final evaluation scores) or at its time
budget, whichever comes first, so RL has room to improve. The result is cached in the
run directory (``warmstart/``) under a key of everything that shapes it: its own
settings plus the caller's ``key`` (``run_key``: env, workflow, every env argument,
prompts, the model's shape, seed, max_new_tokens and the hashes of the data files). A
cache made under another key is rebuilt, and the log says which parts changed.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from srpo_agents import faults
from srpo_agents.files import write_json_atomic
from srpo_agents.models.policy import Policy, load_policy
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.running.checkpoint import (
    SHARED,
    CheckpointError,
    checkpoint_dirs,
    optimizer_state,
    read_checkpoint,
    save_checkpoint,
    save_pretrained_atomic,
    set_rng_state,
)
from srpo_agents.running.evaluate import evaluate
from srpo_agents.running.progress import bar as progress_bar
from srpo_agents.tiny.model import build_tiny_policy
from srpo_envs import registry

META = "warmstart.json"


def canonical(value: Any) -> Any:
    """``value`` as plain JSON data, for a cache key: tuples become lists, and an object
    that JSON cannot hold (a token counter) becomes its type's name, so two runs with
    the same settings get the same key in any process."""
    def describe(obj: Any) -> str:
        return f"<{type(obj).__module__}.{type(obj).__qualname__}>"

    return json.loads(json.dumps(value, sort_keys=True, default=describe))


def file_digest(path: str | Path | None) -> str | None:
    """SHA-256 of a data file (None when there is no such file: a ``datasets`` name is
    recorded by name in the env arguments)."""
    if not path or not Path(path).is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    """The (dotted) keys whose values differ between two settings dicts."""
    changed = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += changed_keys(a, b, f"{prefix}{key}.")
        elif a != b:
            changed.append(prefix + key)
    return changed


def reference_examples(make_env: Callable[[int], Any], episodes: int, seed: int,
                       skill: float = 0.75, *, env_name: str
                       ) -> list[tuple[str, str, str]]:
    """(role, prompt, text) of every consumed output worth imitating, from ``episodes``
    episodes of env ``env_name``'s registered reference team (``EnvSpec.team``): on math
    ``ScriptedMathTeam(skill)`` (only right solutions are kept), on search
    ``OracleSearchTeam(slip=1 - skill)`` (slipped queries are dropped; what the team does
    after them is kept)."""
    team = registry.get(env_name).team(skill=skill, seed=seed)
    env = make_env(seed)
    examples = []
    for _ in range(episodes):
        observations, _ = env.reset()
        while env.agents:
            observations, *_ = env.step(team.act(env, observations))
        examples += [(c.role, c.prompt, c.text) for t in env.transitions for c in t.consumed
                     if team.imitable(env, c)]
    return examples


TINY_SHAPE = {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "max_positions": 1024}
"""The warm-started tiny model's shape (part of the cache key)."""

DECAY_WARMUP = 20
"""Steps of linear lr warm-up before the cosine decay (``TrainConfig.warmstart_decay``)."""


def lr_factor(step: int, warmup: int, decay_steps: int) -> float:
    """The warm start's lr multiplier at ``step``: linear warm-up over ``warmup`` steps,
    then, when ``decay_steps`` > 0, a cosine from 1 down to 0.1 at ``decay_steps``."""
    factor = min(1.0, (step + 1) / warmup) if warmup else 1.0
    if decay_steps:
        progress = min(1.0, max(0, step - warmup) / max(1, decay_steps - warmup))
        factor *= 0.1 + 0.45 * (1 + math.cos(math.pi * progress))
    return factor


def _encode(policy: Policy, examples: list[tuple[str, str, str]]) -> list[tuple[list[int], int]]:
    """(prompt ids + response ids + EOS, prompt length) of every example, in batched
    tokenizer calls (one call per example took half a minute for the demo's 50k)."""
    eos = policy.tokenizer.eos_token_id
    responses = policy.tokenizer([text for _, _, text in examples], add_special_tokens=False,
                                 split_special_tokens=True)["input_ids"] if examples else []
    by_role: dict[str, list[int]] = {}
    for i, (role, _, _) in enumerate(examples):
        by_role.setdefault(role, []).append(i)
    encoded: list[tuple[list[int], int]] = [([], 0)] * len(examples)
    for role, indices in by_role.items():
        prompts = policy.prompt_ids_batch(role, [examples[i][1] for i in indices])
        for i, prompt_ids in zip(indices, prompts, strict=True):
            encoded[i] = (prompt_ids + responses[i] + [eos], len(prompt_ids))
    return encoded


def _padded(policy: Policy, batch: list[tuple[list[int], int]]
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids, attention mask) of encoded rows, right-padded to the longest."""
    width = max(len(ids) for ids, _ in batch)
    pad = policy.pad_token_id
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch])
    attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch])
    return input_ids, attention


def sft_loss(policy: Policy, batch: list[tuple[list[int], int]]) -> torch.Tensor:
    """Token-mean cross-entropy on response tokens (prompt and padding masked)."""
    input_ids, attention = _padded(policy, batch)
    labels = input_ids.clone()
    for row, (ids, prompt_len) in enumerate(batch):
        labels[row, :prompt_len] = -100
        labels[row, len(ids):] = -100
    logits = policy.model(input_ids=input_ids, attention_mask=attention).logits
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1),
        ignore_index=-100)


@torch.no_grad()
def exact_response_rate(policy: Policy, batch: list[tuple[list[int], int]],
                        micro_rows: int = 32) -> float:
    """The share of encoded examples whose every response token (EOS included) is the
    model's most likely next token given the prompt and the tokens before it: the
    examples greedy decoding would reproduce exactly. A copy skill (a name into a query,
    an answer out of a passage) shows here as a jump from near 0."""
    was_training = policy.model.training
    policy.model.eval()
    exact = 0
    for start in range(0, len(batch), micro_rows):
        micro = batch[start:start + micro_rows]
        input_ids, attention = _padded(policy, micro)
        predicted = policy.model(input_ids=input_ids, attention_mask=attention).logits.argmax(-1)
        for row, (ids, prompt_len) in enumerate(micro):
            target = torch.tensor(ids[prompt_len:])
            exact += bool((predicted[row, prompt_len - 1:len(ids) - 1] == target).all())
    policy.model.train(was_training)
    return exact / max(1, len(batch))


def sft_step(policy: Policy, optimizer: torch.optim.Optimizer, batch: list[tuple[list[int], int]],
             scheduler=None, micro_rows: int = 16, max_grad_norm: float | None = 1.0
             ) -> torch.Tensor:
    """One supervised optimizer step on ``batch`` (encoded (ids, prompt length) rows):
    the token-mean loss of each micro-batch, weighted by its share of rows, accumulated,
    the gradient norm clipped, then the optimizer and scheduler stepped. Returns the last
    micro-batch's loss. The one SFT step of the warm start, the learning tests' start and
    the labs under ``benchmarks/labs``.

    Micro-batches of 16 rows: large activation tensors cost more in fresh memory pages
    than in arithmetic on a small CPU model (see ``srpo_agents.learning.learner``)."""
    # sorted by length so each micro-batch pads little
    batch = sorted(batch, key=lambda e: len(e[0]))
    optimizer.zero_grad(set_to_none=True)
    loss = torch.tensor(float("nan"))
    for start_row in range(0, len(batch), micro_rows):
        micro = batch[start_row:start_row + micro_rows]
        loss = sft_loss(policy, micro)
        (loss * len(micro) / len(batch)).backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), max_grad_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss


FOCUS_MIX_EVERY = 4
"""In the focus phase every 4th batch holds every role's examples, the others only the
focus roles': the other roles keep what the main phase taught them."""

FOCUS_CHECK_EVERY = 100
"""Focus-phase steps between validation checks when the phase has a target
(``focus_target`` < 1): the readers' copy skill appears suddenly, at a step that varies
with the seed and the float kernels, so the phase runs until it has appeared."""

FIRST_CHECK_EVERY = 50
"""First-phase steps between checks of the first roles' exact-response rate when the
phase has a target (``first_target`` < 1)."""

CHECK_EXAMPLES = 200
"""Validation reference examples per role of the exact-response checks."""

SAVE_EVERY = 100
"""Optimizer steps between the warm start's resumable checkpoints."""

BUILD = "warmstart-build"
"""The run directory's folder of an unfinished warm start's checkpoints."""


def _optimizer(policy: Policy, lr: float, warmup: int, decay_steps: int):
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, warmup, decay_steps))
    return optimizer, scheduler


def _role_pool(encoded: list, examples: list, roles: tuple[str, ...], what: str) -> list:
    pool = [e for e, (role, _, _) in zip(encoded, examples, strict=True) if role in roles]
    if roles and not pool:
        raise ValueError(f"{what}={tuple(roles)!r}: no reference example has one of these "
                         f"roles (roles: {sorted({r for r, _, _ in examples})})")
    return pool


def warm_start(run_dir: Path, make_train_env: Callable[[int], Any],
               make_eval_env: Callable[[int], Any], *, minutes: float, target: float,
               seed: int, max_new_tokens: int, steps: int = 0, episodes: int = 20000,
               check_every: int = 50, eval_tasks: int = 64, skill: float = 0.75,
               lr: float = 3e-3, batch_size: int = 64, warmup: int = 0, decay: bool = False,
               first_roles: tuple[str, ...] = (), first_steps: int = 0,
               first_target: float = 1.0, focus_roles: tuple[str, ...] = (), focus_steps: int = 0,
               focus_target: float = 1.0, env_name: str, key: dict | None = None, vocab_size: int = 0,
               init: str | Path | None = None, save_every: int = SAVE_EVERY, log=print,
               check_only: bool = False) -> tuple[Policy | None, dict]:
    """Build (or load from ``run_dir/warmstart``) the warm-started tiny policy.

    It stops after ``steps`` optimizer steps (0: no limit), after ``minutes``, or once
    the validation accuracy checked every ``check_every`` steps reaches ``target``,
    whichever comes first. A step limit makes the result independent of the machine's
    speed; the time limit is then a safety cap. ``skill``: the scripted team's accuracy
    (see ``reference_examples``). ``warmup``: steps of linear lr warm-up; ``decay``:
    cosine decay of the lr to a tenth over ``steps`` (needs ``steps``). ``first_roles``,
    ``first_steps``: the first steps sample only those roles' examples (a curriculum:
    short prompts that teach a skill, such as copying a name, before the long ones).
    ``first_target`` < 1 makes that curriculum a phase of its own, before the ``steps``:
    a constant lr after the warm-up (a decaying one lowers the lr before a copy skill
    has appeared, ``benchmarks/results/search_track.md``), at most ``first_steps`` steps,
    ending once the first roles' exact-response rate (``exact_response_rate``) on
    validation reference examples, checked every ``FIRST_CHECK_EVERY`` steps, reaches
    ``first_target``; the ``steps`` that follow (every role's, their own warm-up and
    decay) then sharpen what it found.
    ``focus_roles``, ``focus_steps``: after the ``steps``, a focus phase of
    ``focus_steps`` more steps with a fresh optimizer and lr schedule (``DECAY_WARMUP``
    steps of warm-up, then the cosine over the phase), whose batches hold only those
    roles' examples except every ``FOCUS_MIX_EVERY``-th (the search track's readers, who
    learn to copy from a passage only after the searcher has learned its query).
    ``focus_target`` < 1: every ``FOCUS_CHECK_EVERY`` focus steps the validation accuracy
    is checked, and the phase stops once it reaches ``focus_target`` (a skill that
    appears at an unpredictable step is then waited for, not gambled on).
    ``make_eval_env`` must make envs of a validation split (module docstring); ``key``:
    what else shapes the result (``srpo_agents.tiny.source.warm_start_key``), part of the cache
    key. ``vocab_size``: the tokenizer's (``tiny.build_tiny_policy``; 0, bytes only).
    ``init``: a finished warm start's folder (``run_dir/warmstart`` of another build, of
    this shape) to begin from instead of a fresh model; its tokenizer is kept (so
    ``vocab_size`` is not used) and the hash of its weights joins the cache key (the
    search track's routed team starts from the one that already copies, ``init_model``).

    ``check_only``: build nothing and load nothing; return ``(None, status)`` with
    ``status["cached"]`` (the cache holds a build of exactly these settings),
    ``status["changed"]`` (the settings that differ from the cache's, empty when there
    is none) and ``status["seconds"]`` (how long the cached build took, when there is
    one): what ``make demo`` tells a user before it rebuilds its start point.

    Every ``save_every`` steps the build writes a checkpoint (``run_dir/warmstart-build``);
    a build that was killed resumes from it with the same weights, optimizer and random
    numbers it would have had, and ``minutes`` counts the time of every attempt."""
    if decay and not steps:
        raise ValueError("warm_start(decay=True) needs steps > 0: the cosine decay runs "
                         "over a known number of steps")
    if focus_steps and not steps:
        raise ValueError("warm_start(focus_steps > 0) needs steps > 0: the focus phase "
                         "starts after a known number of steps")
    out = Path(run_dir) / "warmstart"
    settings = {"minutes": minutes, "target": target, "seed": seed, "episodes": episodes,
                "check_every": check_every, "eval_tasks": eval_tasks, "skill": skill,
                "steps": steps, "lr": lr, "batch_size": batch_size, "warmup": warmup,
                "decay": decay, "max_new_tokens": max_new_tokens, "env": env_name,
                "first_roles": list(first_roles), "first_steps": first_steps,
                # a byte tokenizer (0) leaves the key as it was before merges existed
                "model": {**TINY_SHAPE, **({"vocab_size": vocab_size} if vocab_size else {})},
                "run": key or {}, "version": 3}
    if init:  # absent when unused: the keys of existing caches stay valid
        settings["model"] = {**TINY_SHAPE, "init": init_model(init)}
    if first_target < 1:  # absent when unused: the keys of existing caches stay valid
        settings.update(first_target=first_target, first_check_every=FIRST_CHECK_EVERY,
                        check_examples=CHECK_EXAMPLES)
    if focus_steps:
        settings.update(focus_roles=list(focus_roles), focus_steps=focus_steps)
        if focus_target < 1:
            settings.update(focus_target=focus_target, focus_check_every=FOCUS_CHECK_EVERY)
    settings = canonical(settings)
    meta_path = out / META
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    if meta is not None and meta.get("settings") == settings:
        if check_only:
            return None, {**meta, "cached": True, "changed": []}
        log(f"warm start: cached in {out} (accuracy {meta['accuracy']:.3f})")
        return load_policy(str(out)), {**meta, "cached": True}
    # the shallowest keys first: "env" says more than "run.train_env.prompts.solver"
    changed = [] if meta is None else sorted(
        changed_keys(meta.get("settings") or {}, settings),
        key=lambda name: (name.count("."), name))
    if check_only:
        return None, {"cached": False, "changed": changed,
                      "seconds": (meta or {}).get("seconds")}
    if meta is not None:
        log(f"warm start: the cache in {out} was made with other settings (changed: "
            f"{', '.join(changed[:8])}{' ...' if len(changed) > 8 else ''}); rebuilding")
    torch.manual_seed(seed)
    examples = reference_examples(make_train_env, episodes=episodes, seed=seed, skill=skill,
                                  env_name=env_name)
    texts = [p for _, p, _ in examples] + [t for _, _, t in examples]
    policy = load_policy(str(init)) if init else build_tiny_policy(
        texts, Path(run_dir) / "tiny-init", seed=seed, vocab_size=vocab_size, **TINY_SHAPE)
    encoded = _encode(policy, examples)
    first_pool = _role_pool(encoded, examples, first_roles if first_steps else (),
                            "first_roles")
    focus_pool = _role_pool(encoded, examples, focus_roles if focus_steps else (),
                            "focus_roles")
    separate_first = first_target < 1
    check_pool = _check_pool(policy, make_eval_env, first_roles, seed, skill, env_name) \
        if separate_first else []
    engine = RolloutEngine(policy, max_new_tokens=max_new_tokens, seed=seed)
    eval_envs = [make_eval_env(10_000 + i) for i in range(eval_tasks * 2)]
    build = Path(run_dir) / BUILD

    def phase_optimizer(phase: str):
        if phase == "first":  # constant after the warm-up: see the docstring
            return _optimizer(policy, lr, warmup or DECAY_WARMUP, 0)
        if phase == "focus":
            return _optimizer(policy, lr, DECAY_WARMUP, focus_steps)
        return _optimizer(policy, lr, warmup, steps if decay else 0)

    # ``done``: steps of the phase now running; ``base``: steps of the phases before it
    phase, done, base, spent = ("first" if separate_first else "main"), 0, 0, 0.0
    optimizer, scheduler = phase_optimizer(phase)
    rng = random.Random(seed)
    resumed = _resume(build, settings, policy, rng, log)
    if resumed is not None:
        phase, done, spent = resumed["phase"], resumed["done"], resumed["seconds"]
        base = resumed.get("base", steps if phase == "focus" else 0)
        optimizer, scheduler = phase_optimizer(phase)
        optimizer.load_state_dict(resumed["optimizer"])
        scheduler.last_epoch = resumed["scheduler_epoch"]
    start, checked, loss = time.monotonic() - spent, None, torch.tensor(float("nan"))

    def check(step: int, loss: torch.Tensor) -> float:
        policy.model.eval()
        accuracy = evaluate(engine, eval_envs, list(range(eval_tasks)), k=2,
                            tag="warm")["avg_at_k"]
        log(f"warm start: step {step} loss {loss.item():.3f} validation avg@2 "
            f"{accuracy:.3f} ({time.monotonic() - start:.0f}s)")
        return accuracy

    def total() -> int:
        return base + done

    def first_rate(step: int) -> float:
        rate = exact_response_rate(policy, check_pool)
        log(f"warm start: step {step} loss {loss.item():.3f} {', '.join(first_roles)} "
            f"exact on validation {rate:.3f} ({time.monotonic() - start:.0f}s)")
        return rate

    def enter(name: str) -> None:
        nonlocal phase, done, base, optimizer, scheduler, rng
        phase, done, base = name, 0, total()
        optimizer, scheduler = phase_optimizer(phase)
        if name == "focus":
            rng = random.Random(seed + 1)
            log(f"warm start: focus phase, {focus_steps} steps on {', '.join(focus_roles)}")
        else:
            log(f"warm start: main phase after {base} first-phase steps")

    # The bar's total is every phase's cap: a phase that reaches its target ends early,
    # so the ETA is an upper bound.
    bar = progress_bar((first_steps if separate_first else 0) + steps + focus_steps or None,
                       "warm start", "step", total())
    while time.monotonic() - start < minutes * 60:
        if phase == "first" and done >= first_steps:
            enter("main")
        if phase == "main" and steps and done >= steps:
            if not focus_steps:
                break
            enter("focus")
        if phase == "focus" and done >= focus_steps:
            break
        policy.model.train()
        if phase == "focus":
            pool = encoded if (done + 1) % FOCUS_MIX_EVERY == 0 else focus_pool
        elif phase == "first":
            pool = first_pool
        else:
            pool = first_pool if not separate_first and done < first_steps else encoded
        loss = sft_step(policy, optimizer, rng.sample(pool, min(batch_size, len(pool))),
                        scheduler)
        done += 1
        bar.update(1)
        checked = None
        first_checked = phase == "first" and done % FIRST_CHECK_EVERY == 0
        if first_checked and first_rate(total()) >= first_target:
            enter("main")  # the skill has appeared; a checkpoint of this step resumes there
        if total() % save_every == 0:
            _save(build, settings, policy, optimizer, scheduler, rng, phase, done, base,
                  time.monotonic() - start)
        faults.at_step(total())
        faults.kill_point("warmstart")  # crash-safety tests: a kill between steps
        faults.at_step(None)
        # Held-out checks serve the early stop; without one (target >= 1) the last
        # step's check below is the only one.
        if phase == "main" and target < 1 and done and done % check_every == 0:
            checked = check(done, loss)
            if checked >= target:
                break
        elif phase == "focus" and focus_target < 1 and done % FOCUS_CHECK_EVERY == 0:
            checked = check(total(), loss)
            if checked >= focus_target:
                break
        elif total() % check_every == 0 and not first_checked:
            log(f"warm start: step {total()} loss {loss.item():.3f} "
                f"({time.monotonic() - start:.0f}s)")
    bar.close()
    accuracy = checked if checked is not None else check(total(), loss)
    policy.model.eval()
    meta = {"settings": settings, "steps": total(), "accuracy": accuracy,
            "examples": len(examples), "seconds": time.monotonic() - start}
    if separate_first:
        meta["first_roles_exact"] = exact_response_rate(policy, check_pool)
    save_pretrained_atomic(policy.model, policy.tokenizer, out)
    write_json_atomic(meta_path, meta)
    shutil.rmtree(build, ignore_errors=True)
    return load_policy(str(out)), meta


def init_model(folder: str | Path) -> dict[str, str]:
    """The cache-key entry of a warm start that begins from ``folder`` (a finished warm
    start): the hash of its weights (not its path, so a clone elsewhere hits the same
    cache). A folder that is not a saved tiny model
    of ``TINY_SHAPE`` is refused with what was expected."""
    folder = Path(folder)
    weights, config_path = folder / "model.safetensors", folder / "config.json"
    if not (weights.is_file() and config_path.is_file()):
        raise ValueError(f"warmstart init={str(folder)!r}: expected a finished warm start's "
                         f"folder (config.json and model.safetensors), found neither or one")
    config = json.loads(config_path.read_text())
    shape = {"hidden_size": config.get("hidden_size"),
             "num_layers": config.get("num_hidden_layers"),
             "num_heads": config.get("num_attention_heads"),
             "max_positions": config.get("max_position_embeddings")}
    if shape != TINY_SHAPE:
        raise ValueError(f"warmstart init={str(folder)!r}: a model of shape {shape}, "
                         f"expected the tiny shape {TINY_SHAPE}")
    return {"weights": file_digest(weights)}


def _check_pool(policy: Policy, make_eval_env: Callable[[int], Any], roles: tuple[str, ...],
                seed: int, skill: float, env_name: str) -> list[tuple[list[int], int]]:
    """Up to ``CHECK_EXAMPLES`` encoded reference examples per role of ``roles``, played
    by the reference team on the validation split (never the test tasks)."""
    examples = reference_examples(make_eval_env, episodes=CHECK_EXAMPLES, seed=seed + 7,
                                  skill=skill, env_name=env_name)
    picked = []
    for role in roles:
        picked += [e for e in examples if e[0] == role][:CHECK_EXAMPLES]
    if not picked:
        raise ValueError(f"first_roles={tuple(roles)!r}: no validation reference example "
                         f"has one of these roles")
    return _encode(policy, picked)


def _save(build: Path, settings: dict, policy: Policy, optimizer, scheduler,
          rng: random.Random, phase: str, done: int, base: int, seconds: float) -> None:
    save_checkpoint(build, policies={SHARED: policy}, optimizers={SHARED: optimizer},
                    step=base + done, config=settings, generators={"batches": rng},
                    extra={"phase": phase, "done": done, "base": base, "seconds": seconds,
                           "scheduler_epoch": scheduler.last_epoch})


def _resume(build: Path, settings: dict, policy: Policy, rng: random.Random, log
            ) -> dict | None:
    """The newest usable checkpoint of an unfinished build with these settings, loaded
    into ``policy`` and ``rng``; its phase, steps, time and optimizer state. None when
    there is none (one of other settings is discarded, and the log says so)."""
    for folder in checkpoint_dirs(build):
        try:
            payload, tensors = read_checkpoint(folder)
        except CheckpointError as err:
            log(f"warm start: checkpoint skipped: {err}")
            continue
        if payload["config"] != settings:
            log(f"warm start: {build} holds a build of other settings; starting over")
            shutil.rmtree(build, ignore_errors=True)
            return None
        prefix = f"model/{SHARED}/"
        policy.model.load_state_dict({k[len(prefix):]: v for k, v in tensors.items()
                                      if k.startswith(prefix)})
        set_rng_state(payload["rng"], tensors, {"batches": rng})
        extra = payload["extra"]
        log(f"warm start: resuming from {folder} ({extra['phase']} phase, step "
            f"{extra['done']}, {extra['seconds']:.0f}s spent)")
        return {**extra, "optimizer": optimizer_state(SHARED, payload["optimizers"][SHARED],
                                                      tensors)}
    return None
