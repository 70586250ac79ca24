"""The benchmark harness and its helpers, as a library.

``srpo_bench.harness`` runs the paired comparisons (presets, jobs, table, plots);
``machine``, ``math_team``, ``search_track`` and ``search_diagnosis`` hold what several
benchmarks share. The scripts under ``benchmarks/`` are thin commands on top: they parse
their arguments and call into this package (``python benchmarks/comparisons/harness.py --preset
smoke``), so tests and other scripts import the same code without path tricks.
"""
