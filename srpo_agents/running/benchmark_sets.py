"""The standard evaluation sets by name, and their evaluation one by one.

    srpo fetch-data --benchmarks aime24,amc23,math500,gsm8k    # once, online
    srpo eval --checkpoint runs/x --env SRPO-Math-v0 --benchmarks aime24,amc23,math500,gsm8k
    srpo eval --checkpoint runs/y --env SRPO-Search-v0 --benchmarks all --retriever http://...

Each env's names are its ``EnvSpec.benchmarks`` (``srpo_envs.registry``). Names resolve to
JSONL files under a data folder laid out like the project's shared data (``math/…``,
``search/…``). The folder is ``--data-dir`` when given, else ``$SRPO_DATA_DIR`` when set,
else the first of ``<srpo cache>/data`` (where ``srpo fetch-data`` writes,
``srpo_agents.running.fetch_data``) and ``../shared/data`` that holds the file. HotpotQA
comes with its own paragraphs as a corpus; the open-domain sets (NQ, TriviaQA, PopQA,
2Wiki, MuSiQue, Bamboogle) are meant for a Wikipedia retriever, so they need
``--retriever URL`` or a ``--corpus`` of your own. A path to any JSONL file works in place
of a name.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from srpo_agents.config import TrainConfig
from srpo_agents.models.sources import srpo_cache_dir
from srpo_envs import registry

DATA_DIR_VARIABLE = "SRPO_DATA_DIR"
SHARED_DATA_DIR = Path("..") / "shared" / "data"
"""The project's shared data beside the repository (relative to the working folder)."""


def default_data_dir() -> Path:
    """The one folder the harness presets read: ``$SRPO_DATA_DIR``, else ../shared/data."""
    return Path(os.environ.get(DATA_DIR_VARIABLE) or SHARED_DATA_DIR)


def fetched_data_dir() -> Path:
    """Where ``srpo fetch-data`` writes by default: ``<srpo cache>/data``."""
    return srpo_cache_dir() / "data"


def data_dirs(data_dir: str | Path | None = None) -> list[Path]:
    """The folders a benchmark file is looked for in, in order: ``data_dir`` alone when
    given, else ``$SRPO_DATA_DIR`` alone when set, else the fetched data, then the shared
    data (so a fetched copy wins over the shared one)."""
    if data_dir:
        return [Path(data_dir)]
    if os.environ.get(DATA_DIR_VARIABLE):
        return [Path(os.environ[DATA_DIR_VARIABLE])]
    return [fetched_data_dir(), SHARED_DATA_DIR]


def _locate(name: str, questions: str, roots: list[Path]) -> Path:
    """The first root that holds ``questions``; its corpus is read from the same root."""
    for root in roots:
        if (root / questions).is_file():
            return root
    tried = " or ".join(str(root) for root in roots)
    raise FileNotFoundError(
        f"benchmark {name!r}: {questions} not found under {tried}; run `srpo fetch-data "
        f"--benchmarks {name}` (pip install 'srpo[data]'), or set --data-dir or "
        f"${DATA_DIR_VARIABLE} to the folder holding math/ and search/")


def resolve(env: str, names: str, data_dir: str | Path | None = None
            ) -> list[tuple[str, Path, Path | None]]:
    """``"aime24,amc23"``, ``"all"`` or JSONL paths -> (name, questions, corpus) each."""
    known = registry.get(env).benchmarks
    roots = data_dirs(data_dir)
    wanted = list(known) if names.strip() == "all" else [
        n.strip() for n in names.split(",") if n.strip()]
    if not wanted:
        raise ValueError(f"benchmarks={names!r}: expected names from {sorted(known)}, 'all' "
                         f"or JSONL paths, separated by commas")
    resolved = []
    for name in wanted:
        if name in known:
            questions, corpus = known[name]
            root = _locate(name, questions, roots)
            resolved.append((name, root / questions, root / corpus if corpus else None))
        elif name.endswith(".jsonl"):
            if not Path(name).is_file():
                raise FileNotFoundError(f"benchmark {name!r}: no such JSONL file")
            resolved.append((Path(name).stem, Path(name), None))
        else:
            raise ValueError(f"benchmarks: {name!r} is not a {env} benchmark; expected one of "
                             f"{sorted(known)}, 'all' or a path to a .jsonl file")
    return resolved


