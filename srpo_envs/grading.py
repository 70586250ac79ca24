"""Math answer grading: extract a model's final answer and decide whether it is
equivalent to a gold answer. ``grade(text, gold)`` = ``extract_answer`` + ``answers_match``.

* Two tiers. A pure-Python fast path decides what it can, exactly: normalized string
  equality, multiple-choice letters, numbers (``Fraction`` arithmetic over thousands
  separators, ``$``, ``%``, ``\\frac``, unit words in ``\\text{}``) and tuples, intervals
  and sets of numbers. Integers and fractions must be equal exactly; once a decimal is
  involved both sides are rounded to 6 places, as math-verify does. A percentage matches
  its number as written or divided by 100 (``50\\%`` matches ``50`` and ``0.5``).
  Everything else (radicals, ``\\pi``, expressions, equations) goes to math-verify.
* math-verify runs in a worker process. Sympy can spend minutes in one C call
  (``9^{9^{9^{9^9}}}``) and nothing interrupts that in-thread; math-verify's own guard is
  SIGALRM, which fails off the main thread. So its timeouts are off and the caller kills
  the worker at the deadline: ``Grade(False, ..., "timeout")`` (also when it died).
* Workers are forked from a zygote: an interpreter that loads this file by path (not the
  package, so it imports nothing else and never re-runs the caller's ``__main__``),
  imports math-verify and warms its caches. A fork is ready in milliseconds, so replacing
  a killed worker is cheap, and each concurrent call borrows its own worker rather than
  queueing behind a slow one. The zygote starts on first need (1-2 s, or early via
  ``warm_up()``); time spent obtaining a worker does not count against the deadline.
* No leaked processes: the zygote and idle workers exit when their socket to the caller
  closes, a busy worker kills itself (SIGALRM's default action) a second after its budget,
  and an atexit hook cleans up. A worker's address space is capped, so a runaway sympy
  allocation fails fast instead of exhausting the host.
* Caps: answers and golds over ``MAX_ANSWER_CHARS`` are graded wrong ("too_long") unparsed.
  Extraction is linear and C-speed (``rfind``, byte scans, one regex on the reversed
  text): a 1 MB output takes well under 0.1 s.
* Model output is only regex-matched, converted with ``Fraction`` or passed to math-verify
  as a string; it is never evaluated.
"""

import atexit
import operator
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from itertools import accumulate, pairwise, repeat
from multiprocessing.connection import Connection

__all__ = ["MAX_ANSWER_CHARS", "Grade", "answers_match", "extract_answer", "grade", "warm_up"]

MAX_ANSWER_CHARS = 1000
_MAX_ELEMENTS = 64  # larger tuples/sets go to math-verify: the fast set check is quadratic
_WORKER_MEMORY_BYTES = 4 << 30  # on top of what the zygote already maps
_WORKER_GRACE_S = 1.0
_STARTUP_TIMEOUT_S = 120.0
_MAX_IDLE_WORKERS = 8


@dataclass(frozen=True)
class Grade:
    correct: bool
    extracted: str | None
    method: str  # exact | numeric | structure | math_verify | no_answer | too_long | timeout


# --- extraction ------------------------------------------------------------------------

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_SPACES = re.compile(r"\s*")
# "\boxed 5" / "\boxed \frac12": one run of commands and plain characters.
_BARE_ARGUMENT = re.compile(r"(?:\\[A-Za-z]+|[^\s$\\{}])*")
# Per byte: "{" -> 2, "}" -> 0, anything else -> 1; minus one gives the depth step.
_BRACE_STEP = bytes(2 if b == ord("{") else 0 if b == ord("}") else 1 for b in range(256))
_DIGIT = re.compile(r"[0-9]")
# The fallback number, read backwards from the text's last digit. Forwards it is
# [-](123 | 1,234,567)[.5][/4], the integer part optional before a decimal point; a
# minus right after a word or closing bracket is subtraction, not a sign.
_INT_REVERSED = r"(?:[0-9]{3},)+[0-9]{1,3}(?![0-9])|[0-9]+"
_NUMBER_REVERSED = re.compile(
    rf"(?:[0-9]+/)?(?:[0-9]+\.(?:{_INT_REVERSED})?|{_INT_REVERSED})(?:[-\u2212](?![\w)\]}}]))?"
)


