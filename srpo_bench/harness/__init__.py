"""The paired comparison harness (``benchmarks/comparisons/harness.py`` is its command line).

``presets``: the presets as data; ``runner``: a preset's pairs, warm starts and jobs on a
pool of worker processes; ``jobs``: each job, run in a process of its own; ``report``:
the table; ``plots``: the figures; ``compare``: the comparison presets' verdicts and plots.
"""

from srpo_bench.harness.jobs import (
    before_job,
    claim_run,
    run_job,
    same_config,
    warm_start_job,
)
from srpo_bench.harness.plots import write_plots
from srpo_bench.harness.presets import KAPPA_ABLATION, PRESETS, REFERENCE
from srpo_bench.harness.report import (
    retable,
    route_k_by_level,
    route_level_lines,
    twin_floors,
    write_table,
)
from srpo_bench.harness.runner import (
    kept_rows,
    make_pool,
    map_jobs,
    pair_algos,
    pair_settings,
    run_preset,
    same_as_rows,
    warm_start_plan,
)

__all__ = ["KAPPA_ABLATION", "PRESETS", "REFERENCE", "before_job", "claim_run", "kept_rows",
           "make_pool", "map_jobs", "pair_algos", "pair_settings", "retable",
           "route_k_by_level", "route_level_lines", "run_job", "run_preset", "same_as_rows",
           "same_config", "twin_floors", "warm_start_job", "warm_start_plan", "write_plots",
           "write_table"]
