"""Queries per second through ``srpo serve-retriever`` at 1, 4 and 16 concurrent clients,
against in-process retrieval, on the 100k-passage corpus of ``bm25_latency.py``.

    python benchmarks/speed/retrieval_server_qps.py  # writes results/retrieval_server_qps.{md,json}

The server runs in its own process (``srpo serve-retriever``, BM25, loopback); the clients
are threads of this process using the env's ``RemoteRetriever``, one query per request,
as a search env sends them. In-process: the same queries through the same index, one per
``search`` call, and all of them in one batched call. Each level sends the same
``--queries`` HotpotQA questions. The server and the clients share the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from srpo_bench.corpora import DATA, real_sentences, resampled_corpus
from srpo_bench.machine import cpu_model
from srpo_envs.retrieval import make_retriever

ROOT = Path(__file__).resolve().parents[2]


def questions(n: int) -> list[str]:
    path = DATA / "hotpotqa_dev_500.jsonl"
    if path.is_file():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [row["question"] for row in rows][:n]
    rng = random.Random(1)
    return [f"who founded {rng.randint(0, 9999)} city" for _ in range(n)]


def wait_healthy(url: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the server at {url} did not answer within {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--out", default="benchmarks/results/retrieval_server_qps")
    args = parser.parse_args()
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
    work = Path(tempfile.mkdtemp(prefix="srpo-qps-"))
    corpus = resampled_corpus(real_sentences(), args.passages, random.Random(0))
    corpus_file = work / "corpus.jsonl"
    with corpus_file.open("w") as handle:
        for pid, title, text in zip(corpus.ids, corpus.titles, corpus.texts, strict=True):
            handle.write(json.dumps({"id": pid, "title": title, "text": text}) + "\n")
    cache = work / "cache"
    local = make_retriever("bm25", str(corpus_file), cache_dir=cache)  # writes the index
    queries = questions(args.queries)
    result: dict = {"passages": args.passages, "queries": len(queries), "k": 5}

    start = time.perf_counter()
    for query in queries:
        local.search([query], 5)
    result["in_process_one_per_call_qps"] = len(queries) / (time.perf_counter() - start)
    start = time.perf_counter()
    local.search(queries, 5)
    result["in_process_one_batch_qps"] = len(queries) / (time.perf_counter() - start)

    env = {**os.environ, "PYTHONPATH": str(ROOT), "no_proxy": "127.0.0.1,localhost"}
    server = subprocess.Popen([sys.executable, "-m", "srpo_agents.cli", "serve-retriever",
                               "--corpus", str(corpus_file), "--port", str(args.port),
                               "--cache-dir", str(cache)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{args.port}/health")
        url = f"http://127.0.0.1:{args.port}/retrieve"
        remote = make_retriever(url, timeout=30)
        assert [p.id for p in remote.search([queries[0]], 5)[0]] == [
            p.id for p in local.search([queries[0]], 5)[0]]
        for clients in (1, 4, 16):
            start = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(lambda q: remote.search([q], 5), queries))
            result[f"server_{clients}_clients_qps"] = len(queries) / (
                time.perf_counter() - start)
    finally:
        server.terminate()
        server.wait(30)
    result.update(machine=cpu_model(), cores=os.cpu_count(), python=platform.python_version())
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    base = result["in_process_one_per_call_qps"]
    rows = [("in-process, one query per call", base),
            ("in-process, all queries in one batch", result["in_process_one_batch_qps"])]
    rows += [(f"server, {c} concurrent client(s)", result[f"server_{c}_clients_qps"])
             for c in (1, 4, 16)]
    lines = ["# Retrieval server throughput", "",
             "Command: `python benchmarks/speed/retrieval_server_qps.py`", "",
             f"{args.passages:,} passages (bm25_latency's corpus), BM25, k = 5, "
             f"{len(queries)} HotpotQA questions per row. Machine: {result['machine']}, "
             f"{result['cores']} cores; the server process and the client threads share "
             f"them.", "", "| how | queries/s | against in-process, one per call |",
             "|---|---:|---:|"]
    lines += [f"| {name} | {qps:,.0f} | {qps / base:.2f} |" for name, qps in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
