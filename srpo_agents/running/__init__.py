"""Stage 4, running a training: ``train`` (``train(config)``: set up, then step,
evaluate, save), ``training_run`` and ``step`` (what one loop turn does), ``evaluate``
and ``benchmark_sets`` (held-out accuracy), ``checkpoint`` (atomic, exact resume),
``metrics_log``, ``trackers`` (TensorBoard, trackio, W&B), ``plots``, ``verdicts`` (when a difference is
called), ``routing_stats`` and ``demo`` (``make demo``) with its ``search_recipe``."""
