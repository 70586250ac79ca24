"""``srpo fetch-data``: the named benchmarks from the Hugging Face hub, with the ``datasets``
library, written as the JSONL files that ``srpo eval --benchmarks`` reads.

    srpo fetch-data --benchmarks gsm8k,math500          # into <srpo cache>/data
    srpo fetch-data --benchmarks all --data-dir data    # every registered benchmark
    srpo eval --checkpoint runs/x --env SRPO-Math-v0 --benchmarks gsm8k,math500

``SOURCES`` says, for every registered benchmark name, which dataset (id, config, split)
it comes from, under which license, and how a row becomes one of ours. A file goes to the
path its env's ``EnvSpec.benchmarks`` names (``math/gsm8k_test.jsonl``,
``search/hotpotqa_dev_500.jsonl`` with ``search/hotpotqa_dev_corpus.jsonl``, ...), under
``--data-dir``, else ``$SRPO_DATA_DIR``, else ``<srpo cache>/data``
(``benchmark_sets.fetched_data_dir``), which ``srpo eval`` looks in before
``../shared/data``. The schemas are the shared data's (``docs/data.md``):

- math: ``{"id", "question", "answer", "solution"?, "source", ...}``;
- search: ``{"id", "question", "answers": [...], "source", ...}``; HotpotQA also writes its
  own paragraphs as a corpus ``{"id", "title", "text"}``, which ``context_ids`` and
  ``supporting_ids`` of its questions point into.

A file whose name carries a count (``triviaqa_512``, ``hotpotqa_dev_500``) holds that many
rows: a fixed-seed sample of the split, in the split's order. Files are written whole or
not at all (a temporary file, then a rename), and ones already there are kept unless
``overwrite``. It needs the ``data`` extra: ``pip install 'srpo[data]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srpo_agents.running.benchmark_sets import DATA_DIR_VARIABLE, fetched_data_dir
from srpo_envs import registry
from srpo_envs.retrieval.cache import atomic_write  # stdlib only: tmp, fsync, replace

INSTALL_HINT = "pip install 'srpo[data]'"
SAMPLE_SEED = 0
"""The seed of the sample a counted file (``popqa_512``) keeps of its split."""
PARAGRAPHS = "_paragraphs"
"""A converted row's own paragraphs (title, text, supporting), until they become a corpus."""
RETRIEVER_EXAMPLE = "http://127.0.0.1:8000/retrieve"

Record = dict[str, Any]
Loader = Callable[..., Iterable[dict]]


class FetchError(RuntimeError):
    """One or more benchmarks could not be fetched; one line each. ``fetched``: the ones
    that were (their files stay)."""

    def __init__(self, lines: list[str], fetched: list[Fetched]):
        super().__init__("\n".join(lines))
        self.lines = lines
        self.fetched = fetched


@dataclass(frozen=True)
class BenchmarkSource:
    """Where one benchmark comes from and how a row of it becomes one of ours."""

    name: str
    dataset: str
    config: str | None
    split: str
    license: str
    to_record: Callable[[dict, int], Record | None]
    """(row, its index in the split) -> our record, or None to leave the row out."""
    keep: int | None = None
    """Keep a fixed-seed sample of this many rows (the count in the file's name)."""
    corpus_prefix: str | None = None
    """The rows carry their own paragraphs: write them as a corpus with ids
    ``<prefix>_NNNNNN``."""


@dataclass
class Fetched:
    """One benchmark's files (path, rows) and whether they were written or kept."""

    name: str
    env: str
    files: list[tuple[Path, int]] = field(default_factory=list)
    written: bool = True
    dropped: int = 0
    """Source rows left out (a search question without any answer)."""


# ---- conversions: one function per source shape -------------------------------------

def _compact(record: Record) -> Record:
    """The record without its empty optional fields (a missing solution, url, ...)."""
    return {k: v for k, v in record.items() if v is not None and v != ""}


