"""The remote retriever against a real loopback server, bounded in count and time:
1,000 requests from 16 threads, then every fault kind through SRPO-Search-v0. Each gives
results, or the env's defined penalty (the failure in the information block, counted in
``info["retrieval_errors"]``); nothing hangs, threads are not left behind and memory
stays bounded."""

import contextlib
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from srpo_envs import search_v0
from srpo_envs.retrieval import make_retriever
from tests.loopback import serve

REQUESTS, THREADS = 1000, 16


# every test here may talk to a server on 127.0.0.1: no proxy for it
pytestmark = pytest.mark.usefixtures("no_loopback_proxy")


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _respond(mode: dict):
    """A Search-R1 server's answers, or its faults: ``mode["kind"]`` is ok, slow, 500,
    oversized or malformed."""
    def respond(path, body, release):
        kind = mode["kind"]
        if kind == "slow":
            release.wait(5)
        if kind == "500":
            return 500, b'{"detail": "boom"}'
        if kind == "oversized":
            return 200, b'{"result": [[' + b" " * 200_000 + b"]]}"
        if kind == "malformed":
            return 200, b'{"result": [[{"document": '
        return 200, json.dumps({"result": [[
            {"document": {"id": q, "contents": f'"{q}"\n{q} was born in Oslo.'},
             "score": 1.0}] for q in body["queries"]]}).encode()

    return respond


@contextlib.contextmanager
def server(mode: dict):
    with serve(_respond(mode)) as (url, requests):
        yield url, requests


def test_a_thousand_requests_from_sixteen_threads():
    mode = {"kind": "ok"}
    with server(mode) as (url, served):
        retriever = make_retriever(url, timeout=5, retries=2, backoff=0.01)
        retriever.search(["warm"], 1)
        threads_before, rss_before = threading.active_count(), _rss_mb()

        def one(i):
            (hits,) = retriever.search([f"q{i}"], 1)
            return hits[0].id == f"q{i}" and hits[0].title == f"q{i}"

        start = time.monotonic()
        with ThreadPoolExecutor(THREADS) as pool:
            answers = list(pool.map(one, range(REQUESTS)))
        elapsed = time.monotonic() - start
        time.sleep(0.2)
        assert all(answers) and len(served) == REQUESTS + 1
        # the request threads are kept for reuse: at most one per concurrent request,
        # and a second burst like the first starts none
        after_first = threading.active_count()
        assert after_first <= threads_before + THREADS
        with ThreadPoolExecutor(THREADS) as pool:
            assert all(pool.map(one, range(REQUESTS)))
        time.sleep(0.2)
        assert threading.active_count() <= after_first
    assert elapsed < 60
    assert _rss_mb() - rss_before < 30


def _env(url: str, **retriever_kwargs):
    return search_v0.parallel_env(workflow="single", world="compact", retriever=url,
                                  retriever_kwargs=retriever_kwargs, max_turns=3, seed=0)


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("kind, cause", [
    ("slow", "TimeoutError"), ("500", "500"), ("oversized", "response larger than"),
    ("malformed", "malformed JSON"), ("refused", "refused"),
])
def test_every_fault_kind_is_a_counted_penalty_and_nothing_hangs(kind, cause):
    mode = {"kind": kind}
    with server(mode) as (url, served):
        target = _closed_port_url() if kind == "refused" else url
        env = _env(target, timeout=0.4, retries=1, backoff=0.01, max_response_bytes=100_000)
        threads_before = threading.active_count()
        env.reset(options={"task_index": 0})
        start = time.monotonic()
        for turn in (1, 2):
            env.step({"agent_0": "<search>Futi</search>"})
            info = env.last_transition.info
            assert cause.lower() in info["retrieval_error"].lower()
            assert info["retrieval_errors"] == turn and info["tool_calls"] == 1
        # the failure is in the next prompt as data, and the episode goes on to its end
        assert "retrieval failed" in env._due["agent_0"]
        env.step({"agent_0": "<answer>Oslo</answer>"})
        assert not env.agents and env.last_transition.reward == 0.0
        elapsed = time.monotonic() - start
    # two searches, each at most (retries + 1) attempts of 0.4 s plus backoff
    assert elapsed < 2 * (2 * 0.4 + 0.05) + 1.0
    time.sleep(0.5)  # a timed-out attempt's thread ends its request with its socket timeout
    # and waits, idle, for the next request: at most one per attempt of the two searches
    assert threading.active_count() <= threads_before + 4
    if kind in ("500", "slow"):
        assert len(served) == 4  # retried: two attempts per search
    elif kind in ("oversized", "malformed"):
        assert len(served) == 2  # not retried: asking again would get the same answer
