"""The results table that ``srpo train`` and ``srpo eval`` print."""

from __future__ import annotations

from srpo_agents.config import TrainConfig


def format_table(before: dict, after: dict | None = None, title: str = "") -> str:
    """The results as a markdown table (one column, or before and after), under
    ``title``: what was evaluated (``eval_title``)."""
    k = before["k"]
    rows = [(f"avg@{k}", "avg_at_k"), (f"pass@{k}", "pass_at_k"),
            ("readable answers (\\boxed{})", "boxed_rate"),
            ("accuracy of the readable answers", "boxed_accuracy"),
            ("right answer written anywhere", "answer_anywhere_rate"),
            ("answers cut off at the token cap", "cut_off_rate"),
            ("tokens per task", "tokens_per_task"), ("tool calls per task", "tool_calls_per_task")]
    if "em" in before:
        rows += [("EM", "em"), ("F1", "f1")]
    head = "| metric | before | after |\n|---|---:|---:|" if after else "| metric | value |\n|---|---:|"
    lines = [title, ""] if title else []
    lines.append(head)
    results = (before, after) if after else (before,)
    for label, key in rows:
        if any(key not in result for result in results):
            continue
        cells = []
        for result in results:
            value = result.get(key)
            err = result.get(f"{key}_stderr")
            cells.append(f"{value:.3f} ± {err:.3f}" if err is not None
                         else f"{value:.0%}" if key.endswith("_rate") else f"{value:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def eval_title(config: TrainConfig, tasks: int, k: int, model: str) -> str:
    return (f"{model} on {config.env} {config.workflow}: {tasks} held-out tasks x k={k}, "
            f"max {config.max_new_tokens} new tokens an output")


CUT_OFF_WARNING = 0.5
"""The share of outputs cut off by the token cap above which the table says so."""


def cut_off_note(result: dict, max_new_tokens: int) -> str:
    """A line for a table whose answers were mostly cut off by ``--max-new-tokens``, so
    that its zeros explain themselves; "" otherwise."""
    share = result.get("cut_off_rate", 0.0)
    if share < CUT_OFF_WARNING:
        return ""
    return (f"note: {share:.0%} of the outputs hit --max-new-tokens {max_new_tokens} before "
            f"they ended; a cut-off answer seldom reaches its final answer, so scores near 0 "
            f"here say more about the cap than the model (a larger --max-new-tokens lets "
            f"them finish, and takes longer)")