def _integer_text(value: Any) -> str:
    """An AIME/AMC answer as an integer string: ``"025"`` -> ``"25"``, ``27.0`` -> ``"27"``;
    anything that is not a whole number is kept as its stripped text."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else text


def _unique(items: Iterable[str]) -> list[str]:
    """Stripped, non-empty, first occurrence kept, order kept."""
    seen: list[str] = []
    for item in items:
        text = str(item).strip()
        if text and text not in seen:
            seen.append(text)
    return seen


def gsm8k_record(row: dict, index: int) -> Record:
    solution = row["answer"]
    # GSM8K's solution ends with "#### <answer>"; thousands separators are dropped.
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return {"id": f"gsm8k_test_{index}", "question": row["question"], "answer": final,
            "solution": solution, "source": "gsm8k/test"}


def math500_record(row: dict, index: int) -> Record:
    return _compact({"id": row.get("unique_id") or f"math500_{index}",
                     "question": row["problem"], "answer": str(row["answer"]),
                     "solution": row.get("solution"), "subject": row.get("subject"),
                     "level": row.get("level"), "source": "math500"})


def _aime_id(url: str | None, index: int) -> str:
    """``aime24_I_01`` from an AoPS wiki url (``2024_AIME_I_Problems/Problem_1``)."""
    found = re.search(r"AIME_(I+)_Problems/Problem_(\d+)", url or "")
    return f"aime24_{found[1]}_{int(found[2]):02d}" if found else f"aime24_{index}"


def aime24_record(row: dict, index: int) -> Record:
    return _compact({"id": _aime_id(row.get("url"), index), "question": row["problem"],
                     "answer": _integer_text(row["answer"]), "solution": row.get("solution"),
                     "url": row.get("url"), "source": "aime24"})


def amc23_record(row: dict, index: int) -> Record:
    return _compact({"id": f"amc23_{row.get('id', index)}",
                     "question": row.get("question") or row["problem"],
                     "answer": _integer_text(row["answer"]), "url": row.get("url"),
                     "source": "amc23"})


def flashrag_converter(name: str, source: str) -> Callable[[dict, int], Record | None]:
    """FlashRAG's rows ``{"id", "question", "golden_answers", "metadata"}``."""

    def to_record(row: dict, index: int) -> Record | None:
        answers = _unique(row.get("golden_answers") or [])
        if not answers:
            return None  # nothing to grade against
        return {"id": f"{name}_{row.get('id', index)}", "question": row["question"].strip(),
                "answers": answers, "source": source}

    return to_record


def _pairs(value: Any, first: str, second: str) -> list[tuple[Any, Any]]:
    """HotpotQA's ``context``/``supporting_facts`` as pairs, whether ``datasets`` gives
    them as a dict of lists (the hub's parquet) or as a list of pairs (the original JSON)."""
    if isinstance(value, dict):
        return list(zip(value[first], value[second], strict=True))
    return [(item[first], item[second]) if isinstance(item, dict) else tuple(item)
            for item in value]


def _collapse(text: str) -> str:
    return " ".join(text.split())


def hotpotqa_record(row: dict, index: int) -> Record:
    gold_titles = {title for title, _ in _pairs(row["supporting_facts"], "title", "sent_id")}
    # A paragraph's text is its sentences joined as HotpotQA stores them (each sentence
    # after the first starts with its space), whitespace runs collapsed.
    paragraphs = [(title.strip(), _collapse("".join(sentences)), title in gold_titles)
                  for title, sentences in _pairs(row["context"], "title", "sentences")]
    return _compact({"id": row.get("id") or f"hotpotqa_{index}", "question": row["question"],
                     "answers": [row["answer"].strip()], "source": "hotpotqa/dev-distractor",
                     "type": row.get("type"), "level": row.get("level"),
                     PARAGRAPHS: paragraphs})


def attach_corpus(records: list[Record], prefix: str) -> list[Record]:
    """Move each record's paragraphs into one corpus, de-duplicated on (title, text) and
    numbered in order of first appearance, and point ``context_ids`` (in source order)
    and ``supporting_ids`` at it. Returns the corpus rows."""
    ids: dict[tuple[str, str], str] = {}
    corpus: list[Record] = []
    for record in records:
        context: list[str] = []
        supporting: list[str] = []
        for title, text, gold in record.pop(PARAGRAPHS):
            if (title, text) not in ids:
                ids[title, text] = f"{prefix}_{len(ids):06d}"
                corpus.append({"id": ids[title, text], "title": title, "text": text})
            pid = ids[title, text]
            context += [pid] if pid not in context else []
            supporting += [pid] if gold and pid not in supporting else []
        record["context_ids"], record["supporting_ids"] = context, supporting
    return corpus


