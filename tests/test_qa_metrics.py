import math

import pytest

from srpo_envs.qa_metrics import exact_match, f1_score, normalize_answer


@pytest.mark.parametrize(("text", "expected"), [
    ("The Eiffel Tower", "eiffel tower"),
    ("  an   Apple a day ", "apple day"),
    ("Paris!", "paris"),
    ("U.S.A.", "usa"),
    ("rock-n-roll", "rocknroll"),
    ("Théâtre", "théâtre"),             # only ASCII punctuation and case are touched
    ("a", ""),
    ("", ""),
    ("Anthem of the Seas", "anthem of seas"),  # articles are whole words only
    ("\tLine\nbreak ", "line break"),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_articles_punctuation_case():
    assert exact_match("the Chief of Protocol.", ["Chief of Protocol"])
    assert exact_match("CHIEF OF PROTOCOL", "chief of protocol")
    assert not exact_match("Chief of Protocol of the US", ["Chief of Protocol"])


def test_exact_match_any_alias():
    aliases = ["Barack Obama", "Obama", "Barack Hussein Obama II"]
    assert exact_match("obama", aliases)
    assert exact_match("Barack Hussein Obama II", aliases)
    assert not exact_match("Michelle Obama", aliases)


def test_exact_match_empty_prediction():
    assert not exact_match("", ["Paris"])
    assert exact_match("", ["the"])  # gold that normalizes to empty matches empty


def test_f1_partial_overlap():
    # prediction tokens: {chief, protocol, us}; gold: {chief, of, protocol}
    # common 2 -> precision 2/3, recall 2/3
    assert math.isclose(f1_score("Chief Protocol US", "Chief of Protocol"), 2 / 3)


def test_f1_max_over_aliases():
    score = f1_score("New York City", ["New York", "NYC", "the Big Apple"])
    assert math.isclose(score, 2 * (2 / 3) * 1 / (2 / 3 + 1))


def test_f1_exact_and_disjoint():
    assert f1_score("The Beatles", ["beatles"]) == 1.0
    assert f1_score("Rolling Stones", ["beatles"]) == 0.0


def test_f1_counts_repeated_tokens_once_per_occurrence():
    # prediction "paris paris" vs gold "paris": common 1, precision 1/2, recall 1
    assert math.isclose(f1_score("paris paris", "paris"), 2 * 0.5 * 1 / 1.5)


def test_f1_empty_sides():
    assert f1_score("", ["Paris"]) == 0.0
    assert f1_score("the", ["a"]) == 1.0        # both normalize to empty
    assert f1_score("Paris", ["an"]) == 0.0


def test_yes_no_answers():
    assert exact_match("Yes.", ["yes"])
    assert not exact_match("no", ["yes"])
    assert f1_score("yes", ["yes"]) == 1.0
    assert f1_score("no", ["no way"]) == 0.0     # HotpotQA rule: yes/no must match exactly
    assert f1_score("no way", ["no"]) == 0.0
    assert f1_score("yes it is", ["yes"]) == 0.0
    assert f1_score("no", ["No way", "no"]) == 1.0


def test_bad_gold_answers():
    with pytest.raises(ValueError, match="empty"):
        exact_match("x", [])
    with pytest.raises(ValueError, match="empty"):
        f1_score("x", ())
    with pytest.raises(TypeError):
        f1_score("x", [None])
    with pytest.raises(TypeError):
        exact_match(None, ["x"])
