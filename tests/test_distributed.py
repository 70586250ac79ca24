"""Data-parallel updates on FSDP2: 2 gloo processes under torchrun give the gradients and
the updated weights of the one-process update on the same batch (events sharded whole),
``srpo train --data-parallel`` trains alike on every rank, and its sharded checkpoints
resume exactly."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # make test-heavy runs it
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "scale" / "ddp_update.py"
LR = 1e-3


def _run(args, tmp_path, nproc: int = 1):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if nproc > 1:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                   str(nproc), "--master_addr", "127.0.0.1", "--master_port", str(port),
                   str(SCRIPT), *args]
    else:
        command = [sys.executable, str(SCRIPT), *args]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    # the ranks' own lines first (torchrun's summary of who failed comes after them)
    assert done.returncode == 0, "\n".join(
        line for line in done.stderr.splitlines() if "Loading weights" not in line)[:6000]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    _run(["prepare", "--out", str(root / "data"), "--tasks", "6", "--group", "3"], root)
    yield root
    shutil.rmtree(root, ignore_errors=True)  # every case's weights: 3 GB by the end


def _load(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "result.safetensors"))


@pytest.mark.parametrize(("fsdp", "first_units", "rows", "extra"), [
    ("full_shard", 0, 4, ()),  # FSDP2: weights, gradients, AdamW state split over 2 ranks
    ("no_shard", 0, 4, ()),    # FSDP2 replicating, as DDP does
    # 3 units of one row or more, 1 row a micro-batch: rank 0 runs 2 micro-batches,
    # rank 1 one, so rank 1 runs a padding micro-batch at weight 0 beside rank 0's second
    ("full_shard", 3, 1, ()),
    # one LoRA adapter per role over the frozen base, each row under its role's adapter
    ("full_shard", 0, 4, ("--lora",)),
    # a KL to the sharded reference: its gradient is 0 until the policy has moved, so
    # two updates
    ("full_shard", 0, 4, ("--beta", "0.5", "--updates", "2")),
    # the real model (on-policy rows), 6 units to keep it short
    ("full_shard", 6, 4, ("--model", "smollm2-135m-instruct")),
])
def test_two_gloo_ranks_equal_one_process(data, fsdp, first_units, rows, extra):
    """One optimizer step (two with the KL). The tolerance: the ranks sum their gradients
    in another order than one process does, so they agree to float32 rounding relative
    to the gradient's scale, not bit for bit (SmolLM2's sums over more and larger terms:
    1e-4 of its largest gradient entry)."""
    lora, steps = "--lora" in extra, 2 if "--updates" in extra else 1
    shape = ["--microbatch-rows", str(rows), "--first-units", str(first_units), *extra]
    tag = f"{first_units}-{rows}" + "".join(extra)
    one_dir, two_dir = data / f"one-{tag}", data / f"two-{fsdp}-{tag}"
    if not (one_dir / "result.safetensors").is_file():
        _run(["update", "--data", str(data / "data"), "--out", str(one_dir), *shape], data)
    _run(["update", "--data", str(data / "data"), "--out", str(two_dir), "--fsdp", fsdp,
          *shape], data, 2)
    one, two = _load(one_dir), _load(two_dir)
    assert set(one) == set(two)
    grads = [k for k in one if k.startswith("grad/")]
    scale = max(float(one[k].abs().max()) for k in grads) if grads else 0.0
    assert scale > 1e-3  # not vacuous
    atol = 1e-4 * scale if "--model" in extra else 1e-5
    for key in grads:
        torch.testing.assert_close(two[key], one[key], rtol=1e-3, atol=atol)
    # One AdamW step moves each weight by about lr * sign(grad): where the gradient is
    # clearly non-zero the two runs agree to rounding; a gradient within rounding of
    # zero can flip its sign, a difference of at most 2 * lr a step. A second step
    # divides by moments that carry the first step's rounding, which it magnifies where
    # a moment is small: then the gradients (above) and the bound are what must hold.
    if lora:  # only the adapters train; the base stays as loaded
        assert all("lora_" in k for k in grads)
    for key in [k for k in one if k.startswith("weight/")]:
        grad = one.get("grad/" + key.removeprefix("weight/"))
        if grad is None:  # frozen
            assert lora and torch.equal(two[key], one[key]), key
            continue
        clear = grad.abs() > 1e-4
        if steps == 1:
            torch.testing.assert_close(two[key][clear], one[key][clear], rtol=0, atol=1e-6)
        assert float((two[key] - one[key]).abs().max()) <= 2 * LR * steps + 1e-6


TRAIN = ["train", "--data-parallel", "--env", "SRPO-Countdown-v0", "--workflow", "parallel",
         "--n-agents", "2", "--group-size", "2", "--tasks-per-step", "4",
         "--eval-tasks", "4", "--eval-k", "2", "--max-new-tokens", "6", "--lr", "1e-3",
         # a token cost gives the episodes different returns, so the update moves weights
         "--cost-per-token", "0.01",
         "--model", "tiny", "--warmstart-steps", "2", "--warmstart-target", "1.0"]


def _train_on_two_ranks(out: Path, cwd: Path, *args: str, kill_at: str = ""
                        ) -> subprocess.CompletedProcess:
    """``srpo train`` on 2 gloo ranks under torchrun (``kill_at``: SRPO_KILL_AT of both)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "SRPO_CACHE_DIR": str(cwd / "cache")}
    if kill_at:
        env["SRPO_KILL_AT"] = kill_at
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(port), "-m", "srpo_agents.cli",
         *TRAIN, *args, "--out", str(out)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    # the ranks' own lines first (torchrun's summary of who failed comes after them)
    assert kill_at or done.returncode == 0, "\n".join(
        line for line in done.stderr.splitlines() if "Loading weights" not in line)[:6000]
    return done


