"""Updated weights to Ray rollout workers: a broadcast over the learner-workers group
(``--weight-sync collective``) against Ray's object store (``--weight-sync
object_store``), for SmolLM2-135M-Instruct on this machine's CPU.

    python benchmarks/scale/weight_sync_speed.py [--workers 1] [--repeats 3]

Each repeat changes the learner's weights (a new version) and times one delivery by
each path, interleaved, until every worker holds them: the collective path is
``RayRolloutEngine.push_weights`` (the workers receive while the learner broadcasts,
float32 on the CPU); the object-store path is what ``submit`` did for every update,
``ray.put`` of a CPU copy of the state dict, then each worker's ``load_state_dict``
of it. Afterwards each worker's weights are compared with the learner's. Writes
``benchmarks/results/weight_sync_speed.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parents[1] / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from srpo_agents.config import TrainConfig
    from srpo_agents.models.policy import load_policy
    from srpo_agents.rollout.ray_engine import RayRolloutEngine

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False, _temp_dir=tempfile.mkdtemp(prefix="srpo-ray-", dir="/tmp"))
    policy = load_policy(args.model)
    config = TrainConfig(env="SRPO-Math-v0", workflow="solve_verify", model=args.model,
                         rollout_workers=args.workers, tasks_per_step=1, group_size=2)
    engine = RayRolloutEngine(config, policy, args.workers)
    times: dict[str, list[float]] = {"collective": [], "object store": []}
    for _ in range(args.repeats):
        for path in times:
            with torch.no_grad():  # a new version of the weights
                next(policy.model.parameters()).add_(1e-3)
            engine.policy_version += 1
            tick = time.perf_counter()
            if path == "collective":
                engine.push_weights()
            else:
                state = {k: v.detach().cpu() for k, v in policy.model.state_dict().items()}
                ref = ray.put(state)
                ray.get([w.load_weights.remote(ref) for w in engine.workers])
            times[path].append(time.perf_counter() - tick)
    mine = [float(t.double().sum()) for t in policy.model.state_dict().values()]
    digests = ray.get([w.weights_digest.remote() for w in engine.workers])
    assert all(d == mine for d in digests), "a worker's weights differ from the learner's"
    engine.shutdown()
    ray.shutdown()
    nbytes = sum(t.numel() * t.element_size() for t in policy.model.parameters())
    result = {"model": args.model, "workers": args.workers, "repeats": args.repeats,
              "parameter_bytes": nbytes, "seconds": times,
              "ratio_collective_to_object_store": statistics.median(times["collective"])
              / statistics.median(times["object store"])}
    (RESULTS / "weight_sync_speed.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Weights to Ray rollout workers: a collective against the object store", "",
             f"`python benchmarks/scale/weight_sync_speed.py --workers {args.workers} --repeats "
             f"{args.repeats}`: {args.model} ({nbytes / 2**20:.0f} MiB of float32 "
             f"weights), {args.workers} worker(s) on this machine's 2 CPU cores, gloo; "
             "each delivery timed until every worker holds the new weights, the two paths "
             "interleaved; every worker's weights then equal the learner's. Measured "
             "while a SmolLM2 training run shared the cores: read the ratio.", "",
             "| path | seconds a delivery | median |", "|---|---:|---:|"]
    for path, values in times.items():
        lines.append(f"| {path} | {', '.join(f'{v:.2f}' for v in values)} | "
                     f"{statistics.median(values):.2f} |")
    lines += ["", f"Collective / object store: "
              f"{result['ratio_collective_to_object_store']:.2f} (medians)."]
    (RESULTS / "weight_sync_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
