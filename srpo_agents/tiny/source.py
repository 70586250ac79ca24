"""``--model tiny`` as a model source: its policy is the warm start's result.

``TinySource.prepare`` builds (or loads from its cache) the warm-started tiny policy of a
run; ``status`` says whether the cache holds it without building anything. Both read
the run's tiny options (``TinyConfig``, recorded under ``TrainConfig.model_options``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from srpo_agents.tiny.config import TinyConfig


def tiny_config(config) -> TinyConfig:
    """The tiny options of a run (``config.model_options``)."""
    return TinyConfig.from_options(config.model_options)


class TinySource:
    """The test-scale model (``srpo_agents.tiny``) behind ``--model tiny``."""

    name = "tiny"
    options = TinyConfig
    compact_prompts = True
    """Its every prompt character is a token it must attend to: the envs' short prompts."""

    def prepare(self, config, run_dir: Path, log) -> tuple[Any, dict]:
        """(policy on the run's device, the warm start's meta)."""
        from srpo_agents.models.policy import place, resolve_device
        from srpo_agents.tiny.warmstart import warm_start

        # The warm start runs on the CPU (a 1M-parameter model); the policy then moves.
        policy, meta = warm_start(**warm_start_args(config, run_dir), log=log)
        return place(policy, resolve_device(config.device), config.dtype), meta

    def status(self, config, run_dir: Path) -> dict:
        """Whether ``prepare`` would find the warm start cached (its folder is the
        ``warmstart_dir`` option or ``run_dir``), without building or loading it:
        ``warm_start``'s ``check_only`` status (``cached``, ``changed``, ``seconds``)."""
        from srpo_agents.tiny.warmstart import warm_start

        return warm_start(**warm_start_args(config, run_dir), check_only=True)[1]

    @staticmethod
    def rank_options(config) -> dict:
        """A data-parallel rank's options: every rank loads rank 0's warm start."""
        return {**config.model_options,
                "warmstart_dir": config.model_options["warmstart_dir"] or config.out}

    @staticmethod
    def owns(folder: Path) -> bool:
        """Whether a saved model folder holds a tiny model (a byte-level vocabulary);
        role adapters: their base decides."""
        from srpo_agents.models.sources import MANIFEST

        folder = Path(folder)
        if (folder / MANIFEST).is_file():
            folder = Path(json.loads((folder / MANIFEST).read_text())["base"])
        if not (folder / "tokenizer.json").is_file() or not (folder / "config.json").is_file():
            return False
        return json.loads((folder / "config.json").read_text()).get("vocab_size", 10**6) < 1000


def warm_start_status(config, run_dir: Path) -> dict:
    return TinySource().status(config, run_dir)


def warm_start_args(config, run_dir: Path) -> dict[str, Any]:
    from srpo_agents.rollout.envs import env_factory
    from srpo_agents.tiny.warmstart import DECAY_WARMUP

    tiny = tiny_config(config)
    return dict(run_dir=Path(tiny.warmstart_dir or run_dir),
                make_train_env=env_factory(config, "train"),
                make_eval_env=env_factory(config, "validation"), key=warm_start_key(config),
                minutes=tiny.warmstart_minutes, target=tiny.warmstart_target,
                steps=tiny.warmstart_steps, skill=tiny.warmstart_skill,
                warmup=DECAY_WARMUP if tiny.warmstart_decay else 0,
                decay=tiny.warmstart_decay, first_roles=tiny.warmstart_first_roles,
                first_steps=tiny.warmstart_first_steps,
                first_target=tiny.warmstart_first_target,
                focus_roles=tiny.warmstart_focus_roles,
                focus_steps=tiny.warmstart_focus_steps,
                focus_target=tiny.warmstart_focus_target,
                episodes=tiny.warmstart_episodes, eval_tasks=tiny.warmstart_eval_tasks,
                batch_size=tiny.warmstart_batch_size, vocab_size=tiny.tiny_vocab,
                init=tiny.warmstart_init or None, seed=config.seed,
                max_new_tokens=config.max_new_tokens, env_name=config.env)


def warm_start_key(config) -> dict[str, Any]:
    """What shapes a run's warm start besides its own settings (``warmstart``): the
    env's arguments for the train and validation splits (workflow, agents, levels,
    prompts, ...) and the hashes of the data files they read."""
    from srpo_agents.tiny.warmstart import canonical, file_digest

    key = {
        "workflow": config.workflow,
        "train_env": config.env_kwargs("train"),
        "validation_env": config.env_kwargs("validation"),
        "files": {name: file_digest(getattr(config, name))
                  for name in ("dataset", "eval_dataset", "corpus")},
    }
    if config.env == "SRPO-Math-v0" and not config.dataset:
        # the generated math splits are keyed by computation since issue 60: a warm start
        # built on the text-keyed train split imitated what are test computations now
        # (absent elsewhere, so the committed search warm starts keep their keys)
        key["math_splits"] = "by-computation"
    return canonical(key)
