"""BM25 retrievers: ``Bm25sRetriever`` (spec ``"bm25"``, the fast default, sparse matrix
from bm25s) and ``RankBm25Retriever`` (spec ``"rank_bm25"``, the plain-Python reference).

One scoring function, two implementations. For a query with terms ``q`` (repeats count)
and a passage ``d``::

    score(q, d) = sum_t idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln((N + 1) / df(t))

The saturation term is the classic Okapi one (bm25s ``method="atire"`` and every
rank_bm25 class). The idf is the BM25+ idf (bm25s ``idf_method="bm25+"``, rank_bm25
``BM25Plus``); with ``delta=0`` ``BM25Plus`` is exactly this function. This pair was
chosen because it is the only one whose formulas coincide in both libraries *and* whose
idf is positive for every indexed term:

- rank_bm25 ``BM25Okapi`` floors negative idf at ``epsilon * mean idf`` while bm25s
  ``robertson`` clamps it at 0, so terms found in over half the passages score
  differently (and with the floor at 0 they would be ignored altogether);
- rank_bm25 ``BM25L`` multiplies its saturation term by tf once more, bm25s does not;
- bm25s ``lucene`` idf has no rank_bm25 counterpart;
- ``delta > 0`` in BM25+ adds ``idf * delta`` to *every* passage in both libraries, a
  constant per query that only makes non-matching passages look relevant.

Both backends score in float64 and add term contributions in query order, so their
score vectors agree to the last bit (tests check top-k ids and scores). ``k1=0.9``,
``b=0.4`` are Pyserini's defaults, the BM25 that Search-R1 baselines use.

Results: only passages with a positive score, i.e. containing at least one query term,
best first, ties broken by corpus order, at most ``k``. So a ``k`` above the corpus size
returns every matching passage, and a query with no indexed term (or only stop words)
returns ``[]`` rather than arbitrary zero-score passages.

Caches: bm25s's CSC score matrix plus our vocabulary go to one ``.npz``; rank_bm25's
state (term counts per passage, idf) to JSON. A cache hit skips tokenizing the corpus.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from srpo_envs.retrieval.base import Passage, check_search_args, is_blank
from srpo_envs.retrieval.cache import (
    cache_file,
    load_json,
    load_npz,
    load_or_build,
    save_json,
    save_npz,
)
from srpo_envs.retrieval.corpus import Corpus
from srpo_envs.retrieval.tokenizer import TOKENIZER_VERSION, tokenize

DEFAULT_K1 = 0.9
DEFAULT_B = 0.4
# Bump when the formula, the passage text that is indexed, or a cache layout changes.
_VARIANT = "okapi-tf+bm25plus-idf/title-newline-text/v1"


def passage_terms(corpus: Corpus) -> Iterator[list[str]]:
    """The indexed terms of each passage: the title is searchable as well as the text."""
    for title, text in zip(corpus.titles, corpus.texts, strict=True):
        yield tokenize(f"{title}\n{text}")


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the at most ``k`` best positive scores: score desc, then corpus order."""
    candidates = np.flatnonzero(scores > 0)
    if candidates.size > k:
        # argpartition alone would cut arbitrarily inside a tie at the k-th score; keep
        # every passage tied with it and let the sort below break ties by index.
        cut = np.partition(scores[candidates], candidates.size - k)[candidates.size - k]
        candidates = candidates[scores[candidates] >= cut]
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order[:k]]


class _BM25Retriever:
    backend = ""
    library = ""
    suffix = ""

    def __init__(self, corpus: Corpus, *, cache_dir: str | Path,
                 k1: float = DEFAULT_K1, b: float = DEFAULT_B) -> None:
        k1, b = float(k1), float(b)
        if not (math.isfinite(k1) and k1 >= 0):
            raise ValueError(f"k1 must be a finite number >= 0, got {k1}")
        if not 0.0 <= b <= 1.0:
            raise ValueError(f"b must be in [0, 1], got {b}")
        self.corpus = corpus
        self.k1, self.b = k1, b
        self._key = {
            "backend": self.backend, "library": f"{self.library}=={version(self.library)}",
            "tokenizer": TOKENIZER_VERSION, "variant": _VARIANT, "k1": k1, "b": b,
            "corpus": corpus.content_hash, "passages": len(corpus),
        }
        self.cache_path = cache_file(cache_dir, self.backend, self._key, self.suffix)
        # from_cache: True when the index was read from cache_path rather than built.
        self._model, self.from_cache = load_or_build(
            self.cache_path, self._load, self._build, self._save)

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        queries, k = check_search_args(queries, k)
        results: list[list[Passage]] = []
        for query in queries:
            scores = None if k == 0 or is_blank(query) else self._scores(tokenize(query))
            if scores is None:
                results.append([])
                continue
            results.append([self.corpus.passage(i, scores[i]) for i in top_k(scores, k)])
        return results

    def _scores(self, terms: list[str]) -> np.ndarray | None:
        """Float64 scores of every passage, or None when no term is in the index."""
        raise NotImplementedError

    def _build(self) -> Any:
        raise NotImplementedError

    def _load(self, path: Path) -> Any:
        raise NotImplementedError

    def _save(self, model: Any, handle: Any) -> None:
        raise NotImplementedError


