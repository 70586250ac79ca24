"""The closest name to a mistyped one (``srpo_envs.spelling``), which every "did you mean"
in the error messages uses."""

from srpo_envs.spelling import closest_match, edit_distance


def test_edit_distance_counts_a_swap_of_neighbours_as_one():
    assert edit_distance("tyr", "try") == 1
    assert edit_distance("tyr", "tty") == 2
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "abc") == 0


def test_closest_match_prefers_fewer_edits_then_difflib():
    assert closest_match("tyr", ["tty", "try"]) == "try"
    assert closest_match("SRPO-Mat-v0", ["SRPO-Math-v0", "SRPO-Search-v0"]) == "SRPO-Math-v0"
    assert closest_match("zzzz", ["SRPO-Math-v0"]) is None