def _brace_depths(s: str) -> tuple[bytes, Iterator[int]]:
    """``s`` as UTF-8 and a lazy running brace depth after each byte.

    Escaped braces and ``\\\\`` do not open or close groups. Bytes are safe because UTF-8
    never puts an ASCII byte inside a multi-byte character, and replace/translate plus
    accumulate run at C speed, which keeps a 1 MB scan near 50 ms.
    """
    raw = s.encode("utf-8", "surrogatepass")
    plain = raw.replace(b"\\\\", b"  ").replace(b"\\{", b"  ").replace(b"\\}", b"  ")
    return raw, accumulate(map(operator.sub, plain.translate(_BRACE_STEP), repeat(1)))


def _balanced(s: str) -> bool:
    depths = list(_brace_depths(s)[1])
    return not depths or (min(depths) >= 0 and depths[-1] == 0)


def _command_ends(text: str, after: int) -> bool:
    """Whether a command name found just before ``after`` ends there (else it is the
    start of a longer one, e.g. "\\boxedsymbol")."""
    follower = text[after : after + 1]
    return not (follower.isascii() and follower.isalpha())


def _last_box(text: str) -> int:
    """Index just past the last ``\\boxed``/``\\fbox`` command, or -1."""
    best = -1
    for command in _BOX_COMMANDS:
        end = len(text)
        while (i := text.rfind(command, 0, end)) >= 0:
            after = i + len(command)
            if _command_ends(text, after):
                best = max(best, after)
                break
            end = i
    return best


def extract_answer(text: str) -> str | None:
    """The final answer in ``text``.

    The content of the last ``\\boxed{...}``/``\\fbox{...}`` (brace-matched; the
    brace-less ``\\boxed 5`` takes the following run of characters). An empty last box,
    or one never closed because the output was cut off inside it, gives ``""``: an
    answer was attempted but there is none to grade. Without a box, the last number
    (``-3``, ``1,234,567``, ``3.5``, ``3/4``); with neither, ``None``.
    """
    start = _last_box(text)
    if start >= 0:
        start = _SPACES.match(text, start).end()
        if not text.startswith("{", start):
            return _BARE_ARGUMENT.match(text, start).group().rstrip(".,;:")
        raw, depths = _brace_depths(text[start:])
        try:
            close = operator.indexOf(depths, 0)
        except ValueError:
            return ""
        return raw[1:close].decode("utf-8", "surrogatepass").strip()
    reversed_text = text[::-1]
    digit = _DIGIT.search(reversed_text)
    if digit is None:
        return None
    number = _NUMBER_REVERSED.match(reversed_text, digit.start())
    return text[len(text) - number.end() : len(text) - number.start()]


def boxed(text: str) -> bool:
    """Whether ``text``'s final answer is read from a box: its last ``\\boxed``/
    ``\\fbox`` holds a non-empty answer (the format the role prompts ask for; without
    one, ``extract_answer`` falls back to the last number)."""
    return _last_box(text) >= 0 and bool(extract_answer(text))


# Every number, forwards: the shapes the fallback reads backwards ("-3", "1,234,567",
# "3.5", ".5", "3/4"); a minus right after a word or closing bracket is subtraction.
_NUMBER = re.compile(r"(?:(?<![\w)\]}])[-\u2212])?(?:(?<![0-9])[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])"
                     r"|[0-9]*\.[0-9]+|[0-9]+)(?:/[0-9]+)?")
MAX_CANDIDATES = 256  # answers read from one text at most: a bound on grading work


def every_answer(text: str) -> list[str]:
    """Every answer ``text`` writes, in order, duplicates dropped: each box's content
    and each number, at most ``MAX_CANDIDATES``. A lenient reading (an upper bound on
    what any choice of final answer could score), for diagnostics, never for rewards."""
    starts = sorted(i for command in _BOX_COMMANDS for i in _command_starts(text, command))
    found = [extract_answer(text[i:j]) for i, j in pairwise([*starts, len(text)])]
    found += _NUMBER.findall(text)
    return list(dict.fromkeys(a.replace("\u2212", "-") for a in found if a))[:MAX_CANDIDATES]