def _rows(run: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if not k.endswith("seconds")}
            for x in (run / "metrics.jsonl").read_text().splitlines()]


def _state_of(folder: Path) -> dict[str, torch.Tensor]:
    """The saved weights and AdamW moments (not the gradients of the update that made them)."""
    return {k: v for k, v in _load(folder).items() if not k.startswith("grad/")}


def test_a_sharded_checkpoint_loads_into_any_number_of_ranks(data):
    """DCP keys the state by parameter name: 2 FSDP ranks' checkpoint restores one
    process's weights and AdamW moments bit for bit, and one process's restores 2 ranks';
    a step resumed from it on 1 or 2 ranks then agrees as the updates themselves do."""
    base = ["update", "--data", str(data / "data"), "--microbatch-rows", "4"]
    _run([*base, "--out", str(data / "ck2"), "--fsdp", "full_shard",
          "--save", str(data / "s2")], data, 2)
    _run([*base, "--out", str(data / "ck2-on-1"), "--updates", "0",
          "--load", str(data / "s2")], data)
    _run([*base, "--out", str(data / "ck1"), "--save", str(data / "s1")], data)
    _run([*base, "--out", str(data / "ck1-on-2"), "--updates", "0", "--fsdp", "full_shard",
          "--load", str(data / "s1")], data, 2)
    for saved, loaded in (("ck2", "ck2-on-1"), ("ck1", "ck1-on-2")):
        a, b = _state_of(data / saved), _state_of(data / loaded)
        assert set(a) == set(b) and any(k.startswith("adam/") for k in a)
        assert all(torch.equal(a[k], b[k]) for k in a), f"{saved} -> {loaded}"
    _run([*base, "--out", str(data / "resumed-1"), "--load", str(data / "s2")], data)
    _run([*base, "--out", str(data / "resumed-2"), "--fsdp", "full_shard",
          "--load", str(data / "s2")], data, 2)
    one, two = _load(data / "resumed-1"), _load(data / "resumed-2")
    for key in [k for k in one if k.startswith("grad/")]:
        torch.testing.assert_close(two[key], one[key], rtol=1e-3, atol=1e-5)


def test_a_damaged_sharded_checkpoint_is_named_and_a_kill_leaves_the_last_one(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from srpo_agents.running.checkpoint import CheckpointError
    from srpo_agents.running.sharded_checkpoint import load_sharded, save_sharded

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()
    folder = save_sharded(tmp_path / "step-1", model, optimizer, {"step": 1})
    (tmp_path / ".tmp-step-2").mkdir()  # a kill mid-write of the next one
    fresh = Qwen2ForCausalLM(model.config)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    assert load_sharded(folder, fresh, fresh_optimizer) == {"step": 1}
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 fresh.state_dict().values(), strict=True))
    save_sharded(tmp_path / "step-2", model, optimizer, {"step": 2})
    assert not list(tmp_path.glob(".tmp-*"))  # swept
    shard = next(folder.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-7])
    with pytest.raises(CheckpointError, match=rf"{shard.name} is missing, truncated or corrupt"):
        load_sharded(folder, fresh, fresh_optimizer)


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory):
    """3 steps of ``srpo train --data-parallel`` on 2 ranks, checkpointed every step: FSDP2's
    default strategy (full_shard) and no_shard (replicated, as DDP)."""
    root = tmp_path_factory.mktemp("fsdp-train")
    for name, extra in (("fsdp", ()), ("no-shard", ("--fsdp", "no_shard"))):
        _train_on_two_ranks(root / name, root, "--steps", "3", "--save-every", "1", *extra)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _policy(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run / "policy" / "model.safetensors"))


