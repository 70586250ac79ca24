"""The record, the text rules and the boundary between the two sides."""

import dataclasses
import json
import subprocess
import sys

import pytest

from srpo_envs.text import CHARSET, as_data, neutralize_control_tokens, render, to_charset
from srpo_envs.transition import ConsumedOutput, Transition


def make_transition(**overrides):
    fields = dict(
        episode_id="ep-1", task_id="t-1", step_index=0, event_type="solve",
        pre_state_id="abc", consumed=(ConsumedOutput("solver_0", "solver", "p", "x"),
                                      ConsumedOutput("solver_1", "solver", "p", "y")),
        expected_agents=("solver_0", "solver_1", "solver_2"), reward=0.0,
        terminated=False, truncated=False, info={"correct": True, "calls": [1, 2]},
    )
    fields.update(overrides)
    return Transition(**fields)


def test_transition_is_frozen_and_round_trips_through_json():
    t = make_transition()
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.reward = 1.0
    with pytest.raises(TypeError):
        t.info["correct"] = False
    again = Transition.from_dict(json.loads(json.dumps(t.to_dict())))
    assert again == t and again.to_dict() == t.to_dict()
    assert t.set_size == 2 and t.missing_agents == ("solver_2",)


def test_transition_uses_only_the_standard_library():
    import srpo_envs.transition as module

    source = open(module.__file__, encoding="utf-8").read()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines()
               if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "collections", "dataclasses", "types", "typing"}


@pytest.mark.parametrize("module", ["srpo_envs", "srpo_envs.math_v0", "srpo_envs.scripted"])
def test_importing_the_env_side_does_not_import_torch(module):
    code = (f"import sys, {module}, gymnasium as gym; gym.make('SRPO-Math-v0'); "
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("token", ["<|im_end|>", "<|im_start|>", "<|eot_id|>", "</s>", "<s>",
                                   "[INST]", "[/INST]", "<<SYS>>", "<end_of_turn>",
                                   "<｜end▁of▁sentence｜>", "<|endoftext|>"])
def test_control_tokens_are_neutralized(token):
    out = neutralize_control_tokens(f"a {token} b")
    assert token not in out and out.startswith("a ") and out.endswith(" b")


def test_math_text_is_left_alone():
    text = "If x < 3 and y > 2 then |x - y| < 5; see [1], \\{1, 2\\} and \\boxed{4}."
    assert neutralize_control_tokens(text) == text


def test_charset_covers_prompts_and_replaces_the_rest():
    assert set("Solve: ½ + π ≈ 3.64\n\tÄ") <= CHARSET
    assert to_charset("a\x00b\U0001F600c") == "a\ufffdb\ufffdc"
    clipped = as_data("x" * 100, 20)
    assert len(clipped) == 20 and clipped.endswith("[...]")


def test_render_is_single_pass():
    out = render("Q: {question}\nF: {feedback}", {"question": "{feedback}", "feedback": "f"})
    assert out == "Q: {feedback}\nF: f"
    assert render("\\boxed{} {x}", {"question": "q"}) == "\\boxed{} {x}"
