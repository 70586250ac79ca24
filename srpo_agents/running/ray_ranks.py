"""The ranks of a data-parallel run started by Ray instead of torchrun
(``srpo train --data-parallel --ray-ranks N``; extra ``ray``).

Each rank is one Ray actor that runs the very command the user typed, in a process of
its own, with the environment torchrun would give it (``MASTER_ADDR``/``MASTER_PORT`` of
rank 0's node, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``). The run is then the torchrun
run: the same process group, FSDP2 learner and checkpoints, so the same metrics.

Deliberate choices:
- **A process a rank, not the actor itself**: a rank ends with ``os._exit``
  (``sharding.end_rank``) and may be killed by a fault; the actor outlives it and
  reports its exit code.
- **GPUs from Ray**: with CUDA asked for (``--device cuda``, or "auto" on a cluster that
  has GPUs) every actor takes one GPU, and Ray makes it the only one the rank sees, so
  its ``LOCAL_RANK`` is 0; on the CPU the local rank counts the ranks on its node.
- **One failure stops the run**: when a rank exits non-zero the others are killed
  (they would wait in their next collective until its timeout), and the launcher
  returns that exit code. ``--resume`` continues from the last whole checkpoint.
- **A shared file system**: rank 0's folder holds the sharded checkpoints every rank
  reads and writes, so ``--out`` must be one path on every node (the ranks start in the
  launcher's working directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

FORWARDED = ("PYTHONPATH", "OMP_NUM_THREADS", "HF_HOME", "SRPO_CACHE_DIR", "SRPO_KILL_AT",
             "SRPO_DATA_DIR")
"""The launcher's environment variables every rank gets (when set): where code, data and
caches are, and the fault-injection hook the tests use."""


class _Rank:
    """One rank's place on the cluster (wrapped as a Ray actor by ``launch``)."""

    def __init__(self):
        self.process: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def node(self) -> tuple[str, int, bool]:
        """This node's address, a free port on it, and whether Ray gave this actor a GPU."""
        import ray

        from srpo_agents.rollout.weight_sync import free_port

        return ray.util.get_node_ip_address(), free_port(), bool(ray.get_gpu_ids())

    def run(self, argv: list[str], env: dict[str, str], cwd: str) -> int:
        with self.lock:
            self.process = subprocess.Popen([sys.executable, "-m", "srpo_agents.cli", *argv],
                                            env={**os.environ, **env}, cwd=cwd)
        return self.process.wait()

    def stop(self) -> None:
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                self.process.kill()


def wants_gpus(device: str, cluster_gpus: float, ranks: int) -> bool:
    """Whether each rank takes a GPU: --device names CUDA, or "auto" and the cluster has
    one for every rank."""
    if device.startswith("cuda"):
        return True
    return device == "auto" and cluster_gpus >= ranks


def local_ranks(nodes: list[str], gpus: list[bool]) -> list[int]:
    """Each rank's LOCAL_RANK: 0 for a rank that sees only its own GPU (Ray set its
    CUDA_VISIBLE_DEVICES), else its index among the ranks on its node."""
    seen: dict[str, int] = {}
    out = []
    for node, gpu in zip(nodes, gpus, strict=True):
        out.append(0 if gpu else seen.get(node, 0))
        seen[node] = seen.get(node, 0) + 1
    return out


def launch(argv: list[str], ranks: int, device: str, address: str = "",
           log=print) -> int:
    """Run ``srpo <argv>`` as ``ranks`` ranks on Ray actors; the ranks' largest exit
    code (0 when every rank finished)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if not ray.is_initialized():
        ray.init(address=address or None, include_dashboard=False, configure_logging=False)
    gpus = wants_gpus(device, ray.cluster_resources().get("GPU", 0.0), ranks)
    actor = ray.remote(_Rank).options(num_cpus=1, num_gpus=1 if gpus else 0,
                                      max_concurrency=2, max_restarts=0)
    actors = [actor.remote() for _ in range(ranks)]
    try:
        nodes = ray.get([a.node.remote() for a in actors])
        master, port, _ = nodes[0]
        locals_ = local_ranks([n[0] for n in nodes], [n[2] for n in nodes])
        shared = {k: os.environ[k] for k in FORWARDED if k in os.environ}
        log(f"ray: {ranks} ranks on {len({n[0] for n in nodes})} node(s), "
            f"{'a GPU each' if gpus else 'CPU'}, rank 0 at {master}:{port}")
        running = {a.run.remote(argv, {**shared, "MASTER_ADDR": master,
                                       "MASTER_PORT": str(port), "RANK": str(rank),
                                       "WORLD_SIZE": str(ranks),
                                       "LOCAL_RANK": str(locals_[rank])}, os.getcwd()): rank
                   for rank, a in enumerate(actors)}
        codes: dict[int, int] = {}
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            rank = running.pop(done[0])
            codes[rank] = ray.get(done[0])
            if codes[rank] != 0 and running:
                log(f"ray: rank {rank} exited with code {codes[rank]}; stopping the others")
                ray.get([actors[r].stop.remote() for r in running.values()])
        worst = max(codes.values(), key=abs)
        return worst if worst >= 0 else 128 - worst  # a signal, as a shell reports it
    finally:
        for a in actors:
            ray.kill(a)
