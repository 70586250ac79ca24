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
"""
