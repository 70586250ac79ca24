"""One registry of srpo environments, read by Gymnasium ids and by the learner.

An ``EnvSpec`` says how to build an environment (a string entry point to its PettingZoo
parallel-env function, imported only when the env is made), its workflows and, for the
tiny CPU policy, its compact prompts and the scripted team whose trajectories its warm
start imitates. ``srpo train --env NAME``, ``srpo envs`` and ``gym.make(NAME)`` all look
names up here, so a new environment needs no change to the learner.

Three ways in:
- the built-in specs below (``SRPO-Math-v0``, ``SRPO-Search-v0``, ``SRPO-Countdown-v0``);
- ``register(spec)`` at run time;
- a separately installed package that declares an entry point in the group
  ``srpo.envs`` whose name is the env id and whose object is its ``EnvSpec``::

      [project.entry-points."srpo.envs"]
      "MyTeam-v0" = "my_package.my_env:SPEC"

  Importing ``srpo_envs`` registers every such id with Gymnasium without importing the
  plugin (``gym.register_envs(srpo_envs)`` is the Gymnasium 1.x idiom); the plugin's
  module is imported when its env is first made or its spec is read.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from srpo_envs.spelling import closest_match

ENTRY_POINT_GROUP = "srpo.envs"
# CPython's message for a keyword a function does not take
_UNEXPECTED = re.compile(r"(?P<function>[\w.<>]+)\(\) got an unexpected keyword argument "
                         r"'(?P<argument>\w+)'")


class EnvArgumentError(TypeError, ValueError):
    """An env constructor does not take an argument its ``EnvSpec`` passes it. A
    ``TypeError`` as Python's own, and a ``ValueError`` so that ``srpo`` reports it as
    bad input rather than a crash."""


@dataclass(frozen=True)
class RunSettings:
    """What a training run asks of its environments, independent of any one env. An
    ``EnvSpec`` turns it into its constructor's keyword arguments (``EnvSpec.kwargs``)."""

    workflow: str
    split: str = "train"
    """"train" or "test" (held-out) tasks."""
    n_agents: int = 3
    """K of a parallel workflow; K_max of a routed one."""
    max_turns: int = 3
    dataset: str | None = None
    compact: bool = False
    """Use the spec's compact prompts (the tiny policy reads every character)."""
    max_new_tokens: int = 48
    difficulty: tuple[int, ...] = (1,)
    corpus: str | None = None
    retriever: str = "bm25"
    cost_per_token: float = 0.0
    cost_per_tool_call: float = 0.0
    token_counter: Callable[[str], int] | None = None


