"""One learner update, in one process or data-parallel under ``torchrun`` (gloo on CPU):
the gradients and updated weights, and the update's time.

    python benchmarks/scale/ddp_update.py prepare --out runs/ddp --tasks 32 --group 4
    python benchmarks/scale/ddp_update.py update --data runs/ddp --out runs/ddp/one
    torchrun --nproc_per_node 2 benchmarks/scale/ddp_update.py update --data runs/ddp \\
        --out runs/ddp/two
    python benchmarks/scale/ddp_update.py compare runs/ddp/one runs/ddp/two

``prepare`` builds a tiny policy and samples Countdown episodes with it (written with
``srpo_agents.rollout.files``), plus their SRPO advantages. ``update`` runs one
``Learner.update`` on them (``data_parallel`` when ``WORLD_SIZE`` > 1: the learner on
FSDP2, each mini-batch sharded by whole events, the gradients summed over the ranks; the
all-reduce this script first measured, ``results/ddp_update.md``, is gone) and rank 0 writes
the gradients, the updated weights and the seconds the update took. ``compare`` prints
the largest differences and the time ratio. ``tests/test_distributed.py`` runs the same
steps on a small batch.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch


def prepare(out: Path, tasks: int, group: int, seed: int = 0) -> None:
    from srpo_agents.config import TrainConfig
    from srpo_agents.learning.events import build_units
    from srpo_agents.learning.objective import ADVANTAGE_ESTIMATORS, ALGORITHMS
    from srpo_agents.rollout.engine import RolloutEngine
    from srpo_agents.rollout.envs import env_factory
    from srpo_agents.rollout.files import write_rollouts
    from srpo_agents.tiny import build_tiny_policy

    out.mkdir(parents=True, exist_ok=True)
    config = TrainConfig(env="SRPO-Countdown-v0", workflow="parallel", n_agents=3,
                         max_new_tokens=12)
    make = env_factory(config, "train")
    envs = [make(seed + i) for i in range(tasks * group)]
    texts = [envs[0].reset(options={"task_index": i})[0]["proposer_0"] for i in range(50)]
    policy = build_tiny_policy(texts + ["0123456789+-*/() Final: P"], out / "policy",
                               seed=seed)
    engine = RolloutEngine(policy, max_new_tokens=12, seed=seed)
    options = [{"task_index": t, "episode_id": f"t{t}-g{g}"}
               for t in range(tasks) for g in range(group)]
    rollouts = engine.run(envs, options)
    write_rollouts(rollouts, out / "rollouts.jsonl")
    algorithm = ALGORITHMS["srpo"]
    units, _ = build_units(rollouts, algorithm.unit)
    advantages = ADVANTAGE_ESTIMATORS[algorithm.advantage]([u.info for u in units])
    # a spread so the update has a gradient even when the tiny policy's groups all tie
    advantages = advantages + np.linspace(-1.0, 1.0, len(units))
    np.save(out / "advantages.npy", advantages)
    print(f"prepared {len(rollouts)} episodes, {len(units)} events in {out}")


def _rss_gib() -> float:
    """This process's resident memory now, GiB (Linux)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def _peak_rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _state_gib(model, optimizer) -> float:
    """This rank's own bytes of weights and AdamW state (its shards under FSDP), GiB."""
    from srpo_agents.models.sharding import local

    tensors = [local(p.detach()) for p in model.parameters()]
    tensors += [local(v) for state in optimizer.state.values() for v in state.values()
                if torch.is_tensor(v) and v.dim() > 0]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**30


