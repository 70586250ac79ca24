"""Benchmark corpora from the real search files (``../shared/data/search`` beside the
repository): their sentences, and a corpus of any size resampled from them
(``benchmarks/speed/bm25_latency.py``, ``benchmarks/speed/retrieval_server_qps.py``).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from srpo_envs.retrieval import Corpus

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "search"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def real_sentences() -> list[tuple[str, str]]:
    """(title, sentence) pairs of every real corpus file, in file order."""
    pairs = []
    for path in sorted(DATA.glob("*_corpus.jsonl")):
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                for sentence in _SENTENCE_END.split(row["text"].strip()):
                    if len(sentence.split()) >= 3:
                        pairs.append((row["title"], sentence))
    return pairs


def resampled_corpus(pairs: list[tuple[str, str]], n: int, rng: random.Random) -> Corpus:
    """``n`` passages of 60-120 words, each a real title with real sentences drawn from
    ``pairs`` (``real_sentences``)."""
    ids, titles, texts = [], [], []
    for i in range(n):
        target = rng.randint(60, 120)
        title, sentence = rng.choice(pairs)
        words = sentence.split()
        while len(words) < target:
            words.extend(rng.choice(pairs)[1].split())
        ids.append(f"bench-{i:06d}")
        titles.append(title)
        texts.append(" ".join(words[:target]))
    return Corpus(tuple(ids), tuple(titles), tuple(texts))
