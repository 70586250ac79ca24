"""The README's install and first-run block, which CI runs in a fresh venv
(``.ci/readme_first_run.py``, ``make test-first-run``), holds what a newcomer needs: a
venv, the CPU build of torch pinned as the Makefile pins it, only extras that exist, and
``srpo`` commands that parse and make valid configs. Run here without installing
anything; the fresh-venv run itself is CI's."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from srpo_agents.cli import build_parser, typed_flags
from srpo_agents.cli.flags import config_from_args

from .conftest import base_dependencies, optional_dependencies

ROOT = Path(__file__).resolve().parents[1]


def _first_run_module():
    spec = importlib.util.spec_from_file_location("readme_first_run",
                                                  ROOT / ".ci" / "readme_first_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIRST_RUN = _first_run_module()
COMMANDS = FIRST_RUN.first_run_commands((ROOT / "README.md").read_text(encoding="utf-8"))


def _makefile_value(name: str) -> str:
    match = re.search(rf"^{name} := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, f"Makefile sets no {name}"
    return match.group(1).strip()


def _words(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def test_the_block_makes_a_venv_then_installs_torch_first_then_srpo():
    kinds = []
    for command in COMMANDS:
        words = _words(command)
        if words[:3] == ["python3", "-m", "venv"]:
            kinds.append("venv")
            assert ". .venv/bin/activate" in command, "the venv must be activated"
        elif words[:2] == ["pip", "install"] and any(w.startswith("torch") for w in words):
            kinds.append("torch")
        elif words[:3] == ["pip", "install", "-e"]:
            kinds.append("srpo")
        elif words[0] == "srpo":
            kinds.append(words[1])
    assert kinds == ["venv", "torch", "srpo", "train", "eval"], COMMANDS


def test_torch_is_the_makefiles_pin_from_the_cpu_index():
    torch_line = next(c for c in COMMANDS if "torch==" in c)
    words = _words(torch_line)
    assert _makefile_value("TORCH_PIN") in words
    assert words[words.index("--index-url") + 1] == _makefile_value("TORCH_INDEX")
    makefile = (ROOT / "Makefile").read_text()
    installs = re.findall(r"pip install --quiet \$\(TORCH_PIN\)(.*)", makefile)
    assert installs and all("--index-url $(TORCH_INDEX)" in rest for rest in installs)


def test_the_extras_exist_and_the_base_install_reads_the_default_model():
    extras = optional_dependencies()
    install = next(c for c in COMMANDS if _words(c)[:3] == ["pip", "install", "-e"])
    extra = re.fullmatch(r"\.(\[([\w,]+)\])?", _words(install)[3])
    assert extra, _words(install)[3]
    named = extra.group(2).split(",") if extra.group(2) else []
    assert set(named) <= set(extras), set(named) - set(extras)
    # the default model is a GGUF: transformers reads it through gguf and accelerate
    # (the first run on a clean machine failed without the second), and the base
    # install (issue 64) must train it
    assert {"gguf", "accelerate"} <= set(base_dependencies()), base_dependencies()


def test_the_srpo_commands_parse_and_make_valid_configs():
    parser = build_parser()
    for command in COMMANDS:
        words = _words(command)
        if words[0] != "srpo":
            continue
        args = parser.parse_args(words[1:])
        if words[1] == "train":
            args.typed_flags = typed_flags(words[1:])
            config = config_from_args(args)
            assert args.quick and config.model == "smollm2-135m-instruct"
            trained = config.out
    evals = [_words(c) for c in COMMANDS if _words(c)[:2] == ["srpo", "eval"]]
    assert evals and evals[0][evals[0].index("--checkpoint") + 1] == trained


def test_ci_runs_the_block():
    assert "make test-first-run" in (ROOT / ".ci" / "run").read_text()
    assert ".ci/readme_first_run.py" in (ROOT / "Makefile").read_text()


def test_the_block_is_read_as_written(tmp_path):
    readme = ("intro\n" + FIRST_RUN.FIRST_RUN_MARKER + "\n```bash\n# a comment\n"
              "python3 -m venv .venv && . .venv/bin/activate\n"
              "srpo train --quick \\\n  --out runs/x   # trailing words\n\n```\n"
              "```bash\nnot this\n```\n")
    assert FIRST_RUN.first_run_commands(readme) == [
        "python3 -m venv .venv && . .venv/bin/activate",
        "srpo train --quick --out runs/x   # trailing words"]
    with pytest.raises(ValueError, match="no .*first-run"):
        FIRST_RUN.first_run_commands("```bash\nls\n```\n")
    script = FIRST_RUN.script_for(["false", "echo never"], tmp_path / "t")
    import subprocess

    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert done.returncode != 0 and "never" not in done.stdout


def test_the_output_check_names_what_is_missing():
    problems = FIRST_RUN.check_output("| metric | before | after |", 4, COMMANDS)
    assert f"4 of {len(COMMANDS)} commands finished" in problems
    assert "the model fetch was not announced" in problems
    assert "srpo eval printed no table" in problems