class Bm25sRetriever(_BM25Retriever):
    """BM25 on bm25s's precomputed sparse score matrix (numpy backend, no numba needed)."""

    backend = "bm25s"
    library = "bm25s"
    suffix = ".npz"

    def _new_model(self) -> Any:
        import bm25s

        return bm25s.BM25(k1=self.k1, b=self.b, method="atire", idf_method="bm25+",
                          dtype="float64", int_dtype="int32", backend="numpy")

    def _build(self) -> Any:
        # Our own vocabulary (first-occurrence order) instead of bm25s's tokenizer, so that
        # the terms are exactly those of the shared tokenizer. Mapping each passage to ids
        # as it is tokenized keeps millions of token strings from piling up.
        vocab: dict[str, int] = {}
        token_ids = [[vocab.setdefault(term, len(vocab)) for term in terms]
                     for terms in passage_terms(self.corpus)]
        model = self._new_model()
        # A corpus with no terms at all has avgdl 0 and bm25s divides 0 by it on empty
        # arrays; nothing is indexed and every search returns [], so the warning is noise.
        with np.errstate(invalid="ignore", divide="ignore"):
            model.index((token_ids, vocab), create_empty_token=False, show_progress=False)
        return model

    def _save(self, model: Any, handle: Any) -> None:
        terms = sorted(model.vocab_dict, key=model.vocab_dict.__getitem__)
        vocab = np.frombuffer(json.dumps(terms).encode("ascii"), dtype=np.uint8)
        save_npz(handle, self._key, {"data": model.scores["data"],
                                     "indices": model.scores["indices"],
                                     "indptr": model.scores["indptr"], "vocab": vocab})

    def _load(self, path: Path) -> Any:
        arrays = load_npz(path, self._key)
        data, indices, indptr = arrays["data"], arrays["indices"], arrays["indptr"]
        terms = json.loads(arrays["vocab"].tobytes())
        n_docs = len(self.corpus)
        if (data.dtype != np.float64 or data.shape != indices.shape
                or indptr.shape != (len(terms) + 1,) or int(indptr[-1]) != data.size
                or np.any(np.diff(indptr) < 0)
                or (indices.size and not 0 <= int(indices.min()) <= int(indices.max()) < n_docs)):
            raise ValueError("inconsistent bm25s arrays")
        # The attributes bm25s.BM25.load sets; its own directory format is not atomic.
        model = self._new_model()
        model.scores = {"data": data, "indices": indices, "indptr": indptr, "num_docs": n_docs}
        model.vocab_dict = {term: i for i, term in enumerate(terms)}
        model.unique_token_ids_set = set(model.vocab_dict.values())
        model.nonoccurrence_array = None
        return model

    def _scores(self, terms: list[str]) -> np.ndarray | None:
        vocab = self._model.vocab_dict
        ids = [vocab[term] for term in terms if term in vocab]
        return self._model.get_scores_from_ids(ids) if ids else None


class RankBm25Retriever(_BM25Retriever):
    """The same BM25 through rank_bm25's ``BM25Plus(delta=0)``: slow, obviously correct."""

    backend = "rank_bm25"
    library = "rank-bm25"
    suffix = ".json"
    _STATE = ("corpus_size", "avgdl", "doc_freqs", "idf", "doc_len", "k1", "b", "delta")

    def _build(self) -> Any:
        from rank_bm25 import BM25Plus

        # Pre-tokenized input: passing rank_bm25 a tokenizer would start a process pool.
        return BM25Plus(list(passage_terms(self.corpus)), k1=self.k1, b=self.b, delta=0.0)

    def _save(self, model: Any, handle: Any) -> None:
        save_json(handle, self._key, {name: getattr(model, name) for name in self._STATE})

    def _load(self, path: Path) -> Any:
        from rank_bm25 import BM25Plus

        state = load_json(path, self._key)
        n_docs = len(self.corpus)
        if (set(state) != set(self._STATE) or state["corpus_size"] != n_docs
                or len(state["doc_freqs"]) != n_docs or len(state["doc_len"]) != n_docs
                or not isinstance(state["idf"], dict)):
            raise ValueError("inconsistent rank_bm25 state")
        # rank_bm25 has no load(); these are all the attributes its __init__ sets.
        model = BM25Plus.__new__(BM25Plus)
        model.__dict__.update(state, tokenizer=None)
        return model

    def _scores(self, terms: list[str]) -> np.ndarray | None:
        known = [term for term in terms if term in self._model.idf]
        return np.asarray(self._model.get_scores(known), dtype=np.float64) if known else None


