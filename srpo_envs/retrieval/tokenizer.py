"""The one BM25 tokenizer, shared by the ``bm25`` (bm25s) and ``rank_bm25`` backends so
that both index exactly the same terms.

``tokenize(text)``: lowercase (``str.lower``), then every maximal run of Unicode word
characters (``re`` ``\\w+``: letters of any script, digits, underscore), then drop the
stop words. No stemming: answers are often names and numbers, where a stemmer merges
terms that should stay apart, and an unstemmed index is easy to reason about.

The stop-word list is fixed: the 33 words of Lucene's English stop set, the analyzer
behind Pyserini's BM25 indexes that Search-R1 serves, so our term statistics stay close
to that reference. Scripts written without spaces (Chinese, Japanese) come out as one
token per run; this corpus is English Wikipedia, where that does not arise.

Markup in model queries (``</search>``, ``<|im_end|>``) is just punctuation around words
here, and the regex is linear, so a 100 KB query costs milliseconds and cannot fail.

``TOKENIZER_VERSION`` is part of every BM25 cache key: change it whenever this function
or the stop words change, so cached indexes are rebuilt.
"""

from __future__ import annotations

import re

TOKENIZER_VERSION = "srpo-bm25-tok-v1"

STOPWORDS: frozenset[str] = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into",
    "is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then",
    "there", "these", "they", "this", "to", "was", "will", "with",
))

_WORD = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    return [token for token in _WORD.findall(text.lower()) if token not in STOPWORDS]
