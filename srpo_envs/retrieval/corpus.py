"""The passage corpus: an immutable, content-hashed list of (id, title, text).

- ``Corpus`` stores three parallel tuples. Corpus order is meaningful: it is the final
  tie-breaker of every backend, so it is part of the content hash.
- ``content_hash`` is the sha256 hex digest of a canonical serialization (a version tag,
  then one compact JSON array ``[id, title, text]`` per passage, UTF-8, newline
  separated). It keys every on-disk index, so an edited corpus can never be served a
  stale index, and two files with the same passages share one.
- ``load_corpus`` reads JSONL rows ``{"id", "title", "text"}``. ``title`` may be omitted
  (it becomes ``""``). Rows in the Search-R1 / FlashRAG shape ``{"id", "contents"}``,
  where ``contents`` is ``'"Title"\\ntext'``, are accepted too, so the wiki-18 corpus
  those servers index loads unchanged. Integer ids are converted to strings. Every bad
  row is a ``ValueError`` naming file, line, field and value; duplicate ids are an error
  (a retrieved id must identify one passage); an empty corpus is an error.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srpo_envs.retrieval.base import Passage

_HASH_TAG = b"srpo-corpus-v1\n"
_SHOWN_VALUE_CHARS = 80


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > _SHOWN_VALUE_CHARS:
        text = text[:_SHOWN_VALUE_CHARS] + "...'"
    return text


@dataclass(frozen=True, eq=False)
class Corpus:
    """Passages in corpus order. Build with ``load_corpus`` or ``corpus_from_records``;
    the constructor checks types, lengths and id uniqueness and computes the hash.
    Equality and hashing go by ``content_hash``."""

    ids: tuple[str, ...]
    titles: tuple[str, ...]
    texts: tuple[str, ...]
    content_hash: str = field(init=False)

    def __post_init__(self) -> None:
        ids, titles, texts = tuple(self.ids), tuple(self.titles), tuple(self.texts)
        if not len(ids) == len(titles) == len(texts):
            raise ValueError(f"ids, titles and texts differ in length: "
                             f"{len(ids)}, {len(titles)}, {len(texts)}")
        if not ids:
            raise ValueError("corpus is empty")
        for name, column in (("id", ids), ("title", titles), ("text", texts)):
            for i, value in enumerate(column):
                if not isinstance(value, str):
                    raise ValueError(f"passage {i}: field {name!r} must be str, got {_show(value)}")
        seen: dict[str, int] = {}
        for i, pid in enumerate(ids):
            if not pid:
                raise ValueError(f"passage {i}: field 'id' is empty")
            if pid in seen:
                raise ValueError(f"passage {i}: duplicate id {_show(pid)} "
                                 f"(first at passage {seen[pid]})")
            seen[pid] = i
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "titles", titles)
        object.__setattr__(self, "texts", texts)
        object.__setattr__(self, "content_hash", _content_hash(ids, titles, texts))

    def __len__(self) -> int:
        return len(self.ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Corpus):
            return NotImplemented
        return self.content_hash == other.content_hash

    def __hash__(self) -> int:
        return hash(self.content_hash)

    def __repr__(self) -> str:
        return f"Corpus({len(self)} passages, content_hash={self.content_hash[:12]}...)"

    def passage(self, index: int, score: float) -> Passage:
        return Passage(id=self.ids[index], title=self.titles[index], text=self.texts[index],
                       score=float(score))


def _content_hash(ids: tuple[str, ...], titles: tuple[str, ...], texts: tuple[str, ...]) -> str:
    digest = hashlib.sha256(_HASH_TAG)
    for row in zip(ids, titles, texts, strict=True):
        line = json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n"
        # surrogatepass: a lone surrogate (possible via json.loads("\\ud800")) must hash,
        # not crash; it still hashes differently from any valid text.
        digest.update(line.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def split_contents(contents: str) -> tuple[str, str]:
    """Split Search-R1 ``contents`` (``'"Title"\\ntext'``) into (title, text)."""
    first, _, rest = contents.partition("\n")
    return first.strip().strip('"'), rest


def _parse_record(record: Any, where: str) -> tuple[str, str, str]:
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {_show(record)}")
    if "id" not in record:
        raise ValueError(f"{where}: missing field 'id'")
    pid = record["id"]
    if isinstance(pid, int) and not isinstance(pid, bool):
        pid = str(pid)
    if not isinstance(pid, str) or not pid:
        raise ValueError(f"{where}: field 'id' must be a non-empty string or an integer, "
                         f"got {_show(pid)}")
    if "text" not in record and "contents" in record:
        contents = record["contents"]
        if not isinstance(contents, str):
            raise ValueError(f"{where}: field 'contents' must be a string, got {_show(contents)}")
        title, text = split_contents(contents)
        return pid, title, text
    if "text" not in record:
        raise ValueError(f"{where}: missing field 'text' (or 'contents')")
    text, title = record["text"], record.get("title", "")
    if not isinstance(text, str):
        raise ValueError(f"{where}: field 'text' must be a string, got {_show(text)}")
    if not isinstance(title, str):
        raise ValueError(f"{where}: field 'title' must be a string, got {_show(title)}")
    return pid, title, text


def _build(rows: Iterable[tuple[str, str, str, str]], source: str) -> Corpus:
    """``rows`` yields (where, id, title, text); duplicate ids are reported with both places."""
    ids: list[str] = []
    titles: list[str] = []
    texts: list[str] = []
    first_seen: dict[str, str] = {}
    for where, pid, title, text in rows:
        if pid in first_seen:
            raise ValueError(f"{where}: duplicate value {_show(pid)} of field 'id' "
                             f"(first at {first_seen[pid]})")
        first_seen[pid] = where
        ids.append(pid)
        titles.append(title)
        texts.append(text)
    if not ids:
        raise ValueError(f"{source}: corpus is empty")
    return Corpus(tuple(ids), tuple(titles), tuple(texts))


def corpus_from_records(records: Iterable[Mapping[str, Any]]) -> Corpus:
    """A corpus from mappings shaped like the JSONL rows of ``load_corpus``."""

    def rows() -> Iterable[tuple[str, str, str, str]]:
        for i, record in enumerate(records):
            where = f"record {i}"
            yield (where, *_parse_record(record, where))

    return _build(rows(), "records")


def load_corpus(path: str | Path) -> Corpus:
    """Read a JSONL corpus (UTF-8, optional BOM); blank lines are skipped, lines count from 1."""
    path = Path(path)

    def rows() -> Iterable[tuple[str, str, str, str]]:
        # Bytes are decoded line by line so that bad UTF-8 is reported with its line.
        with path.open("rb") as handle:
            for lineno, raw in enumerate(handle, start=1):
                where = f"{path}, line {lineno}"
                if lineno == 1:
                    raw = raw.removeprefix(b"\xef\xbb\xbf")
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ValueError(f"{where}: not valid UTF-8 ({exc.reason} at byte "
                                     f"{exc.start} of the line)") from None
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{where}: invalid JSON ({exc.msg} at character "
                                     f"{exc.pos + 1}): {_show(line.rstrip())}") from None
                yield (where, *_parse_record(record, where))

    return _build(rows(), str(path))