FLASHRAG = "RUC-NLPIR/FlashRAG_datasets"
SOURCES: dict[str, BenchmarkSource] = {s.name: s for s in (
    BenchmarkSource("gsm8k", "openai/gsm8k", "main", "test", "MIT", gsm8k_record),
    BenchmarkSource("math500", "HuggingFaceH4/MATH-500", None, "test", "MIT", math500_record),
    BenchmarkSource("aime24", "HuggingFaceH4/aime_2024", None, "train",
                    "no license stated (2024 AIME I and II problems, MAA; AoPS wiki "
                    "solutions)", aime24_record),
    BenchmarkSource("amc23", "math-ai/amc23", None, "test",
                    "no license stated (2023 AMC 12 problems, MAA)", amc23_record),
    BenchmarkSource("nq", FLASHRAG, "nq", "test", "CC BY-SA 3.0",
                    flashrag_converter("nq", "nq_open/test")),
    BenchmarkSource("triviaqa", FLASHRAG, "triviaqa", "test", "Apache-2.0",
                    flashrag_converter("triviaqa", "triviaqa"), keep=512),
    BenchmarkSource("popqa", FLASHRAG, "popqa", "test", "MIT",
                    flashrag_converter("popqa", "popqa"), keep=512),
    BenchmarkSource("hotpotqa", "hotpotqa/hotpot_qa", "distractor", "validation",
                    "CC BY-SA 4.0", hotpotqa_record, keep=500, corpus_prefix="hotpotqa_dev"),
    BenchmarkSource("2wiki", FLASHRAG, "2wikimultihopqa", "dev", "Apache-2.0",
                    flashrag_converter("2wiki", "2wikimultihopqa/dev"), keep=512),
    BenchmarkSource("musique", FLASHRAG, "musique", "dev", "CC BY 4.0",
                    flashrag_converter("musique", "musique/dev"), keep=512),
    BenchmarkSource("bamboogle", FLASHRAG, "bamboogle", "test",
                    "no license verified (Press et al. 2022)",
                    flashrag_converter("bamboogle", "bamboogle")),
)}
"""Every registered benchmark name -> its source. The search sets but HotpotQA are
FlashRAG's copies, the ones Search-R1 evaluates on; HotpotQA is read from its own dataset,
which keeps each question's paragraphs."""


# ---- where files go ------------------------------------------------------------------

def default_fetch_dir() -> Path:
    """``$SRPO_DATA_DIR``, else ``<srpo cache>/data`` (``$SRPO_CACHE_DIR`` or
    ``~/.cache/srpo``)."""
    return Path(os.environ.get(DATA_DIR_VARIABLE) or fetched_data_dir())


def benchmark_files(name: str) -> tuple[str, str, str | None]:
    """(env, questions file, corpus file or None), relative to the data folder, as the
    env that registered ``name`` reads them."""
    for spec in registry.specs():
        if name in spec.benchmarks:
            questions, corpus = spec.benchmarks[name]
            return spec.name, questions, corpus
    raise ValueError(f"benchmark {name!r} is not registered by any env")


def parse_names(names: str | Iterable[str]) -> list[str]:
    """``"gsm8k, nq"``, ``"all"`` or a list -> known names, in order, each once."""
    wanted = names.split(",") if isinstance(names, str) else list(names)
    wanted = [n.strip() for n in wanted if n.strip()]
    if "all" in wanted:
        return list(SOURCES)
    valid = f"expected names from {', '.join(SOURCES)}, or 'all'"
    if not wanted:
        raise ValueError(f"benchmarks={names!r}: {valid}")
    unknown = [n for n in wanted if n not in SOURCES]
    if unknown:
        raise ValueError(f"benchmarks: {', '.join(map(repr, unknown))} "
                         f"{'is' if len(unknown) == 1 else 'are'} not known; {valid}")
    return list(dict.fromkeys(wanted))


# ---- fetching ------------------------------------------------------------------------