def _command_starts(text: str, command: str) -> Iterator[int]:
    i = text.find(command)
    while i >= 0:
        if _command_ends(text, i + len(command)):
            yield i
        i = text.find(command, i + 1)


def written_anywhere(texts: Iterable[str], gold: str) -> bool:
    """Whether any answer in any of ``texts`` (``every_answer``) matches ``gold``, by the
    fast path alone (same text, numbers, tuples, sets): it runs at the end of every
    episode, so it never waits on the math-verify worker, and a symbolic answer written
    in another form counts as not written."""
    target = _analyze(gold.strip())
    return any(len(answer) <= MAX_ANSWER_CHARS
               and (_decide(_analyze(answer.strip()), target) or (False,))[0]
               for text in texts for answer in every_answer(text))


# --- fast path -------------------------------------------------------------------------

_REWRITES = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"^\\[\[(]|\\[\])]$|\\?\$", ""),  # math delimiters and dollar signs
        (r"\\[!,]", ""),  # thin spaces go entirely: "1,\!000" and "10\,000" are numbers
        (r"\\(?:q?quad|displaystyle)(?![A-Za-z])|\\[;: ]|~", " "),
        (r"\\(?:left|right)(?![A-Za-z])\.?", ""),
        (r"\\[dt]frac(?![A-Za-z])", r"\\frac"),
        (r"\\frac\s*([0-9])\s*([0-9])", r"\\frac{\1}{\2}"),
        (r"\\sqrt\s*([0-9])", r"\\sqrt{\1}"),
        (r"\^\s*(?:\{\s*\\circ\s*\}|\\circ)|°|\\degree(?![A-Za-z])", ""),
        (r"\{,\}", ","),
        (r"\\%", "%"),
        ("\u2212", "-"),
    )
)
# A number followed only by one or two words in \text{}: a unit ("12\text{ cm}^2").
_UNIT_SUFFIX = re.compile(
    r"(.*[0-9%)}.])\s*\\(?:text|textrm|mbox)\s*\{\s*([A-Za-z]+(?:\s+[A-Za-z]+)?)\s*\.?\s*\}"
    r"(?:\^\{?[23]\}?)?"
)
_NOT_UNITS = frozenset({"and", "or", "not", "no", "more", "less", "than", "only"})
_TEXT_WRAPPER = re.compile(
    r"\\(?:text|textbf|textit|textrm|textsf|textnormal|mathrm|mathbf|mathit|mbox)\s*"
    r"\{([^{}]*)\}"
)
_SPACE_RUN = re.compile(r"\s+")
_SPACE_AT_SYMBOL = re.compile(r" ?([^A-Za-z0-9 ,]) ?")
# A space after a comma is kept so that "1, 234" stays a list while "1,234" is a number.
_SPACE_AT_COMMA = re.compile(r" ?,( ?)")
_LETTER = re.compile(r"\(?([A-Z])\)?")
_DECIMAL = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+"
_SCALAR = re.compile(
    rf"(?P<sign>[-+]?)(?:(?P<num>{_DECIMAL})(?:/(?P<den>{_DECIMAL}))?"
    rf"|\\frac\{{(?P<fnum>[-+]?(?:{_DECIMAL}))\}}\{{(?P<fden>[-+]?(?:{_DECIMAL}))\}})"
    r"(?P<pct>%?)"
)


@dataclass(frozen=True)
class _Scalar:
    value: Fraction
    inexact: bool  # written with a decimal point
    percent: bool


@dataclass(frozen=True)
class _Form:
    """What the fast path knows about one answer string."""

    key: str  # normalized text, compared for "exact"
    letter: str | None
    scalar: _Scalar | None
    structure: tuple[str, tuple[_Scalar, ...]] | None  # ("set" | "()" | "[)" | ..., elements)