def test_srpo_train_under_torchrun_trains_alike_on_every_rank(fsdp_runs):
    """Two ranks play half the tasks each, gather the episodes and update together: both
    record the same metrics, the weights move, and both strategies make the same run
    (same episodes: both generate from whole weights; same update to float32 rounding:
    a reduce-scatter sums in another order than an all-reduce)."""
    from safetensors.torch import load_file

    fsdp, replicated = fsdp_runs / "fsdp", fsdp_runs / "no-shard"
    for run in (fsdp, replicated):
        assert _rows(run) == _rows(run / "rank-1")
        assert json.loads((run / "config.json").read_text())["fsdp"] in ("", "no_shard")
    assert [r["events"] for r in _rows(fsdp)] == [16, 16, 16]  # 4 tasks x 2 episodes x 2
    assert all(r["grad_norm"] > 0 for r in _rows(fsdp))
    for a, b in zip(_rows(fsdp), _rows(replicated), strict=True):
        assert a["events"] == b["events"] and a["accuracy"] == b["accuracy"]
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    # rank 0 wrote the gathered weights as transformers' folder; every rank its own RNGs
    one, two = _policy(fsdp), _policy(replicated)
    assert set(one) == set(two)
    for key in one:
        torch.testing.assert_close(one[key], two[key], rtol=0, atol=1e-5)
    start = load_file(str(fsdp / "warmstart" / "model.safetensors"))
    assert any(not torch.equal(one[k], v) for k, v in start.items() if k in one)
    assert sorted(p.name for p in (fsdp / "checkpoints-sharded").iterdir()) == [
        "step-00000002", "step-00000003"]  # the last two kept
    assert (fsdp / "rank-1" / "checkpoints" / "step-00000003" / "state.json").is_file()


def test_ranks_started_by_ray_make_the_torchrun_run(fsdp_runs):
    """``--ray-ranks 2``: two Ray actors each run one rank with torchrun's environment;
    the run is the torchrun run, metrics and trained weights bit for bit."""
    pytest.importorskip("ray", reason="the ray extra is not installed (make test installs it)")
    out = fsdp_runs / "ray"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "SRPO_CACHE_DIR": str(fsdp_runs / "cache"), "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "srpo_agents.cli", *TRAIN, "--steps", "3", "--save-every", "1",
         "--ray-ranks", "2", "--out", str(out)],
        cwd=fsdp_runs, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "ray: 2 ranks on 1 node(s), CPU" in done.stderr
    assert _rows(out) == _rows(out / "rank-1") == _rows(fsdp_runs / "fsdp")
    one, two = _policy(out), _policy(fsdp_runs / "fsdp")
    assert set(one) == set(two) and all(torch.equal(one[k], two[k]) for k in one)


@pytest.mark.parametrize("point", ["update@1", "checkpoint@1"])
def test_a_killed_fsdp_run_resumes_to_the_uninterrupted_one(fsdp_runs, point):
    """SIGKILL on both ranks mid-update, or after step 2's sharded weights were saved but
    before the ranks' own parts were: the resumed run's metrics and final weights are the
    uninterrupted run's, bit for bit (a step lacking a part is not resumed from)."""
    run = fsdp_runs / f"killed-{point.replace('@', '-')}"
    args = ("--steps", "3", "--save-every", "1", "--fsdp", "full_shard")
    killed = _train_on_two_ranks(run, fsdp_runs, *args, kill_at=point)
    assert killed.returncode != 0 and not (run / "summary.json").exists()
    if point.startswith("checkpoint"):
        assert (run / "checkpoints-sharded" / "step-00000002" / "state.json").is_file()
        assert not (run / "checkpoints" / "step-00000002").exists()
    resumed = _train_on_two_ranks(run, fsdp_runs, *args, "--resume")
    assert "resumed from" in resumed.stdout + resumed.stderr
    assert "step-00000001" in resumed.stdout + resumed.stderr
    assert _rows(run) == _rows(fsdp_runs / "fsdp")
    one, two = _policy(run), _policy(fsdp_runs / "fsdp")
    assert all(torch.equal(one[k], two[k]) for k in one)