def default_loader() -> Loader:
    try:
        import datasets
    except ImportError:
        raise ImportError(f"srpo fetch-data needs the `datasets` library: "
                          f"{INSTALL_HINT}") from None
    return datasets.load_dataset


def _offline_hint() -> str:
    offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
               if os.environ.get(v, "").lower() in ("1", "true", "yes", "on")]
    if offline:
        return (f"{' and '.join(offline)} is set, so only the local Hugging Face cache is "
                f"read; unset it to download")
    return ("check the network and the dataset id; without a network, HF_HUB_OFFLINE=1 and "
            "HF_DATASETS_OFFLINE=1 read what the local Hugging Face cache already holds")


def _first_line(error: BaseException) -> str:
    text = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {text[:200]}" if text else type(error).__name__


def _load_rows(source: BenchmarkSource, loader: Loader) -> list[dict]:
    where = source.dataset + (f" ({source.config})" if source.config else "")
    try:
        return [dict(row) for row in loader(source.dataset, source.config, split=source.split)]
    except Exception as error:  # the hub, the network, the cache: one line, not a traceback
        raise FetchError([f"{source.name}: could not load {where}, split {source.split!r} "
                          f"({_first_line(error)}); {_offline_hint()}"], []) from None


def _convert(source: BenchmarkSource, rows: list[dict]) -> tuple[list[Record], int]:
    records = []
    for index, row in enumerate(rows):
        try:
            record = source.to_record(row, index)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
            raise FetchError([f"{source.name}: row {index} of {source.dataset} is not shaped "
                              f"as expected ({_first_line(error)}); has the dataset "
                              f"changed?"], []) from None
        if record is not None:
            records.append(record)
    return records, len(rows) - len(records)


def sample(records: list[Record], keep: int | None) -> list[Record]:
    """``keep`` records drawn with ``SAMPLE_SEED``, in their original order (all of them
    when there are no more than ``keep``)."""
    if keep is None or len(records) <= keep:
        return records
    chosen = sorted(random.Random(SAMPLE_SEED).sample(range(len(records)), keep))
    return [records[i] for i in chosen]


def write_jsonl(path: Path, records: list[Record]) -> None:
    """One JSON object per line, UTF-8, written whole or not at all."""
    data = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    atomic_write(path, lambda handle: handle.write(data.encode("utf-8")))


