"""Loaders of real QA data for SRPO-Search-v0: a JSONL path (``question``/``answers``,
optional ``id`` and ``supporting_ids``) or a Hugging Face ``datasets`` name.

``answers`` may also be a single string (``answer``), as several QA sets write it; the
first answer is the main one, the rest are aliases. ``supporting_ids`` (HotpotQA,
MuSiQue in ../shared/data) point into the matching corpus and let an oracle policy and
retrieval-recall metrics find the gold paragraphs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from srpo_envs.jsonl import read_hf_dataset, read_jsonl
from srpo_envs.search_world import SearchTask


def _answers(record: dict, where: str) -> tuple[str, ...]:
    raw = record.get("answers", record.get("answer", record.get("golden_answers")))
    if isinstance(raw, str):
        raw = [raw]
    if isinstance(raw, dict):  # e.g. TriviaQA on the hub: {"value": ..., "aliases": [...]}
        raw = [raw.get("value", "")] + list(raw.get("aliases", []))
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"{where}: field 'answers' = {raw!r}; expected a non-empty list of "
                         f"strings")
    answers = tuple(str(a).strip() for a in raw if isinstance(a, (str, int, float))
                    and str(a).strip())
    if not answers:
        raise ValueError(f"{where}: field 'answers' = {raw!r}; expected a non-empty list of "
                         f"strings")
    return answers


def task_from_record(record: Any, where: str, fallback_id: str) -> SearchTask:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: field 'question' = {question!r}; expected a non-empty "
                         f"string")
    supporting = record.get("supporting_ids") or ()
    if not isinstance(supporting, (list, tuple)) or not all(isinstance(s, str) for s in supporting):
        raise ValueError(f"{where}: field 'supporting_ids' = {supporting!r}; expected a list of "
                         f"corpus ids")
    meta = {k: record[k] for k in ("source", "type", "level") if k in record}
    return SearchTask(task_id=str(record.get("id", fallback_id)), question=question.strip(),
                      answers=_answers(record, where), supporting_ids=tuple(supporting),
                      meta=meta)


def load_jsonl_search_tasks(path: str | Path) -> list[SearchTask]:
    tasks = [task_from_record(record, where, f"{Path(path).stem}-{row}")
             for record, where, row in read_jsonl(path)]
    if not tasks:
        raise ValueError(f"dataset={str(path)!r}: the file holds no tasks")
    return tasks


def load_search_tasks(dataset: str | Path, config: str | None = None,
                      split: str = "validation") -> list[SearchTask]:
    """A JSONL path (anything ending in .jsonl or an existing file) or a ``datasets`` name."""
    text = str(dataset)
    if text.endswith(".jsonl") or Path(text).is_file():
        return load_jsonl_search_tasks(text)
    return [task_from_record(record, where, fallback)
            for record, where, fallback in read_hf_dataset(text, config, split)]
