"""A reader phase after the search track's warm start: does the answerer learn to copy
the city out of the passage at any budget?

    python benchmarks/labs/search_reader_phase.py --start runs/search-pilot9/search_answer_verify
        [--steps 900] [--measure-every 300] [--threads 1] [--out runs/search-reader]

``--start``: a run folder of ``benchmarks/learning/search_track.py`` (its ``warmstart`` policy is
read; the world, prompts and oracle are the track's ``search_answer_verify`` settings
with top 1 passage). The phase continues supervised steps on the same oracle examples
(batch 64, lr 3e-3, 20 warm-up steps and the cosine to a tenth over ``--steps``). Three
batches in four hold only the readers' (answerer and verifier) examples, and the fourth
holds every role's, so the searcher keeps its copy. Every ``--measure-every`` steps it
measures the track on 200 held-out one-hop questions x 1 (``srpo_bench.search_track.measure``) and
saves the policy to ``OUT/policy``. Writes ``OUT/measures.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.engine import RolloutEngine
from srpo_agents.rollout.envs import env_factory
from srpo_agents.running.checkpoint import save_pretrained_atomic
from srpo_agents.tiny.source import tiny_config
from srpo_agents.tiny.warmstart import (
    DECAY_WARMUP,
    _encode,
    lr_factor,
    reference_examples,
    sft_step,
)
from srpo_bench.search_track import measure, track_config

READERS = ("answerer", "verifier")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start", required=True)
    parser.add_argument("--steps", type=int, default=900)
    parser.add_argument("--measure-every", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="runs/search-reader")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "measures.jsonl").unlink(missing_ok=True)
    config = track_config("search_answer_verify", str(out), 900, 40, 0, first_steps=600,
                          top_k=1)
    policy = load_policy(str(Path(args.start) / "warmstart"))
    examples = reference_examples(env_factory(config, "train"), episodes=20000, seed=0,
                                  skill=tiny_config(config).warmstart_skill,
                                  env_name=config.env)
    encoded = _encode(policy, examples)
    readers = [e for e, (role, _, _) in zip(encoded, examples, strict=True) if role in READERS]
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, DECAY_WARMUP, args.steps))
    rng = random.Random(1)
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        policy.model.train()
        pool = readers if step % 4 else encoded
        loss = sft_step(policy, optimizer, rng.sample(pool, 64), scheduler)
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} {time.monotonic() - started:.0f}s",
                  flush=True)
        if step % args.measure_every == 0 or step == args.steps:
            policy.model.eval()
            result = measure(RolloutEngine(policy, max_new_tokens=32, seed=0), config, 200, 1)
            result.update(step=step, seconds=time.monotonic() - started)
            with (out / "measures.jsonl").open("a") as handle:
                handle.write(json.dumps(result) + "\n")
            save_pretrained_atomic(policy.model, policy.tokenizer, out / "policy")
            print("measure", json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