def _count_rows(path: Path) -> int:
    with path.open(encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def fetch_one(source: BenchmarkSource, root: Path, loader: Loader,
              limit: int | None = None) -> Fetched:
    """Load, convert and write one benchmark (its corpus first, its questions last, so
    a questions file is never there without its corpus)."""
    env, questions_file, corpus_file = benchmark_files(source.name)
    records, dropped = _convert(source, _load_rows(source, loader))
    records = sample(records, source.keep)[:limit]
    if not records:
        raise FetchError([f"{source.name}: {source.dataset} gave no usable rows"], [])
    files = [(root / questions_file, records)]
    if source.corpus_prefix:
        files.insert(0, (root / corpus_file, attach_corpus(records, source.corpus_prefix)))
    for path, rows in files:
        try:
            write_jsonl(path, rows)
        except OSError as error:  # a read-only or full disk: one line too
            raise FetchError([f"{source.name}: could not write {path} "
                              f"({_first_line(error)})"], []) from None
    return Fetched(source.name, env, [(path, len(rows)) for path, rows in reversed(files)],
                   dropped=dropped)


def _files(name: str, root: Path) -> tuple[str, list[Path]]:
    env, *files = benchmark_files(name)
    return env, [root / f for f in files if f]


def _complete(name: str, root: Path) -> bool:
    return all(path.is_file() for path in _files(name, root)[1])


def _existing(name: str, root: Path) -> Fetched:
    env, paths = _files(name, root)
    return Fetched(name, env, [(p, _count_rows(p)) for p in paths], written=False)


def _describe(fetched: Fetched) -> list[str]:
    verb = "wrote" if fetched.written else "kept"
    note = "" if fetched.written else "; already there, --overwrite fetches it again"
    lines = [f"{fetched.name}: {verb} {path} ({rows} rows{note})"
             for path, rows in fetched.files]
    if fetched.dropped:
        lines.append(f"{fetched.name}: left out {fetched.dropped} source rows without an answer")
    return lines


def fetch(names: str | Iterable[str], data_dir: str | Path, loader: Loader | None = None,
          log: Callable[[str], Any] = print, limit: int | None = None,
          overwrite: bool = False) -> list[Fetched]:
    """Fetch ``names`` (comma-separated, a list, or ``"all"``) into ``data_dir``.

    ``loader``: ``datasets.load_dataset`` by default (called as ``loader(dataset,
    config, split=split)``); ``limit``: keep the first ``limit`` rows of each file, for
    a first look; ``overwrite``: fetch again files already there. A benchmark that cannot
    be fetched does not stop the others: once all were tried, ``FetchError`` names each
    failure in one line, and the files written stay."""
    wanted = parse_names(names)
    if limit is not None and limit < 1:
        raise ValueError(f"limit={limit!r}: expected a positive number of rows")
    root = Path(data_dir)
    todo = [n for n in wanted if overwrite or not _complete(n, root)]
    if todo and loader is None:
        loader = default_loader()
    done: list[Fetched] = []
    failures: list[str] = []
    for name in wanted:
        if name in todo:
            source = SOURCES[name]
            log(f"{name}: loading {source.dataset}"
                + (f" ({source.config})" if source.config else "") + f", {source.split}")
            try:
                done.append(fetch_one(source, root, loader, limit))
            except FetchError as error:
                failures += error.lines
                continue
        else:
            done.append(_existing(name, root))
        for line in _describe(done[-1]):
            log(line)
    if failures:
        raise FetchError(failures, done)
    return done


# ---- the command ---------------------------------------------------------------------

def eval_commands(fetched: list[Fetched], data_dir: Path) -> list[str]:
    """The ``srpo eval`` line for each env the fetched benchmarks belong to."""
    by_env: dict[str, list[str]] = {}
    for item in fetched:
        by_env.setdefault(item.env, []).append(item.name)
    lines = []
    for env, names in by_env.items():
        line = (f"srpo eval --checkpoint RUN_DIR --env {env} --benchmarks {','.join(names)} "
                f"--data-dir {shlex.quote(str(data_dir))}")
        # Sets without a corpus of their own are answered from a Wikipedia retriever.
        if any(benchmark_files(n)[2] is None for n in names) and registry.get(env).tool_calls:
            line += f" --retriever {RETRIEVER_EXAMPLE}"
        lines.append(line)
    return lines


def cmd_fetch_data(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir) if args.data_dir else default_fetch_dir()
    try:
        fetched = fetch(args.benchmarks, data_dir, limit=args.limit, overwrite=args.overwrite)
        failures: list[str] = []
    except FetchError as error:
        fetched, failures = error.fetched, error.lines
    if fetched:
        print("evaluate with:")
        for line in eval_commands(fetched, data_dir.absolute()):
            print(f"  {line}")
    if args.limit and any(item.written for item in fetched):
        print(f"(--limit {args.limit}: the files hold the first {args.limit} rows only; "
              f"rerun with --overwrite and no --limit for the whole sets)")
    for line in failures:
        print(f"srpo fetch-data: error: {line}", file=sys.stderr)
    return 1 if failures else 0


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``fetch-data`` to an ``add_subparsers()`` object; the parser runs
    ``cmd_fetch_data``."""
    parser = commands.add_parser(
        "fetch-data", help="download the named benchmarks (Hugging Face datasets) as the "
                           "JSONL files srpo eval --benchmarks reads",
        description="Download benchmarks with the `datasets` library "
                    f"({INSTALL_HINT}) and write them where `srpo eval --benchmarks` looks. "
                    "Sources and licenses: docs/data.md.")
    parser.add_argument("--benchmarks", required=True,
                        help=f"comma-separated names ({', '.join(SOURCES)}) or 'all'")
    parser.add_argument("--data-dir", default="",
                        help=f"folder to write math/ and search/ into (default: "
                             f"${DATA_DIR_VARIABLE}, else $SRPO_CACHE_DIR/data, else "
                             f"~/.cache/srpo/data)")
    parser.add_argument("--overwrite", action="store_true",
                        help="fetch again files that are already there")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="write only the first N rows of each file, for a first look")
    parser.set_defaults(run=cmd_fetch_data)
    return parser
