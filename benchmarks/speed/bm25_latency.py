"""BM25 build time and query latency at 100k passages: bm25s vs rank_bm25.

Corpus: 100,000 passages of 60-120 words, re-sampled (seeded) from the sentences of the
real search corpora in ``../shared/data/search/*_corpus.jsonl``, each passage titled
after the source of its first sentence. Where that data is absent, a synthetic corpus
over a Zipf-distributed vocabulary stands in (a note is printed and recorded).

Queries: the first 100 questions of ``hotpotqa_dev_500.jsonl`` (else synthetic), k=5,
sent as one ``search`` batch, exactly as the env would call the retriever.

Measured through the public API (``make_retriever``) in a fresh cache folder:
- build: cold construction (tokenize, index, write the cache file);
- load: a second construction, served from the cache file;
- latency of one 100-query batch: bm25s is the median of ``--repeats`` runs; rank_bm25
  is timed once on the first ``--ref-queries`` queries and scaled linearly to 100 (its
  cost is a Python loop over all passages per query term, so it is linear in queries).
The top-5 ids of both backends are compared on the queries both ran.

    .venv/bin/python benchmarks/speed/bm25_latency.py  # writes results/bm25_latency.{md,json}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from srpo_bench.corpora import DATA, real_sentences, resampled_corpus
from srpo_bench.machine import RESULTS, cpu_model
from srpo_envs.retrieval import Corpus, make_retriever

TARGET_SECONDS = 1.0


def zipf_corpus(n: int, rng: random.Random) -> tuple[Corpus, list[str]]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = sorted({"".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(60_000)})
    rng.shuffle(vocab)
    weights = [1 / (rank + 1) ** 1.07 for rank in range(len(vocab))]
    texts = [" ".join(rng.choices(vocab, weights, k=rng.randint(60, 120))) for _ in range(n)]
    queries = [" ".join(rng.choices(vocab, weights, k=rng.randint(5, 12))) for _ in range(100)]
    ids = tuple(f"bench-{i:06d}" for i in range(n))
    return Corpus(ids, ("",) * n, tuple(texts)), queries


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--ref-queries", type=int, default=25,
                        help="queries timed for rank_bm25, then scaled to --queries")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "bm25_latency")
    args = parser.parse_args()
    rng = random.Random(args.seed)

    notes = []
    pairs = real_sentences() if DATA.is_dir() else []
    questions_file = DATA / "hotpotqa_dev_500.jsonl"
    if pairs and questions_file.is_file():
        corpus = resampled_corpus(pairs, args.passages, rng)
        with questions_file.open(encoding="utf-8") as handle:
            queries = [json.loads(line)["question"] for line in handle][: args.queries]
        source = (f"{len(pairs)} sentences of ../shared/data/search/*_corpus.jsonl "
                  "re-sampled into 60-120-word passages; queries: hotpotqa_dev_500.jsonl "
                  "questions")
    else:
        corpus, queries = zipf_corpus(args.passages, rng)
        queries = queries[: args.queries]
        source = "synthetic Zipf(1.07) vocabulary of ~60k words; synthetic queries"
        notes.append(f"NOTE: real data not found under {DATA}; measured on a synthetic corpus.")
        print(notes[-1])
    mean_words = statistics.fmean(len(text.split()) for text in corpus.texts)
    print(f"corpus: {len(corpus)} passages, {mean_words:.1f} words each on average; "
          f"{len(queries)} queries, k={args.k}")

    ref_queries = queries[: args.ref_queries]
    scale = len(queries) / len(ref_queries)
    row = {}
    with tempfile.TemporaryDirectory(prefix="bm25-bench-") as cache_dir:
        for spec in ("bm25", "rank_bm25"):
            def build(spec=spec):
                return make_retriever(spec, corpus, cache_dir=cache_dir)

            retriever, build_s = timed(build)
            cached, load_s = timed(build)
            assert cached.from_cache and not retriever.from_cache
            del cached
            if spec == "bm25":
                retriever.search(queries[:1], args.k)  # warm-up: first-call allocations
                runs = [timed(lambda r=retriever: r.search(queries, args.k))[1]
                        for _ in range(args.repeats)]
                batch_s = statistics.median(runs)
                top_ids = [[p.id for p in hits] for hits in retriever.search(ref_queries, args.k)]
                how = f"median of {args.repeats} runs (min {min(runs):.3f}, max {max(runs):.3f})"
            else:
                hits, ref_s = timed(lambda r=retriever: r.search(ref_queries, args.k))
                batch_s = ref_s * scale
                ref_ids = [[p.id for p in h] for h in hits]
                how = (f"{len(ref_queries)} queries timed once ({ref_s:.2f} s), "
                       f"scaled x{scale:g}")
            row[spec] = {"build_s": build_s, "load_from_cache_s": load_s,
                         "batch_s": batch_s, "how": how,
                         "cache_file_mb": retriever.cache_path.stat().st_size / 2**20}
            print(f"{spec}: build {build_s:.2f} s, load {load_s:.2f} s, "
                  f"{len(queries)} queries {batch_s:.3f} s ({how})")
            del retriever

    agree = sum(a == b for a, b in zip(top_ids, ref_ids, strict=True))
    ratio = row["rank_bm25"]["batch_s"] / row["bm25"]["batch_s"]
    met = row["bm25"]["batch_s"] < TARGET_SECONDS
    command = " ".join([".venv/bin/python", "benchmarks/speed/bm25_latency.py",
                        *map(shlex.quote, sys.argv[1:])])
    result = {
        "command": command, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {"nproc": len(os.sched_getaffinity(0)), "cpu": cpu_model(),
                    "python": platform.python_version(), "platform": platform.platform(),
                    "numpy": version("numpy"), "bm25s": version("bm25s"),
                    "rank_bm25": version("rank-bm25")},
        "corpus": {"passages": len(corpus), "mean_words": round(mean_words, 1),
                   "source": source, "seed": args.seed},
        "queries": len(queries), "k": args.k, "results": row,
        "speedup_rank_bm25_over_bm25s": ratio,
        "top_k_identical": f"{agree}/{len(ref_queries)}",
        "target": f"{len(queries)} queries over {len(corpus)} passages in under "
                  f"{TARGET_SECONDS:g} s with bm25s", "target_met": met, "notes": notes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(render(result))
    print(f"ratio rank_bm25/bm25s: {ratio:.0f}x; top-{args.k} identical on "
          f"{agree}/{len(ref_queries)} queries; target met: {met}")
    print(f"wrote {args.out.with_suffix('.md')} and .json")


def render(result: dict) -> str:
    m, c, r = result["machine"], result["corpus"], result["results"]
    lines = [
        "# BM25 latency: bm25s vs rank_bm25", "",
        f"Command: `{result['command']}`  ", f"Date: {result['date']}", "",
        f"Machine: {m['nproc']} CPU(s) ({m['cpu']}), Python {m['python']}, "
        f"numpy {m['numpy']}, bm25s {m['bm25s']}, rank-bm25 {m['rank_bm25']}, "
        f"{m['platform']}", "",
        f"Corpus: {c['passages']} passages, {c['mean_words']} words on average "
        f"(seed {c['seed']}); {c['source']}. One batch of {result['queries']} queries, "
        f"k={result['k']}.", "",
        *[line for note in result["notes"] for line in (f"**{note}**", "")],
        "| backend | build (cold) | load from cache | cache file | "
        f"{result['queries']} queries | how the batch was timed |",
        "|---|---|---|---|---|---|",
    ]
    for spec, label in (("bm25", "`bm25` (bm25s)"), ("rank_bm25", "`rank_bm25`")):
        row = r[spec]
        lines.append(f"| {label} | {row['build_s']:.2f} s | {row['load_from_cache_s']:.2f} s | "
                     f"{row['cache_file_mb']:.0f} MiB | {row['batch_s']:.3f} s | {row['how']} |")
    lines += [
        "",
        f"rank_bm25 / bm25s query time: **{result['speedup_rank_bm25_over_bm25s']:.0f}x**. "
        f"Top-{result['k']} ids identical on {result['top_k_identical']} queries.", "",
        f"Target ({result['target']}): **{'met' if result['target_met'] else 'NOT met'}**.", "",
        "Build = first `make_retriever` call in an empty cache folder (tokenize, index, "
        "write the cache file); load = the second call, served from that file.", "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