@dataclass(frozen=True)
class EnvSpec:
    """A registered environment. Only ``name``, ``entry_point`` and ``workflows`` are
    required; the defaults suit an env built with ``srpo_envs.describe``."""

    name: str
    """The id: ``gym.make(name)`` and ``srpo train --env name``."""
    entry_point: str | Callable[..., Any]
    """``"module:function"`` (or the function) returning a PettingZoo ParallelEnv built
    on ``srpo_envs.event_env.EventEnv`` from keyword arguments plus ``seed`` and
    ``render_mode``."""
    workflows: tuple[str, ...]
    description: str = ""
    agents_argument: str | None = "n_agents"
    """The constructor argument that takes ``RunSettings.n_agents`` (``--n-agents``). The
    default ``"n_agents"`` suits a constructor with that argument; set the constructor's
    own name for its agent count, or None when it has none."""
    turns_argument: str | None = None
    """The constructor argument that takes ``RunSettings.max_turns`` (None: none does)."""
    levels_argument: str | None = None
    """The constructor argument that takes ``RunSettings.difficulty`` (None: none does)."""
    compact_prompts: Mapping[str, str] | str = field(default_factory=dict)
    """Role templates for the tiny policy, passed as ``prompts=`` with ``compact`` (or
    ``"module:ATTRIBUTE"`` naming them, imported when used)."""
    prompt_sets: Mapping[str, Mapping[str, str]] | str = field(default_factory=dict)
    """Named sets of role templates a user passes as ``prompts=NAME`` (or
    ``"module:ATTRIBUTE"`` naming them); ``srpo envs --describe`` shows them."""
    compact_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """More constructor arguments with ``compact`` (shorter passages, a compact world)."""
    reference_team: str | Callable[..., Any] | None = None
    """``"module:Class"`` (or a callable) taking ``skill`` and ``seed`` and returning a
    scripted team with ``act(env, observations) -> actions`` and
    ``imitable(env, output) -> bool``: the tiny policy's warm start imitates it."""
    kwargs_function: str | Callable[[RunSettings, dict[str, Any]], dict[str, Any]] | None = None
    """Called as ``f(settings, kwargs)`` on the generic mapping's result, for an env that
    needs more (math, search); returns the final arguments."""
    shared_attributes: tuple[str, ...] = ()
    """Attributes of a run's first env passed to its later ones as constructor arguments
    (the search env's retriever: one index serves every env of a run)."""
    tool_calls: bool = False
    """The env calls tools (a retriever) and counts them, so a tool-call cost applies and
    open-domain benchmarks need a corpus or retrieval server."""
    benchmarks: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    """Evaluation sets by name: (questions, corpus or None), relative to the data folder
    (``srpo eval --benchmarks``)."""
    config_class: str | Callable[..., Any] | None = None
    """``"module:Class"`` whose construction from the constructor arguments validates them
    without building the env (no index, no dataset read), so a run checks its env
    arguments up front (``check_kwargs``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"EnvSpec.name={self.name!r}: expected a non-empty id string")
        if not self.workflows:
            raise ValueError(f"EnvSpec({self.name!r}).workflows is empty: expected at least "
                             f"one workflow name")
        object.__setattr__(self, "workflows", tuple(self.workflows))

    def make(self, **kwargs: Any) -> Any:
        """A fresh PettingZoo parallel env. An argument the constructor does not take is
        an ``EnvArgumentError`` that names it and the spec field or flag it came from; a
        value it refuses is a ``ValueError`` that names this env and the flag
        (``explain``)."""
        constructor = _resolve(self.entry_point, f"{self.name}.entry_point")
        try:
            return constructor(**kwargs)
        except TypeError as err:
            match = _UNEXPECTED.search(str(err))
            if isinstance(err, EnvArgumentError) or not match or match["argument"] not in kwargs:
                raise
            raise self.argument_error(f"{match['function']}()", match["argument"]) from err
        except ValueError as err:
            if isinstance(err, EnvArgumentError) or str(err).startswith(self.name):
                raise
            raise self.explain(err) from err

    def named_prompt_sets(self) -> dict[str, dict[str, str]]:
        """``prompt_sets``, imported when named by ``"module:ATTRIBUTE"``."""
        sets = self.prompt_sets
        if isinstance(sets, str):
            sets = _resolve(sets, f"{self.name}.prompt_sets")
        return {name: dict(templates) for name, templates in sets.items()}

    def default_for(self, argument: str | None) -> Any:
        """The env's own default of constructor argument ``argument`` (from its
        ``config_class`` when it has one, else the constructor's signature); None when it
        has no such argument or no default."""
        if not argument:
            return None
        source = _resolve(self.config_class or self.entry_point, f"{self.name}.config_class")
        if dataclasses.is_dataclass(source):
            for f in dataclasses.fields(source):
                if f.name == argument:
                    if f.default is not dataclasses.MISSING:
                        return f.default
                    if f.default_factory is not dataclasses.MISSING:
                        return f.default_factory()
            return None
        try:
            parameter = inspect.signature(source).parameters.get(argument)
        except (TypeError, ValueError):
            return None
        return None if parameter is None or parameter.default is parameter.empty \
            else parameter.default

    def flag_for(self, argument: str | None) -> str | None:
        """The ``srpo train`` flag that sets constructor argument ``argument``, if any."""
        flags = {self.agents_argument: "--n-agents", self.turns_argument: "--max-turns",
                 self.levels_argument: "--difficulty"}
        return flags.get(argument) if argument else None

    def explain(self, err: Exception, split: str | None = None) -> ValueError:
        """``err`` (a refused argument value, "name=value: ...") with this env's id, the
        split's env and the flag that set the argument in front of it."""
        match = re.match(r"\s*(\w+)=", str(err))
        argument = match[1] if match else None
        flag = self.flag_for(argument)
        where = self.name + (f" ({split} env)" if split else "")
        return ValueError(f"{where}: {err}" + (f" ({argument} takes {flag})" if flag else ""))

    def argument_error(self, function: str, argument: str) -> EnvArgumentError:
        """The error for a constructor ``function`` that takes no ``argument``: which
        ``EnvSpec`` field (or flag) passed it, and what to set instead."""
        fields = {self.agents_argument: ("agents_argument", "the agent count (--n-agents)"),
                  self.turns_argument: ("turns_argument", "the turn count (--max-turns)"),
                  self.levels_argument: ("levels_argument",
                                         "the difficulty levels (--difficulty)")}
        if argument in fields:
            name, what = fields[argument]
            return EnvArgumentError(
                f"env {self.name!r}: EnvSpec.{name}={argument!r} but {function} takes no "
                f"argument {argument!r}: set {name} to the constructor's name for {what}, "
                f"or None")
        sources = {"prompts": "with compact prompts (EnvSpec.compact_prompts, always on for "
                              "--model tiny): accept prompts=, or leave compact_prompts empty",
                   "dataset": "by --dataset/--eval-dataset: accept dataset=",
                   "token_counter": "with --cost-per-token: accept token_counter=",
                   "cost_per_tool_call": "because EnvSpec.tool_calls=True: accept "
                                         "cost_per_tool_call=, or set tool_calls=False"}
        sources.update(dict.fromkeys(self.compact_kwargs, "from EnvSpec.compact_kwargs "
                                                          "(with compact prompts)"))
        sources.update(dict.fromkeys(self.shared_attributes,
                                     "from EnvSpec.shared_attributes (the first env's "
                                     "attribute, passed to the later ones)"))
        sources.update(dict.fromkeys(("workflow", "split", "cost_per_token", "seed",
                                      "render_mode"), "to every srpo env (EnvSpec.kwargs): "
                                                      "accept it"))
        source = sources.get(argument, "from extra_env_kwargs (--extra-env-kwargs) or "
                                       "EnvSpec.kwargs_function")
        return EnvArgumentError(f"env {self.name!r}: {function} takes no argument "
                                f"{argument!r}, passed {source}")

    def _check_signature(self, kwargs: Mapping[str, Any]) -> None:
        """Without a ``config_class``: every argument must be one the constructor names
        (unless it takes ``**kwargs``), so a run stops before its warm start."""
        constructor = _resolve(self.entry_point, f"{self.name}.entry_point")
        try:
            parameters = inspect.signature(constructor).parameters.values()
        except (TypeError, ValueError):  # a builtin or C callable: nothing to read
            return
        if any(p.kind is p.VAR_KEYWORD for p in parameters):
            return
        names = {p.name for p in parameters
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        for argument in [*kwargs, "seed"]:  # every env of a run is made with a seed
            if argument not in names:
                function = getattr(constructor, "__qualname__", repr(constructor))
                raise self.argument_error(f"{function}()", argument)

    def check_workflow(self, workflow: str) -> None:
        if workflow not in self.workflows:
            raise ValueError(f"workflow={workflow!r} is not a workflow of {self.name}"
                             f"{_suggest(workflow, self.workflows)}; expected one of "
                             f"{list(self.workflows)}")

    def kwargs(self, settings: RunSettings) -> dict[str, Any]:
        """Constructor arguments for a run's train or held-out env."""
        kwargs: dict[str, Any] = {"workflow": settings.workflow, "split": settings.split,
                                  "cost_per_token": settings.cost_per_token}
        if settings.cost_per_token:
            kwargs["token_counter"] = settings.token_counter
        if self.agents_argument:
            kwargs[self.agents_argument] = settings.n_agents
        if self.turns_argument:
            kwargs[self.turns_argument] = settings.max_turns
        if self.levels_argument:
            kwargs[self.levels_argument] = settings.difficulty
        if settings.dataset:
            kwargs["dataset"] = settings.dataset
        if settings.compact:
            prompts = self.compact_prompts
            if isinstance(prompts, str):
                module_name, _, attribute = prompts.partition(":")
                prompts = getattr(importlib.import_module(module_name), attribute)
            if prompts:
                kwargs["prompts"] = dict(prompts)
            kwargs.update(self.compact_kwargs)
        if self.tool_calls:
            kwargs["cost_per_tool_call"] = settings.cost_per_tool_call
        if self.kwargs_function is not None:
            extend = _resolve(self.kwargs_function, f"{self.name}.kwargs_function")
            kwargs = extend(settings, kwargs)
        return kwargs

    def check_kwargs(self, kwargs: Mapping[str, Any]) -> None:
        """Validate constructor arguments through ``config_class`` (when the spec has one):
        a bad value's error names the argument; an unknown argument is named with the
        known ones. Without one, the arguments are checked against the constructor's
        signature."""
        if self.config_class is None:
            self._check_signature(kwargs)
            return
        import dataclasses

        config_class = _resolve(self.config_class, f"{self.name}.config_class")
        known = ({f.name for f in dataclasses.fields(config_class)}
                 if dataclasses.is_dataclass(config_class) else None)
        values = {k: v for k, v in kwargs.items()
                  if k not in ("seed", "render_mode", *self.shared_attributes)
                  or (k in self.shared_attributes and isinstance(v, str))}
        unknown = sorted(set(values) - known) if known is not None else []
        mapped = [u for u in unknown
                  if u in (self.agents_argument, self.turns_argument, self.levels_argument)]
        if mapped:
            raise self.argument_error(f"{getattr(config_class, '__name__', config_class)}()",
                                      mapped[0])
        if unknown:
            raise ValueError(f"{self.name} has no argument {unknown[0]!r}"
                             f"{_suggest(unknown[0], known)} (from extra_env_kwargs or a "
                             f"flag); its arguments: {sorted(known)}")
        config_class(**values)

    def team(self, skill: float, seed: int) -> Any:
        """The scripted team whose trajectories the tiny policy's warm start imitates."""
        if self.reference_team is None:
            raise ValueError(f"env {self.name!r} has no reference_team, so the tiny policy "
                             f"cannot be warm-started on it: register one in its EnvSpec, or "
                             f"train a Hugging Face model (--model NAME_OR_PATH)")
        return _resolve(self.reference_team, f"{self.name}.reference_team")(skill=skill,
                                                                             seed=seed)

    def roles(self, workflow: str) -> list[str]:
        """The roles of ``workflow``, in the order of the env's agents."""
        self.check_workflow(workflow)
        env = self.make(workflow=workflow)
        try:
            return list(dict.fromkeys(env.roles[a] for a in env.possible_agents))
        finally:
            env.close()


def _resolve(target: str | Callable[..., Any], what: str) -> Callable[..., Any]:
    if callable(target):
        return target
    module_name, _, attribute = str(target).partition(":")
    if not attribute:
        raise ValueError(f"{what}={target!r}: expected 'module:attribute'")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{what}={target!r} cannot be loaded: {err}") from err


def _suggest(name: str, known) -> str:
    close = closest_match(name, known)
    return f" (did you mean {close!r}?)" if close else ""


_SPECS: dict[str, EnvSpec] = {}
_PLUGINS: dict[str, Any] = {}  # env id -> its not yet loaded entry point


def register(spec: EnvSpec, *, replace: bool = False) -> EnvSpec:
    """Add ``spec`` to the registry and register its id with Gymnasium."""
    if not isinstance(spec, EnvSpec):
        raise TypeError(f"register() takes an EnvSpec, got {type(spec).__name__}")
    if spec.name in _SPECS and not replace and _SPECS[spec.name] != spec:
        raise ValueError(f"env {spec.name!r} is already registered; pass replace=True to "
                         f"replace it")
    _SPECS[spec.name] = spec
    _PLUGINS.pop(spec.name, None)
    _register_gym(spec.name)
    return spec


def _register_gym(name: str) -> None:
    from gymnasium.envs.registration import register as gym_register
    from gymnasium.envs.registration import registry as gym_registry

    if name not in gym_registry:
        gym_register(id=name, entry_point="srpo_envs.registry:make_gym_env",
                     kwargs={"srpo_env": name})


def make_gym_env(srpo_env: str, render_mode: str | None = None, **kwargs: Any):
    """The Gymnasium entry point of every registered srpo env: the setwise view
    (``gym_view.SetwiseGymEnv``) of ``srpo_env``'s parallel env built with ``kwargs``."""
    from srpo_envs.gym_view import SetwiseGymEnv

    return SetwiseGymEnv(get(srpo_env).make(render_mode=render_mode, **kwargs))


def discover_plugins() -> list[str]:
    """Find the ``srpo.envs`` entry points of installed packages (without importing
    them) and register their ids with Gymnasium; returns the new ids."""
    found = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in _SPECS or point.name in _PLUGINS:
            continue
        _PLUGINS[point.name] = point
        _register_gym(point.name)
        found.append(point.name)
    return found


def _load_plugin(name: str) -> EnvSpec:
    point = _PLUGINS[name]
    try:
        spec = point.load()
        if callable(spec) and not isinstance(spec, EnvSpec):
            spec = spec()
    except Exception as err:  # a broken plugin must name itself, not crash elsewhere
        raise ValueError(f"env {name!r}: its entry point {point.value!r} (group "
                         f"{ENTRY_POINT_GROUP!r}) failed to load: {err!r}") from err
    if not isinstance(spec, EnvSpec) or spec.name != name:
        raise ValueError(f"env {name!r}: entry point {point.value!r} gave "
                         f"{spec!r}; expected an EnvSpec named {name!r}")
    _SPECS[name] = spec
    del _PLUGINS[name]
    return spec


def names() -> list[str]:
    """Every registered env id (built-in, registered at run time, and plugins)."""
    discover_plugins()
    return sorted(set(_SPECS) | set(_PLUGINS))


def get(name: str) -> EnvSpec:
    """The spec of env ``name``; an unknown name is an error that lists the registered
    names and suggests the closest."""
    if name in _SPECS:
        return _SPECS[name]
    discover_plugins()
    if name in _PLUGINS:
        return _load_plugin(name)
    known = names()
    raise ValueError(f"env={name!r} is not registered{_suggest(str(name), known)}; "
                     f"registered envs: {known}")


def specs() -> list[EnvSpec]:
    """Every registered spec (loads plugins), sorted by name."""
    loaded = []
    for name in names():
        try:
            loaded.append(get(name))
        except ValueError as err:
            warnings.warn(str(err), stacklevel=2)
    return loaded
