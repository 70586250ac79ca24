"""Tests for srpo_envs.grading: extraction, equivalence, time bounds, threads, processes."""

import json
import subprocess
import sys
import textwrap
import threading
import time
from itertools import islice
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srpo_envs import grading
from srpo_envs.grading import (
    MAX_ANSWER_CHARS,
    MAX_CANDIDATES,
    Grade,
    answers_match,
    every_answer,
    extract_answer,
    grade,
    written_anywhere,
)

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "math"
GRADING_FILE = Path(grading.__file__).resolve()
# The bound is 1 s; the rest absorbs scheduling noise on a loaded 2-core machine.
WALL_LIMIT_S = 1.5


@pytest.fixture(scope="module", autouse=True)
def _zygote_started():
    grading.warm_up()


# --- extraction ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{3} ... on second thought \\boxed{5}", "5"),
        ("so $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("\\boxed{\\boxed{7}}", "7"),
        ("\\fbox{7}", "7"),
        ("\\boxed{3} then \\fbox{4}", "4"),
        ("the answer is \\boxed 5.", "5"),
        ("$\\boxed \\frac12$", "\\frac12"),
        ("\\boxed {  42 }", "42"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("\\boxed{a\\}b}", "a\\}b"),
        (
            "\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}",
            "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
        ),
        ("\\boxed{é∑}", "é∑"),
        ("\\boxedsymbol{x} costs 4", "4"),  # not a box
        ("\\boxed{}", ""),
        ("\\boxed{3} and finally \\boxed{ }", ""),
        ("\\boxed{3} and finally \\boxed{12", ""),  # cut off inside the last box
        ("we get -3", "-3"),
        ("we get \u22123", "\u22123"),
        ("x-3", "3"),  # subtraction, not a sign
        ("(-3, 4) so -7", "-7"),
        ("costs $1,234,567 in total", "1,234,567"),
        ("1,234.5", "1,234.5"),
        ("the list 1,2,3", "3"),
        ("about 3.5.", "3.5"),
        ("so .5", ".5"),
        ("the ratio is 3/4", "3/4"),
        ("2 apples, then 10 pears", "10"),
        ("no digits here", None),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


_TOKENS = ["\\boxed", "\\fbox", "{", "}", "\\{", "\\}", "\\\\", " ", "$", "-", ",", ".", "/"]
_TOKENS += ["7", "42", "x", "é", "\n"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join) | st.text(max_size=40))
def test_extract_answer_returns_a_piece_of_the_text(text):
    answer = extract_answer(text)
    assert answer is None or answer in text
    assert answer is not None or not any(ch.isascii() and ch.isdigit() for ch in text)


# --- equivalence -----------------------------------------------------------------------

EQUIVALENT = [
    ("12", "12.0"),
    ("12", "12"),
    ("-3", "-3.0"),
    ("1,000", "1000"),
    ("1,\\!000", "1000"),
    ("10{,}000", "10000"),
    ("\\$5", "5"),
    ("$5$", "5"),
    ("\\$1,000.00", "1000"),
    ("12\\text{ cm}", "12"),
    ("12 \\text{ inches}", "12"),
    ("6\\text{ cm}^2", "6"),
    ("\\text{Evelyn}", "Evelyn"),
    ("50\\%", "50"),
    ("50%", "50"),
    ("50\\%", "0.5"),
    ("3/4", "\\frac{3}{4}"),
    ("\\dfrac34", "0.75"),
    ("\\tfrac{3}{4}", "3/4"),
    ("\\frac{3}{4}", "0.75"),
    ("-\\frac{1}{2}", "\\frac{-1}{2}"),
    ("-0.5", "-\\frac12"),
    ("0.3333333", "\\frac{1}{3}"),
    ("90^\\circ", "90"),
    ("90^{\\circ}", "90"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt2}{2}"),
    ("2\\sqrt{3}", "\\sqrt{12}"),
    ("\\frac{\\pi}{2}", "\\pi/2"),
    ("2\\pi", "\\pi + \\pi"),
    ("(1, 2)", "(1,2)"),
    ("\\left( 1, 2 \\right)", "(1,2)"),
    ("(1,-2)", "(1.0, -2)"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)"),
    ("[0, 1)", "[0,1)"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("\\left\\{1, 2, 3\\right\\}", "\\{3,2,1\\}"),
    ("1,-2", "-2, 1"),
    ("x=5", "5"),
    ("\\cot x", "\\cot x"),
    ("\\text{(B)}", "(B)"),
]

NOT_EQUIVALENT = [
    ("12", "13"),
    ("-3", "3"),
    ("1, 234", "1234"),  # a list, not a number
    ("0.33", "\\frac{1}{3}"),
    ("1000001", "1000000"),
    ("50\\%", "5"),
    ("\\frac{3}{4}", "\\frac{4}{3}"),
    ("\\sqrt{2}", "2"),
    ("2\\pi", "\\pi"),
    ("[0,1)", "(0,1]"),
    ("(0,1)", "[0,1]"),
    ("(1,2)", "(2,1)"),
    ("(1,2)", "(1,2,3)"),
    ("\\{1,2\\}", "\\{1,3\\}"),
    ("1,-2", "1,2"),
    ("5\\text{ or more}", "7"),
    ("C", "B"),
    ("(C)", "B"),
]


@pytest.mark.parametrize(("a", "b"), EQUIVALENT)
def test_equivalent_both_directions(a, b):
    assert answers_match(a, b)
    assert answers_match(b, a)


@pytest.mark.parametrize(("a", "b"), NOT_EQUIVALENT)
def test_not_equivalent_both_directions(a, b):
    assert not answers_match(a, b)
    assert not answers_match(b, a)


@pytest.mark.parametrize("pred", ["B", "(B)", "\\text{(B)}", "\\textbf{(B)}", "\\text{B}", " B "])
def test_multiple_choice_letters(pred):
    assert answers_match(pred, "B")
    assert not answers_match(pred, "C")


@pytest.mark.parametrize("pred", ["b", "5", "(B) or (C)", "\\text{none}"])
def test_multiple_choice_rejects_other_forms(pred):
    assert not answers_match(pred, "B")


@pytest.mark.parametrize(
    ("pred", "gold", "correct", "method"),
    [
        ("12", "12.0", True, "numeric"),
        ("12", "13", False, "numeric"),
        ("\\left(1,2\\right)", "(1, 2)", True, "exact"),
        ("(B)", "B", True, "exact"),
        ("\\{1,2\\}", "\\{2,1\\}", True, "structure"),
        ("[0,1)", "(0,1]", False, "structure"),
        ("2\\sqrt{3}", "\\sqrt{12}", True, "math_verify"),
        ("x^2+1", "1+x^2", True, "math_verify"),
    ],
)
def test_method_that_decides(pred, gold, correct, method):
    assert grade(f"\\boxed{{{pred}}}", gold) == Grade(correct, pred, method)


def test_unbalanced_braces_are_wrong():
    # Wrapped in \boxed{...} for math-verify, "5}" would let "5" escape the box and match.
    assert not answers_match("5}+{1", "5")
    assert not answers_match("5", "5}+{1")


def test_grade_uses_last_box():
    assert grade("\\boxed{3} ... \\boxed{5}", "5") == Grade(True, "5", "exact")
    assert grade("\\boxed{5} ... \\boxed{3}", "5") == Grade(False, "3", "numeric")


def test_empty_box_is_an_attempt_graded_wrong():
    assert grade("so the answer is \\boxed{}", "5") == Grade(False, "", "no_answer")
    assert not answers_match("", "5")
    assert not answers_match("$ $", "5")


def test_no_answer():
    assert grade("I do not know.", "5") == Grade(False, None, "no_answer")


def test_last_number_fallback():
    assert grade("She pays $1,234 in total.", "1234") == Grade(True, "1,234", "numeric")
    assert grade("The result is -3.", "-3") == Grade(True, "-3", "exact")
    assert grade("Half of it: 3/4", "0.75") == Grade(True, "3/4", "numeric")


def test_too_long_is_not_parsed():
    long_answer = "1" * (MAX_ANSWER_CHARS + 1)
    assert grade(f"\\boxed{{{long_answer}}}", long_answer) == Grade(False, long_answer, "too_long")
    assert not answers_match("x" * (MAX_ANSWER_CHARS + 1), "x")


def test_deterministic():
    cases = [("\\boxed{2\\sqrt{3}}", "\\sqrt{12}"), ("\\boxed{0.5}", "\\frac12"), ("7", "8")]
    for text, gold in cases:
        assert len({grade(text, gold) for _ in range(3)}) == 1


def test_model_output_is_never_evaluated(tmp_path):
    marker = tmp_path / "pwned"
    text = f"\\boxed{{__import__('os').system('touch {marker}')}}"
    assert not grade(text, "0").correct
    assert not marker.exists()


# --- time bounds -----------------------------------------------------------------------

MEGABYTE = 1_000_000
HOSTILE_TEXTS = {
    "1MB of letters": "a" * MEGABYTE,
    "1MB of digits": "1" * MEGABYTE,
    "1MB with a final box": "word " * (MEGABYTE // 5) + "\\boxed{5}",
    "100k open boxes": "\\boxed{" * 100_000,
    "1MB of open braces": "{" * MEGABYTE,
    "unbalanced closers": "\\boxed{" + "}" * (MEGABYTE // 2),
    "deeply nested, too long": "\\boxed{" + "{" * 300_000 + "5" + "}" * 300_000 + "}",
    "deeply nested, under the cap": "\\boxed{" + "{" * 400 + "5" + "}" * 400 + "}",
    "power tower": "\\boxed{9^{9^{9^{9^{9}}}}}",
    "huge factorial": "\\boxed{10^{10^{100}}!}",
}


def _timed_grade(text: str) -> tuple[Grade, float]:
    start = time.monotonic()
    result = grade(text, "7")
    return result, time.monotonic() - start


@pytest.mark.parametrize("name", HOSTILE_TEXTS)
def test_hostile_input_returns_in_time(name):
    result, elapsed = _timed_grade(HOSTILE_TEXTS[name])
    assert elapsed < WALL_LIMIT_S
    assert not result.correct


@pytest.mark.parametrize("text", ["\\boxed{9^{9^{9^{9^{9}}}}}", "\\boxed{10^{10^{100}}!}"])
def test_sympy_bombs_time_out(text):
    result, elapsed = _timed_grade(text)
    assert result.method == "timeout"
    assert elapsed < WALL_LIMIT_S


def test_answers_match_honours_a_shorter_timeout():
    start = time.monotonic()
    assert answers_match("9^{9^{9^{9^{9}}}}", "5", timeout=0.5) is False
    assert time.monotonic() - start < 0.5 + (WALL_LIMIT_S - 1)


def test_hostile_inputs_from_a_thread():
    results: dict[str, tuple[Grade, float]] = {}

    def run() -> None:
        for name, text in HOSTILE_TEXTS.items():
            results[name] = _timed_grade(text)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert set(results) == set(HOSTILE_TEXTS)
    for result, elapsed in results.values():
        assert elapsed < WALL_LIMIT_S
        assert not result.correct
    assert results["power tower"][0].method == "timeout"


def test_calls_after_a_timeout_are_fast_and_right():
    assert grade(HOSTILE_TEXTS["power tower"], "5").method == "timeout"
    start = time.monotonic()
    assert grade("\\boxed{2\\sqrt3}", "\\sqrt{12}") == Grade(True, "2\\sqrt3", "math_verify")
    assert time.monotonic() - start < 0.5


# --- concurrency -----------------------------------------------------------------------

CONCURRENT_CASES = [
    ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}", True),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", True),
    ("\\boxed{\\frac{\\pi}{3}}", "60^\\circ \\cdot \\pi/180", True),
    ("\\boxed{\\sqrt{3}}", "\\sqrt{2}", False),
    ("The answer is 1,000.", "1000", True),
    ("\\boxed{(B)}", "B", True),
    ("\\boxed{[0,1)}", "(0,1]", False),
    ("\\boxed{\\frac{2}{\\sqrt{2}}}", "\\sqrt{2}", True),
]


def test_eight_threads_grade_correctly():
    barrier = threading.Barrier(8)
    failures: list[str] = []

    def run(offset: int) -> None:
        barrier.wait()
        for i in range(len(CONCURRENT_CASES)):
            text, gold, expected = CONCURRENT_CASES[(i + offset) % len(CONCURRENT_CASES)]
            # A generous bound: this test is about correctness under concurrency; the
            # bound itself is tested above. At 5 s one sympy case timed out (graded
            # wrong) while the suite shared the 2 cores with a training job.
            if grade(text, gold, timeout=30.0).correct != expected:
                failures.append(text)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    assert not failures


def test_a_slow_answer_does_not_block_other_threads():
    slow = threading.Thread(target=grade, args=(HOSTILE_TEXTS["power tower"], "5"))
    slow.start()
    time.sleep(0.1)
    start = time.monotonic()
    assert answers_match("2\\sqrt{3}", "\\sqrt{12}")
    assert time.monotonic() - start < 0.5
    slow.join()


# --- processes -------------------------------------------------------------------------


def _run_python(code: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _load_grading_snippet() -> str:
    return f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("grading_under_test", {str(GRADING_FILE)!r})
        grading = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = grading
        spec.loader.exec_module(grading)
    """


def test_import_is_light():
    code = (
        _load_grading_snippet()
        + """
        heavy = {"math_verify", "sympy", "torch"} & set(sys.modules)
        print(sorted(heavy))
    """
    )
    out, _ = _run_python(code).communicate(timeout=30)
    assert out.strip() == "[]"


@pytest.mark.parametrize("exit_how", ["normal exit", "SIGKILL"])
def test_no_processes_outlive_the_caller(exit_how):
    # Killed callers leave an idle worker (exits on EOF) and a busy one, still computing
    # a power tower with a 1 s budget (exits on its own alarm at 2 s).
    code = (
        _load_grading_snippet()
        + """
        import threading, time
        bomb = "\\\\boxed{9^{9^{9^{9^{9}}}}}"
        assert grading.grade(bomb, "5").method == "timeout"
        if sys.argv[-1] == "SIGKILL":
            threading.Thread(target=grading.grade, args=(bomb, "5"), kwargs={"timeout": 1.0}).start()
            time.sleep(0.3)
        assert grading.grade("\\\\boxed{2\\\\sqrt3}", "\\\\sqrt{12}").correct
        pool = grading._POOL
        workers = [*pool._idle, *pool._busy]
        print(pool._zygote[0].pid, *[worker.pid for worker in workers], flush=True)
        if sys.argv[-1] == "SIGKILL":
            time.sleep(60)
    """
    )
    caller = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), exit_how], stdout=subprocess.PIPE, text=True
    )
    pids = [int(pid) for pid in caller.stdout.readline().split()]
    assert len(pids) == (3 if exit_how == "SIGKILL" else 2)
    if exit_how == "SIGKILL":
        caller.kill()
    caller.wait(timeout=30)
    deadline = time.monotonic() + 5
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_alive, pids))


# --- MATH-500 --------------------------------------------------------------------------


def test_math500_gold_solutions_grade_correct():
    path = DATA_DIR / "math500.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is absent (MATH-500 data not downloaded)")
    with path.open() as f:
        rows = [json.loads(line) for line in islice(f, 100)]
    wrong = [
        (row["answer"], result)
        for row in rows
        if not (result := grade(row["solution"], row["answer"])).correct
    ]
    assert not wrong


@pytest.mark.parametrize("text, expected", [
    ("6 + 5 = 11 cups, so \\boxed{11}.", ["11", "6", "5"]),
    ("\\boxed{\\frac{1}{2}} then \\fbox{3} and x-2", ["\\frac{1}{2}", "3", "1", "2"]),
    ("owes \u22125, has 1,234,567 and 3.5 or .5 or 3/4", ["-5", "1,234,567", "3.5", ".5", "3/4"]),
    ("\\boxedsymbol 7 and \\boxed{", ["7"]),  # not a box command; an empty box is no answer
    ("no answer here", []),
])
def test_every_answer_reads_each_box_and_number_in_order(text, expected):
    assert every_answer(text) == expected


def test_every_answer_is_bounded():
    assert len(every_answer(" ".join(map(str, range(10_000))))) == MAX_CANDIDATES


def test_written_anywhere_finds_the_gold_in_any_text_and_form():
    assert written_anywhere(["I get 12.", "so 6 + 5 = 11, then 7"], "11")
    assert written_anywhere(["\\boxed{\\frac{22}{2}}"], "11")  # equivalence, not string match
    assert not written_anywhere(["12 or 110 or 1.1"], "11")
    assert not written_anywhere([], "11")
