"""Rollouts on Ray actors (extra ``ray``): one worker reproduces the in-process run
exactly, two workers train, a worker killed mid-rollout is replaced and its episodes are
dropped whole and counted (and replaced once with two submissions in flight), per-role
sampling reaches the workers, and workers spread over a two-node cluster on this host.
Everything Ray writes stays under the test's temporary folder."""

import json
import os
import tempfile

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

from srpo_agents.config import TrainConfig  # noqa: E402
from srpo_agents.running.train import train  # noqa: E402
from srpo_agents.tiny.config import tiny_run  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # make test-heavy runs it
BASE = dict(env="SRPO-Countdown-v0", workflow="parallel", n_agents=2, group_size=2,
            tasks_per_step=4, eval_tasks=4, eval_k=2, max_new_tokens=6, lr=1e-3,
            warmstart_steps=2, warmstart_target=1.0, save_every=0)


def _start(**kwargs):
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # a short path: Ray's sockets live there and a Unix socket path is limited to ~107 bytes
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
             _temp_dir=tempfile.mkdtemp(prefix="srpo-ray-", dir="/tmp"), **kwargs)


@pytest.fixture(scope="module")
def local_ray():
    # worker 1 kills itself mid-generation at step 1: only the two-worker test has one
    os.environ["SRPO_KILL_AT"] = "worker1:generation@1"  # inherited by the workers
    _start(num_cpus=2)
    yield
    ray.shutdown()
    del os.environ["SRPO_KILL_AT"]


def _rows(run):
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("seconds")}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("weight_sync", ["collective", "object_store"])
def test_one_worker_reproduces_the_in_process_run(local_ray, tmp_path, weight_sync):
    """By either weight path the worker's float32 copy is the learner's, bit for bit."""
    import torch

    from srpo_agents.running.evaluate import evaluate_start

    warm = str(tmp_path / "warm")
    config = TrainConfig(**tiny_run(BASE, steps=2, warmstart_dir=warm, out=str(tmp_path / "a2")))
    # the same start (the before evaluation shared), so both samplers start fresh alike;
    # one torch thread, as in the worker, so the matmuls round alike
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        before = evaluate_start(config, log=lambda *_: None)
        train(config, log=lambda *_: None, before=before)
        # pi_old from the sampler, as in process: a worker's copy on this CPU in float32
        # computes what the learner does ("auto" assumes another device may not)
        train(TrainConfig(**tiny_run(BASE, steps=2, warmstart_dir=warm, out=str(tmp_path / "b"),
                          rollout_workers=1, pi_old="sampler", weight_sync=weight_sync)),
              log=lambda *_: None,
              before=before)
    finally:
        torch.set_num_threads(threads)
    in_process, workers = _rows(tmp_path / "a2"), _rows(tmp_path / "b")
    assert [r["episodes_lost"] for r in workers] == [0, 0]
    assert [{k: v for k, v in r.items() if k not in ("episodes_lost", "worker_restarts")}
            for r in workers] == in_process


def test_two_workers_train_and_a_killed_worker_is_replaced(local_ray, tmp_path):
    train(TrainConfig(**tiny_run(BASE, steps=3, warmstart_dir=str(tmp_path / "warm"),
                      out=str(tmp_path / "run"), rollout_workers=2)), log=lambda *_: None)
    rows = _rows(tmp_path / "run")
    episodes = BASE["tasks_per_step"] * BASE["group_size"]  # 8, two events each
    # worker 1 held tasks 1 and 3 (4 episodes): killed mid-generation at step 1
    assert [r["episodes_lost"] for r in rows] == [0, 4, 0]
    assert [r["worker_restarts"] for r in rows] == [0, 1, 1]
    assert [r["events"] for r in rows] == [2 * episodes, 2 * (episodes - 4), 2 * episodes]
    assert all(r["updates"] >= 1 and r["events_dropped"] == 0 for r in rows)