def benchmark_configs(config: TrainConfig, names: str, data_dir: str | Path | None = None
                      ) -> list[tuple[str, TrainConfig]]:
    """One config per benchmark: its questions as the held-out set, its own corpus where
    it has one, else the run's ``--corpus``/``--retriever``."""
    configs = []
    for name, questions, corpus in resolve(config.env, names, data_dir):
        own = str(corpus) if corpus else config.corpus
        if registry.get(config.env).tool_calls and own is None and not config.retriever.startswith(
                ("http://", "https://")):
            raise ValueError(f"benchmark {name!r} has no corpus of its own: give --retriever "
                             f"http(s)://… (a Wikipedia retrieval server) or --corpus FILE.jsonl")
        configs.append((name, replace(config, eval_dataset=str(questions), corpus=own)))
    return configs


def evaluate_benchmarks(engine, config: TrainConfig, names: str, k: int, tasks: int,
                        data_dir: str | Path | None = None, log=None,
                        chunk_size: int | None = None) -> dict[str, dict]:
    """avg@k, pass@k, tokens, tool calls (and EM/F1) of ``engine``'s policy on each named
    benchmark, at most ``tasks`` tasks each, with a progress bar (or lines) per benchmark;
    ``chunk_size``: most episodes played at once (``evaluate``)."""
    from srpo_agents.running.evaluate import evaluate, held_out

    results = {}
    for name, bench in benchmark_configs(replace(config, eval_tasks=tasks), names, data_dir):
        results[name] = evaluate(engine, *held_out(bench), k, tag=f"bench-{name}",
                                 progress=name, chunk_size=chunk_size, log=log)
        if log is not None:
            log(f"{name}: avg@{k} {results[name]['avg_at_k']:.3f}")
    return results


def macro_average(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Unweighted mean over benchmarks of every number they all report."""
    keys = [k for k in ("avg_at_k", "pass_at_k", "tokens_per_task", "tool_calls_per_task",
                        "em", "f1") if all(k in r for r in results.values())]
    return {k: statistics.mean(r[k] for r in results.values()) for k in keys}


def format_benchmark_table(results: dict[str, dict[str, Any]]) -> str:
    first = next(iter(results.values()))
    k = first["k"]
    search = "em" in first
    head = f"| benchmark | tasks | avg@{k} | pass@{k} | tokens/task | tool calls/task |"
    rule = "|---|---:|---:|---:|---:|---:|"
    if search:
        head, rule = head + " EM | F1 |", rule + "---:|---:|"
    lines = [head, rule]
    for name, r in results.items():
        line = (f"| {name} | {r['tasks']} | {r['avg_at_k']:.3f} ± {r['avg_at_k_stderr']:.3f} | "
                f"{r['pass_at_k']:.3f} ± {r['pass_at_k_stderr']:.3f} | "
                f"{r['tokens_per_task']:.1f} | {r['tool_calls_per_task']:.2f} |")
        if search:
            line += f" {r.get('em', 0.0):.3f} | {r.get('f1', 0.0):.3f} |"
        lines.append(line)
    if len(results) > 1:
        m = macro_average(results)
        line = (f"| macro average | | {m['avg_at_k']:.3f} | {m['pass_at_k']:.3f} | "
                f"{m['tokens_per_task']:.1f} | {m['tool_calls_per_task']:.2f} |")
        if search:
            line += f" {m.get('em', 0.0):.3f} | {m.get('f1', 0.0):.3f} |"
        lines.append(line)
    return "\n".join(lines)