def _normalize(s: str) -> str:
    s = s.strip()
    for pattern, replacement in _REWRITES:
        s = pattern.sub(replacement, s)
    unit = _UNIT_SUFFIX.fullmatch(s.strip())
    if unit and not _NOT_UNITS.intersection(unit[2].lower().split()):
        s = unit[1]
    for _ in range(3):  # nested wrappers such as \textbf{\text{(B)}}
        s = _TEXT_WRAPPER.sub(r"\1", s)
    s = _SPACE_RUN.sub(" ", s).strip()
    s = _SPACE_AT_SYMBOL.sub(r"\1", s)
    s = _SPACE_AT_COMMA.sub(r",\1", s)
    return s.rstrip(".").strip()


def _parse_scalar(s: str) -> _Scalar | None:
    m = _SCALAR.fullmatch(s)
    if m is None:
        return None
    num, den = (m["num"], m["den"] or "1") if m["num"] else (m["fnum"], m["fden"])
    try:
        value = Fraction(num.replace(",", "")) / Fraction(den.replace(",", ""))
    except ZeroDivisionError:
        return None
    return _Scalar(-value if m["sign"] == "-" else value, "." in m[0], bool(m["pct"]))


def _split_top_level(s: str) -> list[str] | None:
    """``s`` split at commas outside brackets; None if its brackets do not nest."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            parts.append(s[start:i].strip())
            start = i + 1
    parts.append(s[start:].strip())
    return parts if depth == 0 else None


def _parse_structure(s: str) -> tuple[str, tuple[_Scalar, ...]] | None:
    if len(s) >= 4 and s.startswith("\\{") and s.endswith("\\}"):
        kind, inner = "set", s[2:-2]
    elif len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        kind, inner = s[0] + s[-1], s[1:-1]
    elif "," in s:  # a bare list of solutions: order does not matter
        kind, inner = "set", s
    else:
        return None
    parts = _split_top_level(inner)
    if parts is None or len(parts) > _MAX_ELEMENTS:
        return None
    elements = tuple(_parse_scalar(part) for part in parts)
    return None if any(e is None for e in elements) else (kind, elements)


@lru_cache(maxsize=8192)  # golds repeat across a group of samples
def _analyze(answer: str) -> _Form:
    text = _normalize(answer)
    letter = _LETTER.fullmatch(text)
    return _Form(
        key=text.replace(", ", ","),
        letter=letter[1] if letter else None,
        scalar=_parse_scalar(text),
        structure=_parse_structure(text),
    )


def _close(x: Fraction, y: Fraction, inexact: bool) -> bool:
    return x == y or (inexact and round(x, 6) == round(y, 6))


def _scalar_eq(a: _Scalar, b: _Scalar) -> bool:
    inexact = a.inexact or b.inexact
    if _close(a.value, b.value, inexact):
        return True
    if a.percent == b.percent:
        return False
    if a.percent:
        return _close(a.value / 100, b.value, inexact)
    return _close(a.value, b.value / 100, inexact)


def _same_set(xs: tuple[_Scalar, ...], ys: tuple[_Scalar, ...]) -> bool:
    return all(any(_scalar_eq(x, y) for y in ys) for x in xs) and all(
        any(_scalar_eq(x, y) for x in xs) for y in ys
    )


def _decide(pred: _Form, gold: _Form) -> tuple[bool, str] | None:
    """The fast path's verdict and method, or None to ask math-verify."""
    if pred.key == gold.key:
        return True, "exact"
    if gold.letter:
        return pred.letter == gold.letter, "exact"
    if pred.scalar and gold.scalar:
        return _scalar_eq(pred.scalar, gold.scalar), "numeric"
    if pred.structure and gold.structure:
        (pred_kind, pred_items), (gold_kind, gold_items) = pred.structure, gold.structure
        if pred_kind == gold_kind == "set":
            return _same_set(pred_items, gold_items), "structure"
        if pred_kind == gold_kind:
            same = len(pred_items) == len(gold_items) and all(
                map(_scalar_eq, pred_items, gold_items)
            )
            return same, "structure"
        if "set" not in (pred_kind, gold_kind):  # different brackets: [0,1) vs (0,1]
            return False, "structure"
    return None