def test_a_forward_without_backward_leaves_no_gathered_weight_for_the_update(tmp_path):
    """FSDP2 keeps the root's layers gathered after a forward that no backward follows;
    ``reshard_all`` (which the learner calls before reading its parameters) puts every
    layer back to its shards, so no reference points at storage FSDP frees later."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from srpo_agents.models.sharding import reshard_all, shard

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        torch.manual_seed(0)
        model = shard(Qwen2ForCausalLM(Qwen2Config(
            vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)),
            "full_shard")
        with torch.no_grad():
            model(torch.tensor([[1, 2, 3]]))
        gathered = [n for n, p in model.named_parameters() if not isinstance(p, DTensor)]
        assert gathered  # the root's (embedding, final norm) after a forward alone
        reshard_all(model)
        assert all(isinstance(p, DTensor) for p in model.parameters())
    finally:
        dist.destroy_process_group()


def test_a_run_checkpointed_before_fsdp_says_so_instead_of_starting_over(tmp_path):
    """A data-parallel run folder of the all-reduce days holds whole weights in every
    rank's own checkpoints and no sharded ones: ``--resume`` names that, rather than
    start from step 0 over the run's files."""
    import random

    from srpo_agents.running.checkpoint import CheckpointError, save_checkpoint
    from srpo_agents.running.sharded_checkpoint import ShardedCheckpoints

    generators = {"task_rng": random.Random(0)}
    save_checkpoint(tmp_path, policies={}, optimizers={}, step=2, config={},
                    generators=generators)
    with pytest.raises(CheckpointError, match=r"steps \[2\] hold whole weights"):
        ShardedCheckpoints(tmp_path, tmp_path, None, None, generators).load()
    fresh = tmp_path / "fresh"
    assert ShardedCheckpoints(fresh, fresh, None, None, generators).load() is None


def _adapters(run: Path) -> dict[str, torch.Tensor]:
    """Every role's LoRA weights in a run's policy folder (PEFT's files)."""
    from safetensors.torch import load_file

    files = sorted((run / "policy").glob("*/adapter_model.safetensors"))
    return {f"{f.parent.name}/{k}": v for f in files for k, v in load_file(str(f)).items()}


def test_role_adapters_train_on_two_ranks_and_a_kill_resumes_exactly(tmp_path):
    """``--per-role-adapters lora`` under FSDP2: one frozen base, one adapter a role,
    sharded with it. Both ranks log the same run, only the adapters are checkpointed
    (the base is reloaded by name), the policy folder is PEFT's one folder a role, and
    a SIGKILL mid-update resumes to the uninterrupted run bit for bit."""
    from srpo_agents.models.policy import load_policy

    args = ("--steps", "3", "--save-every", "1", "--per-role-adapters", "lora")
    whole = tmp_path / "lora"
    _train_on_two_ranks(whole, tmp_path, *args)
    assert _rows(whole) == _rows(whole / "rank-1")
    assert all(r["grad_norm"] > 0 for r in _rows(whole))
    adapters = _adapters(whole)
    roles = json.loads((whole / "policy" / "role_adapters.json").read_text())["roles"]
    assert len(roles) >= 2 and {k.split("/")[0] for k in adapters} == set(roles)
    assert any(float(v.abs().max()) > 0 for k, v in adapters.items() if "lora_B" in k)
    assert load_policy(str(whole / "policy")).adapter_roles == tuple(roles)
    # the sharded checkpoint holds the adapters and their AdamW moments, not the base
    from torch.distributed.checkpoint import FileSystemReader

    step = whole / "checkpoints-sharded" / "step-00000003"
    keys = list(FileSystemReader(str(step)).read_metadata().state_dict_metadata)
    weights = [k for k in keys if k.startswith("model.")]
    assert weights and all("lora_" in k for k in weights), weights[:3]
    assert any(k.startswith("optimizer.state.") and "lora_" in k for k in keys)

    killed = tmp_path / "killed"
    assert _train_on_two_ranks(killed, tmp_path, *args, kill_at="update@1").returncode != 0
    _train_on_two_ranks(killed, tmp_path, *args, "--resume")
    assert _rows(killed) == _rows(whole)
    resumed = _adapters(killed)
    assert set(resumed) == set(adapters)
    assert all(torch.equal(resumed[k], adapters[k]) for k in adapters)


def test_ray_ranks_take_gpus_and_local_ranks_as_torchrun_would():
    from srpo_agents.running.ray_ranks import local_ranks, wants_gpus

    assert wants_gpus("cuda", 0, 2) and wants_gpus("cuda:0", 8, 2)
    assert wants_gpus("auto", 8, 8) and not wants_gpus("auto", 4, 8)
    assert not wants_gpus("cpu", 8, 2)
    # a rank that sees only its own GPU indexes it as 0; CPU ranks count on their node
    assert local_ranks(["a", "a", "b"], [True, True, True]) == [0, 0, 0]
    assert local_ranks(["a", "b", "a", "a"], [False] * 4) == [0, 0, 1, 2]
