"""``--report-to tensorboard trackio wandb``: each tracker gets the run's config and every
number of metrics.jsonl at its step, offline, and each is read back here from what it
wrote (TensorBoard's event files, trackio's SQLite store, the W&B offline run file)."""

import json
import struct
import time
from pathlib import Path

import pytest

from srpo_agents.cli import main
from srpo_agents.config import TrainConfig


def wandb_records(run_dir: Path, wait_s: float = 60.0) -> tuple[dict, list[dict]]:
    """(config, history rows) of the W&B offline run in ``run_dir/wandb``, once its
    ``exit`` record is written: ``run.finish()`` returns before the wandb-core process has
    flushed the file (seen in CI: a 7-byte file, complete 2 s later)."""
    deadline = time.monotonic() + wait_s
    while True:
        config, history, kinds = _wandb_file(run_dir)
        if "exit" in kinds or time.monotonic() > deadline:
            return config, history
        time.sleep(0.2)


def _wandb_file(run_dir: Path) -> tuple[dict, list[dict], list[str]]:
    """The ``.wandb`` file is a log of records (a 7-byte header, then records in 32 KiB
    blocks, each with a 7-byte header: checksum, length, type), each a ``Record``
    protobuf."""
    from wandb.proto import wandb_internal_pb2

    path = next((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    data = path.read_bytes()
    kinds: list[str] = []
    if len(data) < 7:  # not yet written
        return {}, [], kinds
    assert data[:4] == b":W&B"
    position, block, pieces, config, history = 7, 32768, b"", {}, []
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if length == 0 and kind == 0:
            position += left
            continue
        if position + 7 + length > len(data):  # a record still being written
            break
        pieces += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            pieces = b""
            which = record.WhichOneof("record_type")
            kinds.append(which)
            if which == "run":
                config.update({i.key: json.loads(i.value_json) for i in record.run.config.update})
            elif which == "config":
                config.update({i.key: json.loads(i.value_json) for i in record.config.update})
            elif which == "history":
                history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                for i in record.history.item})
    return config, history, kinds


def test_every_tracker_gets_the_config_and_the_metrics(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tensorboard")
    trackio = pytest.importorskip("trackio")
    pytest.importorskip("wandb")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    run = tmp_path / "tracked"
    assert main(["train", "--env", "SRPO-Countdown-v0", "--workflow", "single", "--steps", "2",
                 "--group-size", "2", "--tasks-per-step", "2", "--eval-tasks", "4",
                 "--eval-k", "2", "--max-new-tokens", "6", "--model", "tiny",
                 "--warmstart-steps", "2", "--warmstart-target", "1.0",
                 "--report-to", "tensorboard", "trackio", "wandb", "--out", str(run)]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    numbers = [{k: float(v) for k, v in r.items() if isinstance(v, int | float) and k != "step"}
               for r in rows]
    config = json.loads((run / "config.json").read_text())
    assert config["report_to"] == ["tensorboard", "trackio", "wandb"]

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("accuracy")] == pytest.approx(
        [n["accuracy"] for n in numbers])

    by_step: dict[int, dict] = {}
    for log in trackio.SQLiteStorage.get_logs("srpo", "tracked"):  # "after" shares a step
        by_step.setdefault(log["step"], {}).update(log)
    for step, expected in enumerate(numbers, start=1):
        assert {k: by_step[step][k] for k in expected} == pytest.approx(expected)
    assert by_step[0]["eval/avg_at_k"] == pytest.approx(
        json.loads((run / "summary.json").read_text())["before"]["avg_at_k"])
    stored = trackio.SQLiteStorage.get_run_config("srpo", "tracked")
    assert stored["lr"] == config["lr"] and stored["env"] == "SRPO-Countdown-v0"
    printed = capsys.readouterr().out  # a pipe, not a terminal: no colour codes in it
    assert "Trackio" in printed and "\x1b[" not in printed

    wandb_config, history = wandb_records(run)
    assert wandb_config["lr"] == config["lr"] and wandb_config["env"] == "SRPO-Countdown-v0"
    steps = [h for h in history if "accuracy" in h]
    assert [h["_step"] for h in steps] == [1, 2]
    for logged, expected in zip(steps, numbers, strict=True):
        assert {k: logged[k] for k in expected} == pytest.approx(expected)
    assert any("eval/avg_at_k" in h for h in history)


def test_wandb_says_when_it_logs_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from srpo_agents.running.trackers import WandbLog

    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    said = []
    for mode, expected in (("", "no login found"), ("offline", "WANDB_MODE=offline")):
        if mode:
            monkeypatch.setenv("WANDB_MODE", mode)
        else:
            monkeypatch.delenv("WANDB_MODE", raising=False)
        run = tmp_path / f"w{mode}"
        run.mkdir()
        log = WandbLog(run, {"lr": 0.1}, resume=False, log=said.append)
        log.row({"step": 0, "reward": 0.5})
        log.close()
        assert expected in said[-1]
        assert wandb_records(run)[1][0]["reward"] == 0.5


@pytest.mark.parametrize("value,message", [
    (("mlflow",), r"report_to='mlflow': expected any of \('tensorboard', 'trackio', 'wandb'\)"),
    (("none", "wandb"), r"'none' goes alone"),
])
def test_bad_trackers_are_named(value, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(report_to=value)


def test_none_and_the_old_tensorboard_flag():
    assert TrainConfig(report_to=("none",)).report_to == ()
    assert TrainConfig(tensorboard=True).report_to == ("tensorboard",)


def test_colour_codes_leave_piped_output_only(capsys, monkeypatch):
    from srpo_agents.running.trackers import plain_when_piped

    with plain_when_piped():
        print("\x1b[1m\x1b[38;5;208m* dashboard at: http://x\x1b[0m")
    assert capsys.readouterr().out == "* dashboard at: http://x\n"
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    with plain_when_piped():
        print("\x1b[1mbold\x1b[0m")
    assert capsys.readouterr().out == "\x1b[1mbold\x1b[0m\n"
