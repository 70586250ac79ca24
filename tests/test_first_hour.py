"""What a newcomer meets in the first hour (issue 48): flags that take negative numbers,
``srpo eval`` sized for the machine and saying what it evaluates, a table that explains
its zeros (answers cut off by the token cap), and progress that shows in a terminal of
0 columns and as lines in a log."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from srpo_agents.cli import build_parser, main
from srpo_agents.cli.evaluate import EVAL_SIZES, eval_sizes
from srpo_agents.cli.tables import cut_off_note, format_table
from srpo_agents.running import progress


@pytest.mark.parametrize("value, says", [("-1e-5", "lr=-1e-05: expected a learning rate"),
                                          ("-0.5", "lr=-0.5: expected a learning rate"),
                                          ("-3", "lr=-3.0: expected a learning rate")])
def test_a_negative_number_is_a_value_and_gets_its_own_check(value, says, capsys):
    """``--lr -1e-5`` printed 53 lines of usage and "expected one argument"."""
    assert main(["train", "--model", "tiny", "--lr", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_words_that_are_not_numbers_are_still_flags():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--lr", "-x"])
    args = build_parser().parse_args(["train", "--temperature", "-inf", "--seed", "3"])
    assert args.temperature == float("-inf") and args.seed == 3


def test_eval_help_has_no_learner_flags():
    def flags(command: str) -> set[str]:
        text = subprocess.run([sys.executable, "-m", "srpo_agents.cli", command, "--help"],
                              capture_output=True, text=True, timeout=120).stdout
        return set(re.findall(r"--[a-z][a-z-]*", text))

    evaluation, training = flags("eval"), flags("train")
    learner_only = {"--weight-decay", "--max-staleness", "--behaviour-cap", "--lr",
                    "--proximal", "--epochs", "--eps-low", "--save-every", "--report-to"}
    assert learner_only <= training
    assert not learner_only & evaluation, learner_only & evaluation
    assert {"--temperature", "--max-new-tokens", "--env", "--workflow", "--device",
            "--tasks", "--benchmarks"} <= evaluation


def test_eval_sizes_follow_the_machine_unless_typed():
    untyped = argparse.Namespace(tasks=None, k=None)
    assert eval_sizes(untyped, "cpu") == EVAL_SIZES["cpu"] == (50, 2)
    assert eval_sizes(untyped, "cuda") == EVAL_SIZES["accelerator"] == (500, 4)
    assert eval_sizes(argparse.Namespace(tasks=7, k=None), "cuda") == (7, 4)
    with pytest.raises(ValueError, match="--k=0: expected an int >= 1"):
        eval_sizes(argparse.Namespace(tasks=None, k=0), "cpu")


RESULT = {"k": 2, "tasks": 4, "avg_at_k": 0.0, "avg_at_k_stderr": 0.0, "pass_at_k": 0.0,
          "pass_at_k_stderr": 0.0, "tokens_per_task": 32.0, "tool_calls_per_task": 0.0,
          "boxed_rate": 0.0, "cut_off_rate": 0.98}


def test_the_table_says_what_was_evaluated_and_what_was_cut_off():
    table = format_table(RESULT, dict(RESULT, cut_off_rate=0.5),
                         title="m on SRPO-Math-v0 solve_verify: 4 held-out tasks x k=2")
    lines = table.splitlines()
    assert lines[0].startswith("m on SRPO-Math-v0 solve_verify: 4 held-out tasks")
    assert "| answers cut off at the token cap | 98% | 50% |" in lines
    assert "| readable answers (\\boxed{}) | 0% | 0% |" in lines
    # a result without the rates (an older summary) shows no such rows
    old = {k: v for k, v in RESULT.items() if not k.endswith("_rate")}
    assert "cut off" not in format_table(old) and "| avg@2 | 0.000 ± 0.000 |" in format_table(old)


def test_mostly_cut_off_answers_get_a_note_naming_the_cap():
    note = cut_off_note(RESULT, 16)
    assert "98% of the outputs hit --max-new-tokens 16" in note
    assert cut_off_note(dict(RESULT, cut_off_rate=0.2), 16) == ""
    assert cut_off_note({"k": 1}, 16) == ""


def _every_update(init):
    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.every = 0.0
    return wrapped


def test_evaluation_reports_the_cut_off_share_and_progress_lines(math_tiny_dir, tmp_path,
                                                                monkeypatch):
    from srpo_agents.config import TrainConfig
    from srpo_agents.models.policy import load_policy
    from srpo_agents.rollout.engine import engine_for
    from srpo_agents.running.evaluate import evaluate, held_out

    config = TrainConfig(env="SRPO-Math-v0", workflow="single", model="tiny",
                         max_new_tokens=1, eval_tasks=6, out=str(tmp_path / "run"))
    engine = engine_for(config, load_policy(str(math_tiny_dir)))
    lines: list[str] = []
    from srpo_agents.running import progress as shown

    monkeypatch.setattr(shown.Progress, "__init__", _every_update(shown.Progress.__init__))
    result = evaluate(engine, *held_out(config), 2, progress="check", chunk_size=4,
                      log=lines.append)
    # one token is never a whole answer: every output was cut off
    assert result["cut_off_rate"] == 1.0
    # a correct episode wrote its answer somewhere: the lenient rate bounds avg@k
    assert result["answer_anywhere_rate"] >= result["avg_at_k"]
    # one line per chunk of 4 episodes (they finish together), never one episode's rate
    assert [line.split(",")[0] for line in lines] == [
        "check: 4/12 episodes", "check: 8/12 episodes", "check: 12/12 episodes"]
    assert "ETA 00m00s" in lines[-1]


def test_progress_writes_lines_where_there_is_no_terminal():
    lines: list[str] = []
    shown = progress.Progress(10, "eval", "episode", lines.append, every=0.0)
    assert shown.bar is None  # pytest's stderr is not a terminal
    for _ in range(10):
        shown.update()
    assert len(lines) == 10 and lines[4].startswith("eval: 5/10 episodes, ")
    quiet: list[str] = []
    throttled = progress.Progress(10, "eval", "episode", quiet.append, every=3600.0)
    for _ in range(10):
        throttled.update()
    assert quiet == []  # done within the interval: a log gets no progress lines


def test_a_terminal_of_zero_columns_still_gets_a_visible_bar(monkeypatch):
    """A fresh pseudo-terminal reports 0 x 0 (``script``, some CI shells): tqdm hid the
    bar there (past the terminal's 0 lines), with no percentage or ETA. (Run by hand: ``script -q -c "srpo
    train --quick --model tiny" /dev/null`` shows the bars now.)"""
    import io
    import os

    import tqdm.std

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    # what tqdm makes of such a terminal (its size less one), and what os reports for it
    monkeypatch.setattr(tqdm.std, "_screen_shape_wrapper", lambda: lambda fp: (-1, -1))
    monkeypatch.setattr(os, "get_terminal_size", lambda *_: os.terminal_size((0, 0)))
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)  # pytest-xdist's workers have LINES set
    plain = Terminal()  # the control: tqdm on its own draws nothing there
    monkeypatch.setattr(sys, "stderr", plain)
    bare = tqdm.std.tqdm(total=4, desc="srpo train")
    bare.update(2)
    bare.close()
    assert "50%" not in plain.getvalue() and plain.getvalue().strip() == ""
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    assert progress.is_terminal() and progress.terminal_size() == (100, 20)
    shown = progress.bar(4, "srpo train", "step")
    shown.update(2)
    shown.close()
    assert "srpo train:  50%" in stream.getvalue() and "2/4" in stream.getvalue()


def test_duration_reads_like_the_step_lines():
    assert progress.duration(0) == "00m00s"
    assert progress.duration(125.4) == "02m05s"
    assert progress.duration(3723) == "1h02m03s"
