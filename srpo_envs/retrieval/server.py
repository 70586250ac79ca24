"""A retrieval server speaking Search-R1's ``/retrieve`` protocol (extra ``server``:
FastAPI and uvicorn, as Search-R1's own server uses).

    srpo serve-retriever --corpus data/corpus.jsonl --backend bm25 --port 8000
    # envs: retriever="http://127.0.0.1:8000/retrieve"

Endpoints:
- ``POST /retrieve`` takes ``{"queries": [...], "topk": k, "return_scores": bool}``, the
  body Search-R1's client sends. ``topk`` may be omitted or null (``default_topk``, 3 as
  in Search-R1's launch scripts), an integral float or a numeric string (``"3"``), as
  Search-R1's pydantic model accepts; ``return_scores`` is a JSON boolean (default
  false). It returns ``{"result": [[{"document": {"id", "title", "text", "contents"},
  "score": s}, ...], ...]}``, one list per query, best first; without ``return_scores``
  each list holds bare documents. ``contents`` is ``'"Title"\\ntext'``, as Search-R1's
  corpora have it, so Search-R1 clients and ``srpo_envs.retrieval.remote`` both read it.
- ``POST /batch_retrieve`` is the same, for clients that name the batch call apart.
- ``GET /health`` returns ``{"status": "ok", "backend", "passages"}``.

Limits, each answered with a status and a message instead of work: a body over
``max_body_bytes`` gets 413; more than ``max_queries`` queries, a query over
``max_query_chars``, a ``topk`` that is not a number in 1..``max_topk``, or a
non-boolean ``return_scores`` gets 422 naming the field, the value and what was
expected. (Search-R1's server reads ``topk: 0`` as its default; here 0 is an error: a
client asking for no passages has a bug.) The server binds to 127.0.0.1 unless told
otherwise, and logs one line per request (method, path, status, queries, milliseconds)
to the ``srpo.retrieval.server`` logger.

One retriever (index) serves every request. Concurrent requests are searched together
(``SearchBatcher``: one ``search`` call for the queries of every request waiting, in a
worker thread), and each gets its own results; the backends' ``search`` is read-only.
Responses are encoded with ``json`` directly, and the logging is in the handler rather
than an HTTP middleware: both cost more per request than a BM25 search
(``benchmarks/results/retrieval_server_qps.md``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from srpo_envs.retrieval.base import Passage, Retriever

try:  # at module level: FastAPI resolves the handlers' (string) annotations here
    from fastapi import FastAPI, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse, Response
except ImportError:  # the server extra is optional; build_app says how to install it
    FastAPI = None

try:  # in the server extra; the standard library's json is the fallback
    import orjson

    def _encode(value: Any) -> bytes:
        return orjson.dumps(value)
except ImportError:
    def _encode(value: Any) -> bytes:
        return json.dumps(value).encode()

LOG = logging.getLogger("srpo.retrieval.server")
_INSTALL_HINT = "pip install 'srpo[server]' (FastAPI and uvicorn)"
_NUMERIC = re.compile(r"\+?[0-9]{1,9}")  # bounded: int() of 5000 digits raises
_SHOWN_VALUE_CHARS = 80


def _require_server_extra() -> Any:
    """The uvicorn module, or an ImportError that says how to install the server extra.

    A bare ``No module named 'uvicorn'`` tells a user of ``srpo serve-retriever`` neither
    that the module is optional nor which extra brings it; the CLI prints this message."""
    if FastAPI is None:
        raise ImportError(f"the retrieval server needs FastAPI, which is not installed: "
                          f"{_INSTALL_HINT}")
    try:
        import uvicorn
    except ImportError as err:
        raise ImportError(f"the retrieval server needs uvicorn, which is not installed: "
                          f"{_INSTALL_HINT}") from err
    return uvicorn


def _topk(value: Any, default: int, max_topk: int) -> int | str:
    """``topk`` as an int, or an error message. Accepts what Search-R1's server accepts
    from its clients: null (the default), an int, an integral float or a numeric string."""
    expected = (f"expected an int in 1..{max_topk}, a numeric string such as \"3\", or null "
                f"for the default ({default})")
    if value is None:
        return default
    if isinstance(value, str) and _NUMERIC.fullmatch(value.strip()):
        value = int(value)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    # bool is an int subclass; "topk": true is a client bug, not a request for 1 passage
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max_topk:
        return f"'topk'={_show(value)}: {expected}"
    return value


def _show(value: Any) -> str:
    """``repr`` clipped, so an error message cannot echo a megabyte of request body."""
    text = repr(value)
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[:_SHOWN_VALUE_CHARS] + "..."


def _document(passage: Passage) -> dict[str, Any]:
    return {"id": passage.id, "title": passage.title, "text": passage.text,
            "contents": f'"{passage.title}"\n{passage.text}'}


class SearchBatcher:
    """Concurrent requests' queries in one ``search`` call: while a search runs (in a
    worker thread), the requests that arrive wait, and then go together, one call per
    ``topk``. Each request gets its own results back, in its order; if a joint call
    fails, each request of it is searched alone, so only a request that fails on its own
    gets the error. Runs on the server's event loop (no locks needed)."""

    def __init__(self, retriever: Retriever):
        self.retriever = retriever
        self.pending: list[tuple[list[str], int, asyncio.Future]] = []
        self.running = False
        self.calls = 0  # search calls made, for tests and the log

    async def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((queries, k, future))
        if not self.running:
            self.running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.pending:
                batch, self.pending = self.pending, []
                for k in dict.fromkeys(item[1] for item in batch):
                    await self._run([item for item in batch if item[1] == k], k)
        finally:
            self.running = False

    async def _run(self, items: list, k: int) -> None:
        joined = [q for queries, _, _ in items for q in queries]
        try:
            self.calls += 1
            results = await run_in_threadpool(self.retriever.search, joined, k)
        except Exception:
            if len(items) == 1:
                items[0][2].set_exception(sys.exc_info()[1])
                return
            for item in items:
                await self._run([item], k)
            return
        start = 0
        for queries, _, future in items:
            future.set_result(results[start:start + len(queries)])
            start += len(queries)


