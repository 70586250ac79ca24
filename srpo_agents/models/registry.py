"""Which source builds the policy for ``--model name``.

A model that is built rather than loaded is a plug-in: an installed package names it under
the ``srpo.models`` entry points (as envs are named under ``srpo.envs``), and srpo itself
registers its test-scale ``tiny`` model there (``pyproject.toml``), so the core never
imports a plug-in by name. A plug-in is an object with ``options`` (the dataclass of its own
settings, which a run records in ``TrainConfig.model_options``, or None),
``compact_prompts``, ``prepare(config, run_dir, log) -> (policy, meta)``,
``rank_options(config)`` (a data-parallel rank's options) and ``owns(folder)`` (a saved
model folder is one of its models, so ``srpo eval`` on it uses this source's settings).
Every other name is a pretrained LLM (``policy.PretrainedSource``) that
``sources.resolve_model`` finds.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

from srpo_agents.models.policy import PretrainedSource
from srpo_agents.models.sources import resolve_model

ENTRY_POINT_GROUP = "srpo.models"


@cache
def plugins() -> dict:
    """Plug-in name -> its entry point (not loaded until used)."""
    return {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}


def model_source(name: str):
    """The source behind ``--model name``: its plug-in, else a pretrained LLM."""
    point = plugins().get(name)
    return point.load()() if point is not None else PretrainedSource()


def check_model(name: str) -> str:
    """``name`` itself for a plug-in; else what transformers should load for it
    (``resolve_model``: a bad name fails here, in one line)."""
    return name if name in plugins() else resolve_model(name)


def check_options(name: str, options) -> dict:
    """``--model name``'s ``model_options``, checked and completed by its source's option
    class (a source without one takes none)."""
    source = model_source(name)
    if source.options is None:
        if options:
            raise ValueError(f"model_options={options!r}: --model {name} takes no options "
                             f"(only {', '.join(plugins())} does)")
        return {}
    return source.options.from_options(dict(options or {})).to_dict()


def prepare_policy(config, run_dir: Path, log) -> tuple:
    """The run's initial policy and its source's meta (the tiny model's warm start)."""
    return model_source(config.model).prepare(config, run_dir, log)