_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


def _match(pred: str, gold: str, deadline: float) -> tuple[bool, str]:
    pred, gold = pred.strip(), gold.strip()
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False, "too_long"
    pred_form = _analyze(pred)
    if not pred_form.key:
        return False, "no_answer"
    decided = _decide(pred_form, _analyze(gold))
    if decided:
        return decided
    # math-verify sees the answer wrapped in \boxed{...}; a stray brace would let part of
    # it escape the box and be graded on its own.
    if not (_balanced(pred) and _balanced(gold)):
        return False, "exact"
    verdict = _POOL.verify(
        _UNESCAPED_DOLLAR.sub("", pred), _UNESCAPED_DOLLAR.sub("", gold), deadline
    )
    return (False, "timeout") if verdict is None else (verdict, "math_verify")


def answer_key(answer: str) -> str:
    """A form under which answers written differently but alike count as one in a vote:
    a number is its exact value ("2", "2.0" and "\\frac{4}{2}" are "2"), anything else its
    normalized text. Coarser than ``answers_match`` (no sets, intervals or symbolic
    equivalence), so two equal answers may still get two keys; never the other way."""
    text = _normalize(answer)
    scalar = _parse_scalar(text)
    if scalar is None:
        return text
    return f"{scalar.value}{'%' if scalar.percent else ''}"


def answers_match(pred: str, gold: str, *, timeout: float = 1.0) -> bool:
    """Whether the extracted answer ``pred`` is equivalent to ``gold``, within ``timeout`` s."""
    return _match(pred, gold, time.monotonic() + timeout)[0]


def grade(text: str, gold: str, *, timeout: float = 1.0) -> Grade:
    """Extract the final answer from ``text`` and compare it with ``gold``.

    Returns within ``timeout`` seconds of work on any input (the one-off worker start-up
    excepted, see the module docstring); past it the grade is wrong with method "timeout".
    """
    deadline = time.monotonic() + timeout
    extracted = extract_answer(text)
    if not extracted:
        return Grade(False, extracted, "no_answer")
    correct, method = _match(extracted, gold, deadline)
    return Grade(correct, extracted, method)


def warm_up() -> None:
    """Start the math-verify zygote and one worker now rather than on first need."""
    _POOL.warm_up()


# --- math-verify workers ---------------------------------------------------------------