def build_app(retriever: Retriever, *, backend: str = "custom", passages: int | None = None,
              max_queries: int = 1024, max_query_chars: int = 4096, max_topk: int = 100,
              max_body_bytes: int = 4 << 20, default_topk: int = 3):
    """The FastAPI app serving ``retriever``."""
    if FastAPI is None:
        raise ImportError(f"the retrieval server needs FastAPI, which is not installed: "
                          f"{_INSTALL_HINT}")
    if isinstance(default_topk, bool) or not isinstance(default_topk, int) \
            or not 1 <= default_topk <= max_topk:
        raise ValueError(f"default_topk={default_topk!r}: expected an int in 1..{max_topk} "
                         f"(max_topk)")

    app = FastAPI(title="srpo retrieval server", docs_url=None, redoc_url=None)
    batcher = SearchBatcher(retriever)
    app.state.batcher = batcher

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse(status_code=status, content={"detail": message})

    async def retrieve(request: Request):
        # The logging and the size check live here, not in an HTTP middleware: Starlette's
        # middleware wraps every request in extra tasks and streams, which cost more than
        # a BM25 search of a 100k-passage corpus.
        start = time.monotonic()
        response, queries = await answer(request)
        LOG.info("%s %s %d queries=%d %.1fms", request.method, request.url.path,
                 response.status_code, queries, 1000 * (time.monotonic() - start))
        return response

    async def answer(request: Request) -> tuple[Response, int]:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_body_bytes):
            return error(413, f"request body over {max_body_bytes} bytes"), 0
        body = await request.body()
        if len(body) > max_body_bytes:  # a chunked body has no content-length to check
            return error(413, f"request body over {max_body_bytes} bytes"), 0
        try:
            payload = json.loads(body)
        except ValueError as err:
            return error(422, f"body is not JSON: {err}"), 0
        if not isinstance(payload, dict):
            return error(422, "body must be a JSON object with 'queries'"), 0
        queries = payload.get("queries")
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            return error(422, "'queries' must be a list of strings"), 0
        if len(queries) > max_queries:
            return error(422, f"{len(queries)} queries; at most {max_queries} per request"), 0
        if any(len(q) > max_query_chars for q in queries):
            return error(422, f"a query is longer than {max_query_chars} characters"), 0
        topk = _topk(payload.get("topk"), default_topk, max_topk)
        if isinstance(topk, str):
            return error(422, topk), 0
        # a truthiness test would read the string "false" as true
        return_scores = payload.get("return_scores", False)
        if not isinstance(return_scores, bool):
            return error(422, f"'return_scores'={_show(return_scores)}: expected true or "
                              f"false"), 0
        results = await batcher.search(queries, topk)
        if return_scores:
            result = [[{"document": _document(p), "score": p.score} for p in hits]
                      for hits in results]
        else:
            result = [[_document(p) for p in hits] for hits in results]
        # encoded here: FastAPI's encoder walks every nested value of a returned dict,
        # which costs more than the search
        return Response(_encode({"result": result}), media_type="application/json"), \
            len(queries)

    # plain Starlette routes: the handler reads the request itself, so FastAPI's
    # per-request dependency resolution has nothing to do and is skipped
    app.router.add_route("/retrieve", retrieve, methods=["POST"])
    app.router.add_route("/batch_retrieve", retrieve, methods=["POST"])

    @app.get("/health")
    async def health():
        return {"status": "ok", "backend": backend, "passages": passages}

    return app


class RetrievalServer:
    """uvicorn serving ``build_app`` in a background thread: ``start()`` returns once it
    accepts connections, ``stop()`` shuts it down cleanly. ``port=0`` picks a free port."""

    def __init__(self, retriever: Retriever, *, host: str = "127.0.0.1", port: int = 0,
                 **app_kwargs: Any):
        uvicorn = _require_server_extra()
        self.app = build_app(retriever, **app_kwargs)
        self._server = uvicorn.Server(uvicorn.Config(self.app, host=host, port=port,
                                                     log_level="warning", access_log=False,
                                                     lifespan="off"))
        self._thread: threading.Thread | None = None
        self.host = host
        self._port = port

    @property
    def port(self) -> int:
        """The bound port (known once started; kept after ``stop``)."""
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/retrieve"

    def start(self, timeout: float = 30.0) -> RetrievalServer:
        self._thread = threading.Thread(target=self._server.run, name="srpo-retrieval-server",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the retrieval server did not start on "
                                   f"{self.host}:{self._server.config.port}")
            time.sleep(0.01)
        self._port = int(self._server.servers[0].sockets[0].getsockname()[1])
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> RetrievalServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def serve(corpus: str | Path, backend: str = "bm25", host: str = "127.0.0.1",
          port: int = 8000, cache_dir: str | Path | None = None, **app_kwargs: Any) -> None:
    """Build the index of ``corpus`` and serve it until interrupted (``srpo
    serve-retriever``). A missing server extra is reported before the index is built."""
    uvicorn = _require_server_extra()

    from srpo_envs.retrieval import load_corpus, make_retriever

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    loaded = load_corpus(corpus)
    retriever = make_retriever(backend, loaded, cache_dir=cache_dir)
    app = build_app(retriever, backend=backend, passages=len(loaded), **app_kwargs)
    LOG.info("serving %d passages (%s) on http://%s:%d/retrieve", len(loaded), backend, host,
             port)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
