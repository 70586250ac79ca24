"""The learner: trains a team of LLM agents on ``srpo_envs`` with SRPO.

Read it as the pipeline, one subpackage a stage:

- ``models``: the policy (one LLM, a LoRA per role if asked) and where it comes from
  (``models.sources``: a Hugging Face name, a folder, a GGUF, a plug-in);
- ``rollout``: the envs by name, generation (hf or vLLM), the engine that plays many
  episodes at once and tags every turn, rollout files, Ray workers, TRL's hook;
- ``learning``: the objective (active sets, the set ratio, the losses), the events a
  step consumes, and the learner that turns them into one update;
- ``running``: a training run (``train``: set up, then step, evaluate, save), the
  evaluation, checkpoints, metrics, plots and verdicts, the demo.

Beside them: ``config`` (``TrainConfig`` and its sections, which every stage reads),
``cli`` (the ``srpo`` command), ``faults`` (the crash tests' kill switch) and ``tiny``
(the test-scale model, one model plug-in).

Modules kept their pre-subpackage paths as aliases (``srpo_agents.policy`` is
``srpo_agents.models.policy``, the same module object), so code and commands written
before the grouping, such as ``python -m srpo_agents.demo``, keep working.
"""

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "adapters": "models.adapters", "policy": "models.policy", "model_sources": "models.sources",
    "generation": "rollout.generation", "rollout_io": "rollout.files",
    "ray_rollout": "rollout.ray_engine", "envs": "rollout.envs",
    "trl_adapter": "rollout.trl_adapter",
    "objective": "learning.objective", "events": "learning.events", "learner": "learning.learner",
    "checkpoint": "running.checkpoint", "evaluate": "running.evaluate", "step": "running.step",
    "training_run": "running.training_run", "train": "running.train",
    "metrics_log": "running.metrics_log", "plots": "running.plots",
    "tensorboard_log": "running.trackers", "demo": "running.demo",
    "benchmark_sets": "running.benchmark_sets", "search_recipe": "running.search_recipe",
    "routing_stats": "running.routing_stats", "verdicts": "running.verdicts",
}
"""Old module name -> its place now (``srpo_agents.rollout``, once the engine's module,
is the stage's package and hands out the engine's names itself)."""


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``srpo_agents.<old name>`` as the moved module itself (one module object,
    so a monkeypatch through either path patches both), and lets ``python -m`` run it."""

    @staticmethod
    def _target(fullname: str) -> str | None:
        package, _, name = fullname.rpartition(".")
        return f"{__name__}.{MOVED[name]}" if package == __name__ and name in MOVED else None

    def find_spec(self, fullname, path=None, target=None):
        new = self._target(fullname)
        if new is None:
            return None
        real = importlib.util.find_spec(new)
        return importlib.util.spec_from_loader(fullname, self, origin=real.origin)

    def create_module(self, spec):
        module = importlib.import_module(self._target(spec.name))
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # the import system has just given the module the alias's spec: put its own back
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, fullname):  # runpy: ``python -m srpo_agents.demo``
        new = self._target(fullname)
        return importlib.util.find_spec(new).loader.get_code(new)


if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
    sys.meta_path.append(_OldPaths())