_ZYGOTE_BOOT = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_srpo_grading_zygote', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = module\n"
    "spec.loader.exec_module(module)\n"
    "module._zygote_main(int(sys.argv[2]))\n"
)
# Parsed once in the zygote so every forked worker starts with math-verify's lazy parser
# state and caches already built.
_WARM_UP_PAIRS = (
    ("\\frac{1}{2}", "0.5"),
    ("\\left(1, \\sqrt{2}\\right)", "(1,2^{1/2})"),
    ("[0,1)", "(0,1]"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("x=5", "5"),
    ("\\text{(B)}", "B"),
    ("2\\pi", "\\pi+\\pi"),
)


def _verify_in_worker(pred: str, gold: str) -> bool:
    from math_verify import parse, verify

    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
    pred_parsed = parse(f"\\boxed{{{pred}}}", parsing_timeout=None)
    return bool(gold_parsed and pred_parsed) and verify(
        gold_parsed, pred_parsed, timeout_seconds=None
    )


def _zygote_main(fd: int) -> None:
    import logging

    # Its "timeout is disabled" warning is expected: the caller enforces the deadline.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    for pred, gold in _WARM_UP_PAIRS:
        _verify_in_worker(pred, gold)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps exited workers
    sock = socket.socket(fileno=fd)
    sock.sendall(b"R")
    while sock.recv(1):  # b"" once the caller has gone
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                ours.close()
                _worker_main(theirs)
            finally:
                os._exit(0)  # never fall back into the zygote's loop
        theirs.close()
        socket.send_fds(sock, [pid.to_bytes(8, "little")], [ours.fileno()])
        ours.close()


def _worker_main(sock: socket.socket) -> None:
    import resource

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = mapped + _WORKER_MEMORY_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except OSError:  # no /proc: not Linux, run uncapped
        pass
    conn = Connection(sock.detach())
    while True:
        try:
            pred, gold, budget = conn.recv()
        except EOFError:
            return
        # SIGALRM's default action ends the process even inside a C call, so a worker
        # whose caller died cannot keep computing.
        signal.setitimer(signal.ITIMER_REAL, budget + _WORKER_GRACE_S)
        try:
            verdict = _verify_in_worker(pred, gold)
        except Exception:  # MemoryError, RecursionError, sympy internals: not equivalent
            verdict = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        conn.send(verdict)


@dataclass(eq=False)
class _Worker:
    conn: Connection
    pid: int


class _WorkerPool:
    """Forks math-verify workers from a zygote and lends one to each concurrent call."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._forget)
        atexit.register(self.close)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._zygote: tuple[subprocess.Popen, socket.socket] | None = None
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()

    def _forget(self) -> None:
        # A forked copy of the caller must not drive its parent's processes; closing its
        # copies of the sockets leaves the parent's untouched.
        for worker in [*self._idle, *self._busy]:
            worker.conn.close()
        if self._zygote:
            self._zygote[1].close()
        self._reset()

    def _start_zygote(self) -> None:
        ours, theirs = socket.socketpair()
        fd = theirs.fileno()
        with theirs:
            process = subprocess.Popen(
                [sys.executable, "-c", _ZYGOTE_BOOT, os.path.abspath(__file__), str(fd)],
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C meant for the caller must not reach it
            )
        self._zygote = process, ours
        ours.settimeout(_STARTUP_TIMEOUT_S)
        try:
            ready = ours.recv(1) == b"R"
        except OSError:
            ready = False
        if not ready:
            self._stop_zygote()
            raise RuntimeError("the math-verify zygote failed to start (see its stderr)")

    def _stop_zygote(self) -> None:
        if self._zygote:
            process, sock = self._zygote
            sock.close()
            process.kill()
            process.wait()
            self._zygote = None

    def _fork(self) -> _Worker:
        for _ in range(2):  # a zygote found dead is restarted once
            if self._zygote is None or self._zygote[0].poll() is not None:
                self._stop_zygote()
                self._start_zygote()
            try:
                self._zygote[1].sendall(b"F")
                message, fds, _, _ = socket.recv_fds(self._zygote[1], 8, 1)
            except OSError:
                fds = []
            if fds:
                return _Worker(Connection(fds[0]), int.from_bytes(message, "little"))
            self._stop_zygote()
        raise RuntimeError("the math-verify zygote keeps dying")

    def _acquire(self) -> _Worker:
        with self._lock:
            worker = self._idle.pop() if self._idle else self._fork()
            self._busy.add(worker)
            return worker

    def _release(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
            if len(self._idle) < _MAX_IDLE_WORKERS:
                self._idle.append(worker)
                return
        worker.conn.close()  # a surplus worker exits on EOF

    def _drop(self, worker: _Worker, kill: bool) -> None:
        with self._lock:
            self._busy.discard(worker)
        if kill:
            try:
                os.kill(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        worker.conn.close()

    def warm_up(self) -> None:
        self._release(self._acquire())

    def verify(self, pred: str, gold: str, deadline: float) -> bool | None:
        """math-verify's verdict, or None when it has none by ``deadline``."""
        budget = deadline - time.monotonic()
        if budget <= 0:
            return None
        worker = self._acquire()  # not charged: a fork, or once the zygote's start-up
        try:
            worker.conn.send((pred, gold, budget))
            if worker.conn.poll(budget):
                verdict = worker.conn.recv()
                self._release(worker)
                return verdict
        except (OSError, EOFError):  # it died (memory cap, crash): nothing left to kill
            self._drop(worker, kill=False)
            return None
        self._drop(worker, kill=True)  # still computing past the deadline
        return None

    def close(self) -> None:
        with self._lock:
            workers = [*self._idle, *self._busy]
            self._idle, self._busy = [], set()
            self._stop_zygote()
        for worker in workers:
            self._drop(worker, kill=True)


_POOL = _WorkerPool()