def test_workers_spread_over_a_two_node_cluster(tmp_path):
    from ray.cluster_utils import Cluster

    from srpo_agents.rollout.envs import env_factory
    from srpo_agents.rollout.ray_engine import RayRolloutEngine
    from srpo_agents.tiny import build_tiny_policy

    ray.shutdown()  # the module's local instance, if a test before this one started it
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    root = tempfile.mkdtemp(prefix="srpo-ray-", dir="/tmp")
    os.environ["RAY_TMPDIR"] = root  # Ray's own files (the cluster address) go here too
    os.makedirs(os.path.join(root, "ray"))
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "temp_dir": root})
    cluster.add_node(num_cpus=1)
    try:
        # the engine joins the cluster itself, as srpo train --ray-address does
        config = TrainConfig(**tiny_run(BASE, steps=1, out=str(tmp_path / "run"), rollout_workers=2,
                             ray_address=cluster.address))
        env = env_factory(config, "train")(0)
        policy = build_tiny_policy([env.reset()[0]["proposer_0"], "0123456789+-*/()"],
                                   tmp_path / "tiny", hidden_size=32, num_layers=1,
                                   num_heads=2)
        assert not ray.is_initialized()
        engine = RayRolloutEngine(config, policy, 2, address=config.ray_address, spread=True)
        assert ray.is_initialized() and len(ray.nodes()) == 2
        assert len(set(engine.node_ids())) == 2  # one worker on each node
        options = [{"task_index": t, "episode_id": f"t{t}-g{g}"} for t in range(4)
                   for g in range(2)]
        rollouts = engine.run(None, options)
        assert [r.episode_id for r in rollouts] == [o["episode_id"] for o in options]
        assert all(len(r.transitions) == 2 and r.samples for r in rollouts)
        engine.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()
        del os.environ["RAY_TMPDIR"]


def test_per_role_sampling_reaches_the_workers(local_ray, tmp_path):
    """``--role-sampling`` travels in the config the workers build their engine from: the
    aggregator samples at its own temperature and length limit, the solvers at the
    run's."""
    from srpo_agents.rollout.envs import env_factory
    from srpo_agents.rollout.ray_engine import RayRolloutEngine
    from srpo_agents.tiny import build_tiny_policy

    config = TrainConfig(**tiny_run(
        BASE, steps=1, out=str(tmp_path / "run"), rollout_workers=1, temperature=1.0,
        role_sampling={"aggregator": {"temperature": 0.5, "max_new_tokens": 2}}))
    env = env_factory(config, "train")(0)
    policy = build_tiny_policy([env.reset()[0]["proposer_0"], "0123456789+-*/()"],
                               tmp_path / "tiny", hidden_size=32, num_layers=1, num_heads=2)
    engine = RayRolloutEngine(config, policy, 1)
    try:
        rollouts = engine.run(None, [{"task_index": t, "episode_id": f"t{t}-g{g}"}
                                     for t in range(4) for g in range(2)])
    finally:
        engine.shutdown()
    samples = [s for r in rollouts for s in r.samples.values()]
    aggregators = [s for s in samples if s.role == "aggregator"]
    solvers = [s for s in samples if s.role == "solver"]
    assert aggregators and solvers
    assert {s.temperature for s in aggregators} == {0.5}
    assert {s.temperature for s in solvers} == {1.0}
    assert max(len(s.response_ids) for s in aggregators) <= 2
    assert max(len(s.response_ids) for s in solvers) > 2  # the run's limit, 6


def test_async_rollouts_on_a_worker(local_ray, tmp_path):
    """Asynchronous SRPO with the Ray workers as the rollout side: step s + 1's episodes
    are played by the worker with version s's weights while step s updates."""
    config = TrainConfig(**tiny_run(BASE, steps=3, warmstart_dir=str(tmp_path / "warm"),
                                    out=str(tmp_path / "async"), rollout_workers=1,
                                    max_staleness=1))
    summary = train(config, log=lambda *_: None)
    rows = [json.loads(line) for line in (tmp_path / "async" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [r["generated_with_version"] for r in rows] == [0, 0, 1]
    assert [r["staleness_hist"] for r in rows] == [[rows[0]["units"]], [0, rows[1]["units"]],
                                                   [0, rows[2]["units"]]]
    assert all(r["sets_dropped_stale"] == 0 and "mismatch_kl" in r for r in rows)
    assert summary["after"]["tasks"] == 4


def test_a_worker_dying_with_two_submissions_in_flight_is_replaced_once(local_ray, tmp_path):
    """Two steps off, the batches of steps 3 and 4 are both on worker 1 when it dies
    playing step 3's (it was sent at step 1: the kill point): both batches lose its
    episodes, and the worker is replaced once, not once per failed submission (the
    second replacement would kill the healthy new worker)."""
    config = TrainConfig(**tiny_run(BASE, steps=5, warmstart_dir=str(tmp_path / "warm"),
                                    out=str(tmp_path / "run"), rollout_workers=2,
                                    max_staleness=2))
    train(config, log=lambda *_: None)
    rows = _rows(tmp_path / "run")
    assert [r["episodes_lost"] for r in rows] == [0, 0, 0, 4, 4]
    assert [r["worker_restarts"] for r in rows] == [0, 0, 0, 1, 1]
    assert [r["generated_with_version"] for r in rows] == [0, 0, 0, 1, 2]
