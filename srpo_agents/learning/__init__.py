"""Stage 3, learning: ``objective`` (active sets, the set ratio, the advantages and the
registered policy losses), ``events`` (a rollout's turns as the units one loss consumes,
``UnitBatch``) and ``learner`` (``Learner``: one optimizer step from a batch of units)."""
