"""The tiny model's own options (``srpo train --model tiny``): its supervised warm start
and its vocabulary. They are ``srpo train`` flags in a group of their own, and a run
records them under ``model_options``; other model sources take none."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class TinyConfig:
    """Every field is a ``srpo train`` flag of the tiny-model group (underscores become
    dashes)."""

    warmstart_minutes: float = 3.0
    """Time budget of the supervised warm start."""
    warmstart_steps: int = 0
    """Supervised steps of the warm start (0: until its time budget or
    target); with a step count the warm start does not depend on the machine's speed."""
    warmstart_decay: bool = False
    """Warm the lr up over 20 steps, then decay it on a cosine to a tenth
    over ``warmstart_steps`` (which it needs); the last steps then settle the policy
    instead of leaving it where a large step's noise put it."""
    warmstart_skill: float = 0.75
    """Accuracy of the scripted team whose trajectories the warm start
    imitates. Math: solvers imitate only right solutions; the aggregator imitates the
    majority of all three, so a lower skill teaches it to follow the solvers. Search: a
    query misspells its title with probability 1 - skill (not imitated); the readers
    imitate what to do after a failed search (``OracleSearchTeam``)."""
    warmstart_first_roles: tuple[str, ...] = ()
    """Roles whose examples alone fill the first
    ``warmstart_first_steps`` steps of the warm start (a curriculum: the searcher's short
    copy examples before the long reader prompts); then every role's."""
    warmstart_first_steps: int = 0
    """Steps of the warm start's curriculum (see
    warmstart_first_roles)."""
    warmstart_first_target: float = 1.0
    """< 1 makes the curriculum a phase of its own before the
    ``warmstart_steps``: a constant lr, at most ``warmstart_first_steps`` steps, ending
    once the first roles' exact-response rate on validation examples (checked every 50
    steps) reaches this (``srpo_agents.tiny.warmstart``). 1: the curriculum is the first
    ``warmstart_first_steps`` of the ``warmstart_steps``."""
    warmstart_focus_roles: tuple[str, ...] = ()
    """Roles of a focus phase after the ``warmstart_steps``: a fresh
    optimizer and lr schedule, and batches of these roles' examples alone except every
    4th, which holds every role's (the search track's readers, who learn to copy the
    answer out of a passage only after the searcher copies the name into its query)."""
    warmstart_focus_steps: int = 0
    """Steps of the focus phase (see warmstart_focus_roles); it needs
    ``warmstart_steps``."""
    warmstart_focus_target: float = 1.0
    """Stop the focus phase once the validation accuracy, checked every
    100 of its steps, reaches this (1: no checks; the phase runs all its steps)."""
    warmstart_init: str = ""
    """A finished warm start's folder to begin this one from instead of
    a fresh model (the search track's routed team starts from the search_answer_verify
    team's, which already copies names and answers); the hash of its weights joins the
    cache key. "": a fresh model."""
    warmstart_dir: str = ""
    """Folder that caches the warm start (default: the run directory),
    so that runs of several algorithms can share one."""
    warmstart_target: float = 0.2
    """Stop the warm start once its sampled accuracy on validation tasks
    reaches this."""
    warmstart_episodes: int = 20000
    """Reference-team episodes whose outputs the warm start imitates."""
    warmstart_eval_tasks: int = 64
    """Validation tasks of the warm start's accuracy checks."""
    warmstart_batch_size: int = 64
    """Rows per supervised step of the warm start."""
    tiny_vocab: int = 0
    """0 keeps one token per byte; N > 260 adds BPE merges of letters
    learned from the warm start's texts, up to N tokens (shorter prompts; a name is a
    token or a few, the same ones wherever it stands: ``srpo_agents.tiny``)."""

    def __post_init__(self) -> None:
        for name in ("warmstart_episodes", "warmstart_eval_tasks", "warmstart_batch_size"):
            _check_int(name, getattr(self, name), 1)
        for name in ("warmstart_steps", "warmstart_first_steps", "warmstart_focus_steps"):
            _check_int(name, getattr(self, name), 0)
        for name in ("warmstart_target", "warmstart_focus_target", "warmstart_first_target"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}={value!r}: expected a finite number >= 0.0")
        value = self.warmstart_minutes
        if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"warmstart_minutes={value!r}: expected a finite number > 0")
        if not 0.0 <= self.warmstart_skill <= 1.0:
            raise ValueError(f"warmstart_skill={self.warmstart_skill!r}: expected a "
                             f"probability in [0, 1]")
        if not isinstance(self.tiny_vocab, int) or not (self.tiny_vocab == 0
                                                         or self.tiny_vocab > 260):
            raise ValueError(f"tiny_vocab={self.tiny_vocab!r}: expected 0 (one token per "
                             f"byte) or an int > 260 (the byte and special tokens)")
        if not isinstance(self.warmstart_init, str):
            raise ValueError(f"warmstart_init={self.warmstart_init!r}: expected a folder path "
                             f"as a string ('' for a fresh model)")
        if self.warmstart_init and self.tiny_vocab:
            raise ValueError(f"warmstart_init={self.warmstart_init!r} with tiny_vocab="
                             f"{self.tiny_vocab!r}: expected tiny_vocab=0 (the init's "
                             f"tokenizer is kept)")
        self.warmstart_first_roles = tuple(self.warmstart_first_roles)
        self.warmstart_focus_roles = tuple(self.warmstart_focus_roles)
        self._check_phases()

    def _check_phases(self) -> None:
        if bool(self.warmstart_focus_roles) != bool(self.warmstart_focus_steps):
            raise ValueError(
                f"warmstart_focus_roles={self.warmstart_focus_roles!r} and "
                f"warmstart_focus_steps={self.warmstart_focus_steps!r}: expected both set "
                f"(a focus phase) or neither")
        if self.warmstart_focus_steps and not self.warmstart_steps:
            raise ValueError(f"warmstart_focus_steps={self.warmstart_focus_steps!r} needs "
                             f"warmstart_steps > 0: the focus phase follows a known number "
                             f"of steps")
        if bool(self.warmstart_first_roles) != bool(self.warmstart_first_steps):
            raise ValueError(
                f"warmstart_first_roles={self.warmstart_first_roles!r} and "
                f"warmstart_first_steps={self.warmstart_first_steps!r}: expected both set "
                f"(roles and a step count > 0) or neither")
        if self.warmstart_first_target < 1 and not self.warmstart_first_steps:
            raise ValueError(f"warmstart_first_target={self.warmstart_first_target!r} needs "
                             f"warmstart_first_steps > 0 (the first phase's step limit)")
        if (self.warmstart_steps and self.warmstart_first_target >= 1
                and self.warmstart_first_steps >= self.warmstart_steps):
            raise ValueError(f"warmstart_first_steps={self.warmstart_first_steps!r}: expected "
                             f"fewer than warmstart_steps={self.warmstart_steps!r}, so every "
                             f"role gets steps")
        if self.warmstart_decay and not self.warmstart_steps:
            raise ValueError("warmstart_decay=True needs warmstart_steps > 0: the cosine "
                             "decay runs over a known number of steps")

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> TinyConfig:
        """The config of a run's ``model_options``; an unknown key is named, with the
        fields there are."""
        if not isinstance(options, dict):
            raise ValueError(f"model_options={options!r}: expected a JSON object of the tiny "
                             f"model's options")
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise ValueError(f"model_options: {unknown[0]!r} is not an option of the tiny "
                             f"model; expected some of {names}")
        return cls(**options)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_int(name: str, value: Any, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}={value!r}: expected an int >= {low}")


TINY_FIELDS = frozenset(f.name for f in fields(TinyConfig))


def tiny_run(*presets: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """``TrainConfig`` arguments of a tiny-model run from flat settings (the presets
    merged left to right, then ``settings``), as the benchmarks' presets are written:
    the tiny options move into ``model_options`` (over any given there), and ``model``
    defaults to "tiny". With another model (a preset's run that starts from a saved
    folder) they are dropped: they shape only the tiny model's warm start."""
    flat: dict[str, Any] = {"model": "tiny"}
    for preset in (*presets, settings):
        flat.update(preset)
    options = dict(flat.pop("model_options", None) or {})
    options.update({name: flat.pop(name) for name in list(flat) if name in TINY_FIELDS})
    return {**flat, "model_options": options if flat["model"] == "tiny" else {}}


def with_tiny(config, **options: Any):
    """``config`` with these tiny options changed (a new, checked ``TrainConfig``)."""
    from dataclasses import replace

    return replace(config, model_options={**config.model_options, **options})
