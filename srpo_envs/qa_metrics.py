"""Answer metrics for open-domain QA: SQuAD exact match and token F1.

- ``normalize_answer``: the SQuAD v1.1 evaluation script's normalization, in its order:
  lowercase, delete ASCII punctuation (``string.punctuation``), delete the articles
  ``a``/``an``/``the`` as whole words, collapse whitespace. It is what Search-R1,
  HotpotQA and Dr. MAS report EM/F1 with, so our numbers are comparable to theirs.
  Punctuation is deleted, not replaced by a space (``"U.S."`` -> ``"us"``), as there.
- ``exact_match``: normalized prediction equals any normalized gold alias.
- ``f1_score``: bag-of-tokens F1 after normalization, maximum over the aliases. Two
  rules that the plain SQuAD v1.1 formula lacks, both from the official scripts:
  an empty side scores 1.0 if both are empty and 0.0 otherwise (SQuAD v2.0), and when
  either side normalizes to ``yes``/``no`` the two must be equal, else 0.0 (HotpotQA),
  so ``"no"`` earns nothing against ``"no way"`` and vice versa.
- ``gold_answers`` is one string or a sequence of aliases; an empty sequence is a
  ``ValueError`` (a question without a gold answer is a data bug, not a zero).
- Time bound: a prediction longer than ``MAX_PREDICTION_CHARS`` is scored on its first
  ``MAX_PREDICTION_CHARS`` characters, so every call returns well within a second on any
  input (an answer is a few words; the envs clip outputs far below the cap anyway).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_PUNCTUATION = str.maketrans("", "", string.punctuation)
MAX_PREDICTION_CHARS = 100_000
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_BINARY = frozenset({"yes", "no"})


def normalize_answer(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"answers must be strings, got {type(text).__name__}")
    text = text.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _aliases(gold_answers: str | Sequence[str]) -> list[str]:
    aliases = [gold_answers] if isinstance(gold_answers, str) else list(gold_answers)
    if not aliases:
        raise ValueError("gold_answers is empty")
    return aliases


def exact_match(prediction: str, gold_answers: str | Sequence[str]) -> bool:
    predicted = normalize_answer(prediction[:MAX_PREDICTION_CHARS])
    return any(predicted == normalize_answer(alias) for alias in _aliases(gold_answers))


def _f1(predicted: str, gold: str) -> float:
    if (predicted in _BINARY or gold in _BINARY) and predicted != gold:
        return 0.0
    predicted_tokens, gold_tokens = predicted.split(), gold.split()
    if not predicted_tokens or not gold_tokens:
        return float(predicted_tokens == gold_tokens)
    common = sum((Counter(predicted_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(predicted_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, gold_answers: str | Sequence[str]) -> float:
    predicted = normalize_answer(prediction[:MAX_PREDICTION_CHARS])
    return max(_f1(predicted, normalize_answer(alias)) for alias in _aliases(gold_answers))