def update(data: Path, out: Path, minibatch_episodes: int, microbatch_rows: int,
           fsdp: str = "full_shard", first_units: int = 0, updates: int = 1,
           load: Path | None = None, save: Path | None = None,
           model: str = "", lora: bool = False, beta: float = 0.0) -> None:
    from safetensors.torch import save_file

    from srpo_agents.learning.events import build_units
    from srpo_agents.learning.learner import Learner, LearnerConfig, init_data_parallel
    from srpo_agents.learning.objective import ALGORITHMS
    from srpo_agents.models.policy import load_policy
    from srpo_agents.models.sharding import end_rank, full
    from srpo_agents.rollout.files import read_rollouts

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = init_data_parallel()[0] if world > 1 else 0
    torch.manual_seed(0)
    # another model on the same token rows (e.g. SmolLM2: the tiny vocabulary's ids are
    # valid ids of any larger one), for its time and memory
    policy = load_policy(model or str(data / "policy"))
    algorithm = ALGORITHMS["srpo"]
    units, _ = build_units(read_rollouts(data / "rollouts.jsonl"), algorithm.unit)
    advantages = np.load(data / "advantages.npy")
    if first_units:  # e.g. an odd number, which the ranks cannot split evenly
        units, advantages = units[:first_units], advantages[:first_units]
    if lora:  # one LoRA adapter per role, the base frozen (per_role_adapters="lora")
        from srpo_agents.models.adapters import attach_role_adapters

        roles = sorted({m.role for unit in units for m in unit.members})
        policy = attach_role_adapters(policy, roles, rank=4, alpha=8.0)
    learner = Learner(policy, algorithm,
                      LearnerConfig(lr=1e-3, minibatch_episodes=minibatch_episodes,
                                    microbatch_rows=microbatch_rows, max_grad_norm=1e9,
                                    pi_old="sampler", beta=beta,
                                    data_parallel=world > 1,
                                    fsdp=fsdp if world > 1 else ""), seed=0)
    if model:  # on-policy for this model: its own log-probs as the sampler's (the
        # rows' are the tiny policy's, whose ratio to any other model is ~0)
        samples = [m for unit in units for m in unit.members]
        for sample, logprobs in zip(samples, learner._rows_without_grad(samples),
                                    strict=True):
            sample.logprobs = logprobs
    grads: dict[str, torch.Tensor] = {}
    step = learner.optimizer.step

    def recording_step(*args, **kwargs):
        for name, parameter in policy.model.named_parameters():
            if parameter.grad is not None:  # whole (gathered) under FSDP, on every rank
                grads[name] = grads.get(name, 0) + full(parameter.grad.detach()).clone()
        return step(*args, **kwargs)

    learner.optimizer.step = recording_step
    if load:  # a sharded checkpoint, of any number of ranks
        from srpo_agents.running.sharded_checkpoint import load_sharded

        load_sharded(load, policy.model, learner.optimizer)
    rss_before = _rss_gib()
    start = time.perf_counter()
    metrics = {"updates": 0}
    for _ in range(updates):
        metrics = learner.update(units, advantages)
    seconds = time.perf_counter() - start
    memory = {"rss_before_gib": rss_before, "peak_rss_gib": _peak_rss_gib(),
              "state_gib": _state_gib(policy.model, learner.optimizer)}
    ranks = [memory]
    if world > 1:
        import torch.distributed as dist

        ranks = [None] * world
        dist.all_gather_object(ranks, memory)
    if save:
        from srpo_agents.running.sharded_checkpoint import save_sharded

        save_sharded(save, policy.model, learner.optimizer, {"updates": updates})
    moments = {f"adam/{k}": full(v["exp_avg"]).clone()  # AdamW's first moment, whole
               for k, v in _named_moments(policy.model, learner.optimizer).items()}
    weights = {k: full(v.detach()).clone() for k, v in policy.model.named_parameters()}
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        save_file({f"grad/{k}": v.contiguous() for k, v in grads.items()}
                  | {f"weight/{k}": v.contiguous() for k, v in weights.items()}
                  | {k: v.contiguous() for k, v in moments.items()},
                  str(out / "result.safetensors"))
        (out / "result.json").write_text(json.dumps(
            {"world": world, "seconds": seconds, "units": len(units),
             "updates": metrics["updates"], "threads": torch.get_num_threads(),
             "fsdp": fsdp if world > 1 else "", "model": model or "tiny", "lora": lora, "beta": beta,
             "ranks": ranks}))
    if world > 1:
        end_rank()


def _named_moments(model, optimizer) -> dict:
    """AdamW's state by parameter name (empty before the first step)."""
    return {name: optimizer.state[p] for name, p in model.named_parameters()
            if p in optimizer.state and "exp_avg" in optimizer.state[p]}


def compare(one: Path, two: Path) -> dict:
    from safetensors.torch import load_file

    a, b = load_file(str(one / "result.safetensors")), load_file(str(two / "result.safetensors"))
    assert set(a) == set(b), "the runs saved different tensors"
    worst = {kind: max(float((a[k] - b[k]).abs().max()) for k in a if k.startswith(kind))
             for kind in ("grad/", "weight/")}
    scale = max(float(a[k].abs().max()) for k in a if k.startswith("grad/"))
    ta, tb = (json.loads((d / "result.json").read_text()) for d in (one, two))
    result = {"max_grad_difference": worst["grad/"], "max_grad": scale,
              "max_weight_difference": worst["weight/"],
              "seconds": {f"{ta['world']} process(es)": ta["seconds"],
                          f"{tb['world']} process(es)": tb["seconds"]},
              "ratio": tb["seconds"] / ta["seconds"], "units": ta["units"]}
    print(json.dumps(result, indent=2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare", help="tiny policy, sampled episodes, advantages")
    p.add_argument("--out", required=True)
    p.add_argument("--tasks", type=int, default=32)
    p.add_argument("--group", type=int, default=4)
    u = commands.add_parser("update", help="one update (data-parallel under torchrun)")
    u.add_argument("--data", required=True)
    u.add_argument("--out", required=True)
    u.add_argument("--minibatch-episodes", type=int, default=0)
    u.add_argument("--microbatch-rows", type=int, default=16)
    u.add_argument("--fsdp", default="full_shard", choices=["full_shard", "no_shard"],
                   help="under torchrun: how FSDP2 shards the learner")
    u.add_argument("--first-units", type=int, default=0, help="only the first N units")
    u.add_argument("--updates", type=int, default=1, help="updates on the batch (0: none)")
    u.add_argument("--load", default=None, help="a sharded checkpoint to start from")
    u.add_argument("--save", default=None, help="save a sharded checkpoint at the end")
    u.add_argument("--model", default="", help="another model on the same token rows "
                   "(a name or folder; default: the prepared tiny policy)")
    u.add_argument("--lora", action="store_true", help="one LoRA adapter per role")
    u.add_argument("--beta", type=float, default=0.0, help="KL to the starting policy")
    c = commands.add_parser("compare", help="differences and time ratio of two updates")
    c.add_argument("one")
    c.add_argument("two")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(Path(args.out), args.tasks, args.group)
    elif args.command == "update":
        update(Path(args.data), Path(args.out), args.minibatch_episodes, args.microbatch_rows,
               args.fsdp, args.first_units, args.updates,
               Path(args.load) if args.load else None, Path(args.save) if args.save else None,
               args.model, args.lora, args.beta)
    else:
        compare(Path(args.one), Path(args.two))


if __name__ == "__main__":
    main()
