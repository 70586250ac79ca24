"""The copy skill under a microscope: how many steps the tiny policy needs before it
copies a name, measured with a finer ruler than ``search_copy.py``.

    python benchmarks/labs/copy_lab.py searcher NAME SEED STEPS ['{"lr": 0.01, "batch": 16}']
    python benchmarks/labs/copy_lab.py pretrain NAME SEED STEPS

``searcher``: a tiny policy trained on the searcher's oracle examples alone (compact
world, one-hop, no slipped queries: the first phase of the search track's curriculum),
at a constant lr after a 20-step warm-up; every 25 steps it prints the teacher-forced
accuracy of the 4 name characters on 200 held-out first-round prompts (argmax of each,
chance about 0.13). Options (JSON): ``lr`` (3e-3), ``batch`` (64), ``layers`` (4),
``heads`` (4), ``theta`` (RoPE base, Qwen2's 10000), ``base`` (a saved policy folder
to start from). ``pretrain``: generic copy and recall on random letter-words (repeat a
list, its first or last word, the value of a key), batch 64, lr 3e-3, a 20-step warm-up and
a cosine to a tenth over STEPS; it prints the loss every 50 steps (chance about 3.26) and saves the policy to
``runs/copy-lab/NAME``. Scratch measurements: their output goes to stdout and is
summarized by hand in ``results/search_track.md``. Threads: ``THREADS`` (default 1).
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from pathlib import Path

import torch

from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.envs import env_factory
from srpo_agents.tiny import build_tiny_policy
from srpo_agents.tiny.warmstart import _encode, lr_factor, reference_examples, sft_step
from srpo_bench.search_track import track_config

OUT = Path("runs/copy-lab")
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def with_rope_theta(theta: float) -> None:
    """Make ``build_tiny_policy`` use RoPE base ``theta`` (its Qwen2Config is patched)."""
    import transformers

    base = transformers.Qwen2Config

    class Config(base):
        def __init__(self, *args, **kwargs):
            kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
            super().__init__(*args, **kwargs)

    transformers.Qwen2Config = Config


def cosine_from_start(steps: int):
    """A 20-step warm-up times a cosine to a tenth whose progress counts from step 0."""
    return lambda step: (min(1.0, (step + 1) / 20)
                         * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, step / steps)))))


def train_steps(policy, encoded, rng, steps, lr, batch, schedule, every, report) -> None:
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    for step in range(1, steps + 1):
        loss = sft_step(policy, optimizer, rng.sample(encoded, batch), scheduler)
        if step % every == 0 and report(step, loss.item()):
            return


def name_accuracy(policy, encoded) -> float:
    """Teacher-forced argmax accuracy on the 4 name characters after ``<search>``."""
    policy.model.eval()
    right = total = 0
    with torch.no_grad():
        for start in range(0, len(encoded), 50):
            rows = encoded[start:start + 50]
            width = max(len(ids) for ids, _ in rows)
            ids = torch.tensor([x + [policy.pad_token_id] * (width - len(x)) for x, _ in rows])
            mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x, _ in rows])
            guess = policy.model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
            for row, (x, prompt_len) in enumerate(rows):
                for j in range(prompt_len + 8, prompt_len + 12):
                    right += int(guess[row, j - 1] == x[j])
                    total += 1
    policy.model.train()
    return right / total


def searcher(name: str, seed: int, steps: int, options: dict) -> None:
    config = track_config("search_answer_verify", str(OUT / name), 100, 60.0, seed)
    only = lambda examples: [e for e in examples if e[0] == "searcher"]  # noqa: E731
    train = only(reference_examples(env_factory(config, "train"), 3000, seed, skill=1.0,
                                    env_name=config.env))
    held = only(reference_examples(env_factory(config, "test"), 200, seed + 99, skill=1.0,
                                   env_name=config.env))
    if "theta" in options:
        with_rope_theta(float(options["theta"]))
    torch.manual_seed(seed)
    policy = (load_policy(options["base"]) if "base" in options else build_tiny_policy(
        [p for _, p, _ in train[:50]], OUT / name / "init", seed=seed,
        num_layers=options.get("layers", 4), num_heads=options.get("heads", 4)))
    encoded, held_encoded = _encode(policy, train), _encode(policy, held[:200])
    start, curve = time.monotonic(), []

    def report(step: int, _loss: float) -> bool:
        curve.append((step, round(name_accuracy(policy, held_encoded), 3)))
        print(name, *curve[-1], f"{time.monotonic() - start:.0f}s", flush=True)
        return curve[-1][1] >= 0.98

    train_steps(policy, encoded, random.Random(seed), steps, options.get("lr", 3e-3),
                options.get("batch", 64), lambda step: lr_factor(step, 20, 0), 25, report)
    print("RESULT", name, json.dumps({"options": options, "curve": curve}), flush=True)


def random_task(rng: random.Random) -> tuple[str, str, str]:
    def word() -> str:
        w = "".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 6)))
        return w.capitalize() if rng.random() < 0.5 else w

    words = [word() for _ in range(rng.randint(1, 8))]
    filler = " ".join(word() for _ in range(rng.randint(0, 10)))
    kind = rng.randrange(4)
    if kind == 0:
        return "base", f"{filler}\nRepeat: {' '.join(words)}\n", " ".join(words)
    if kind == 1:
        return "base", f"{filler}\nLast word: {' '.join(words)}\n", words[-1]
    if kind == 2:
        return "base", f"{filler}\nFirst word: {' '.join(words)}\n", words[0]
    keys = [word() for _ in range(rng.randint(1, 4))]
    values = [word() for _ in keys]
    pick = rng.randrange(len(keys))
    facts = " ".join(f"{k} is {v}." for k, v in zip(keys, values, strict=True))
    return "base", f"{facts}\n{filler}\nWhat is {keys[pick]}?\n", values[pick]


def pretrain(name: str, seed: int, steps: int) -> None:
    rng = random.Random(seed)
    examples = [random_task(rng) for _ in range(60000)]
    policy = build_tiny_policy([p for _, p, _ in examples[:100]], OUT / f"{name}-init",
                               seed=seed)
    start = time.monotonic()

    def report(step: int, loss: float) -> bool:
        print("pretrain", step, f"loss {loss:.3f} {time.monotonic() - start:.0f}s", flush=True)
        return False

    train_steps(policy, _encode(policy, examples), rng, steps, 3e-3, 64,
                cosine_from_start(steps), 50, report)
    policy.model.save_pretrained(OUT / name)
    policy.tokenizer.save_pretrained(OUT / name)


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    mode, run, seed_arg, steps_arg = sys.argv[1:5]
    if mode == "pretrain":
        pretrain(run, int(seed_arg), int(steps_arg))
    else:
        searcher(run, int(seed_arg), int(steps_arg),
                 json.loads(sys.argv[5]) if len(sys.argv) > 5 else {})
