"""``srpo serve-retriever``: the FastAPI server on a free loopback port, queried through
the env's remote retriever and raw HTTP, its limits, its log line, a clean shutdown."""

import json
import logging
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

from srpo_envs import search_v0  # noqa: E402
from srpo_envs.retrieval import RetrievalError, corpus_from_records, make_retriever  # noqa: E402
from srpo_envs.retrieval.server import RetrievalServer  # noqa: E402
from srpo_envs.scripted import OracleSearchTeam  # noqa: E402

RECORDS = [{"id": f"p{i}", "title": title, "text": text} for i, (title, text) in enumerate([
    ("Paris", "Paris is the capital of France."),
    ("Berlin", "Berlin is the capital of Germany."),
    ("Photosynthesis", "Plants turn sunlight into chemical energy."),
    ("Oslo", "Oslo is the capital of Norway <|im_end|>."),
])]


# every test here may talk to a server on 127.0.0.1: no proxy for it
pytestmark = pytest.mark.usefixtures("no_loopback_proxy")


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    return make_retriever("bm25", corpus_from_records(RECORDS),
                          cache_dir=tmp_path_factory.mktemp("server-cache"))


def _post(url: str, payload, raw: bytes | None = None):
    data = raw if raw is not None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_env_searches_through_the_server(local, caplog):
    caplog.set_level(logging.INFO, logger="srpo.retrieval.server")
    with RetrievalServer(local, backend="bm25", passages=len(RECORDS)) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.port > 0
        with urllib.request.urlopen(server.url.replace("/retrieve", "/health"),
                                    timeout=10) as response:
            assert json.loads(response.read()) == {"status": "ok", "backend": "bm25",
                                                   "passages": 4}
        remote = make_retriever(server.url, timeout=5)
        queries = ["capital of Germany", "sunlight energy", "", "Norway"]
        assert remote.search(queries, 2) == local.search(queries, 2)
        # Search-R1's answer shape, with and without scores, and the batch endpoint
        status, body = _post(server.url.replace("/retrieve", "/batch_retrieve"),
                             {"queries": ["Paris"], "topk": 1})
        assert status == 200 and body["result"][0][0]["contents"] == (
            '"Paris"\nParis is the capital of France.')
    assert any("POST /retrieve 200 queries=3" in r.getMessage() for r in caplog.records)
    with pytest.raises(RetrievalError, match="refused"):  # shut down: the port is closed
        make_retriever(server.url, timeout=1, retries=0).search(["x"], 1)


def test_a_search_env_and_many_envs_share_one_server(tmp_path):
    world = search_v0.parallel_env(world="compact", seed=0, cache_dir=str(tmp_path)).retriever
    with RetrievalServer(world) as server:
        envs = [search_v0.parallel_env(workflow="parallel", n_searchers=2, world="compact",
                                       hops=[1], retriever=server.url, seed=i)
                for i in range(3)]
        team, rewards = OracleSearchTeam(), []
        for i, env in enumerate(envs):
            observations, _ = env.reset(options={"task_index": i})
            while env.agents:
                observations, *_ = env.step(team.act(env, observations))
            rewards.append(env.last_transition.reward)
        assert rewards == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("payload, raw, status, fragment", [
    ({"queries": ["a"] * 9, "topk": 1}, None, 422, "9 queries; at most 8"),
    ({"queries": ["x" * 100], "topk": 1}, None, 422, "longer than 64 characters"),
    ({"queries": ["a"], "topk": 0}, None, 422, "'topk'=0: expected an int in 1..5"),
    ({"queries": "a", "topk": 1}, None, 422, "'queries' must be a list of strings"),
    (None, b"{not json", 422, "not JSON"),
    (None, b'{"queries": ["' + b"a" * 3000 + b'"]}', 413, "over 2048 bytes"),
])
def test_limits_are_answered_with_a_status_and_a_message(local, payload, raw, status,
                                                         fragment):
    with RetrievalServer(local, max_queries=8, max_query_chars=64, max_topk=5,
                         max_body_bytes=2048) as server:
        got, body = _post(server.url, payload, raw)
    assert got == status and fragment in body["detail"]


def test_concurrent_requests_share_searches_and_each_gets_its_own(local):
    """Sixteen clients at once: the server joins waiting requests into one search call
    (fewer calls than requests), and every request gets exactly its own passages."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    class Slow:  # a search long enough that requests queue behind it
        def __init__(self):
            self.calls = []
            self.lock = threading.Lock()

        def search(self, queries, k):
            with self.lock:
                self.calls.append(list(queries))
            time.sleep(0.02)
            return local.search(queries, k)

    slow = Slow()
    queries = [f"capital of {c}" for c in ("France", "Germany", "Norway")] * 16
    with RetrievalServer(slow) as server:
        remote = make_retriever(server.url, timeout=10)
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda q: remote.search([q], 1)[0], queries))
    assert answers == [local.search([q], 1)[0] for q in queries]
    assert len(slow.calls) < len(queries) and max(map(len, slow.calls)) > 1


def test_a_failing_joint_search_fails_only_the_request_that_fails_alone(local):
    import asyncio

    from srpo_envs.retrieval.server import SearchBatcher

    class Picky:
        def search(self, queries, k):
            if "bad" in queries:
                raise ValueError("cannot search 'bad'")
            return local.search(queries, k)

    async def three():
        batcher = SearchBatcher(Picky())
        return await asyncio.gather(batcher.search(["Paris"], 1), batcher.search(["bad"], 1),
                                    batcher.search(["Oslo"], 1), return_exceptions=True)

    paris, bad, oslo = asyncio.run(three())
    assert paris == local.search(["Paris"], 1) and oslo == local.search(["Oslo"], 1)
    assert isinstance(bad, ValueError)
