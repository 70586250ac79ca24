"""Client of the HTTP retrieval server that Search-R1 users run
(``search_r1/search/retrieval_server.py``).

Protocol: ``POST {url}/retrieve`` with ``{"queries": [...], "topk": k,
"return_scores": true}``, the body Search-R1's own client sends; the answer is
``{"result": [[{"document": {...}, "score": s}, ...], ...]}``, one list per query. A
server that ignores ``return_scores`` and sends bare documents (``{"result": [[{...},
...], ...]}``, Search-R1's answer without scores) is read too; its passages get score
0.0, since there is none to report, and keep the server's order. A document is a corpus
row: ``{"id", "contents"}`` with ``contents = '"Title"\\ntext'`` (dense server) or
``{"title", "text", "contents"}`` (Pyserini BM25 server, no id). Title and text come
from ``contents`` the way Search-R1 splits it (first line, quotes stripped / the rest),
else from ``title``/``text``; a missing id becomes ``""``. The URL may be given with or
without ``/retrieve``.

Failure handling, so an env step can never hang on the network:

- Each attempt has a hard deadline of ``timeout`` seconds (default 10) for the whole
  exchange: the request runs in a daemon thread (reused between requests) that we stop
  waiting for. Socket timeouts alone would not bound DNS lookups or a server that
  trickles bytes.
- Connection errors, timeouts, HTTP 429 and 5xx are retried ``retries`` times (default
  2) after ``backoff * 2**i`` seconds (0.25 s, 0.5 s). Other HTTP errors and malformed
  answers are not retried: asking again would get the same answer.
- Then ``RetrievalError`` naming the URL and the cause. Worst case for one ``search``:
  ``(retries + 1) * timeout`` plus the backoff sleeps.
- Responses are capped (``max_response_bytes``, 64 MiB by default) so a broken server
  cannot exhaust memory; a larger one is an error, not retried. The server's
  order is kept; lists longer than ``k`` are cut to ``k``.

Connections are kept alive and reused (a pool per retriever), so a search costs one
request, not a TCP connection and a request: measured, it halves the time of a small
request on loopback. A pooled connection is returned only after a whole exchange; one
that the server closed while idle is replaced at once (that is not an attempt). Only
the standard library; when the environment names a proxy for the URL (``HTTP_PROXY``,
``NO_PROXY``...), each request goes through ``urllib``'s proxy handling instead, one
connection per request.
"""

from __future__ import annotations

import http.client
import json
import math
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from srpo_envs.retrieval.base import Passage, RetrievalError, check_search_args, is_blank
from srpo_envs.retrieval.corpus import split_contents

_MAX_RESPONSE_BYTES = 64 << 20
_SHOWN_BODY_CHARS = 200


class _Fatal(Exception):
    """A failure that a retry would only repeat."""


class _Retryable(OSError):
    """HTTP 429 or 5xx: the server may answer next time."""


class _DaemonWorkers:
    """Daemon threads that run requests and are reused: a thread started per request
    costs more than a small request on loopback. The caller stops waiting at its
    deadline; a thread stuck on a dead server then finishes with its socket timeout,
    and never blocks the interpreter's exit. A new thread starts when none is idle."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.idle = 0
        self.lock = threading.Lock()

    def run(self, work, timeout: float) -> Any:
        outcome: dict[str, Any] = {}
        finished = threading.Event()
        with self.lock:
            start = self.idle == 0
            self.idle -= 0 if start else 1
        if start:
            threading.Thread(target=self._loop, name="srpo-retrieval-request",
                             daemon=True).start()
        self.jobs.put((work, outcome, finished))
        if not finished.wait(timeout):
            raise TimeoutError(f"no complete response within {timeout:g} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def _loop(self) -> None:
        while True:
            work, outcome, finished = self.jobs.get()
            try:
                outcome["value"] = work()
            except BaseException as exc:  # handed to the caller's thread
                outcome["error"] = exc
            finally:
                finished.set()
                with self.lock:
                    self.idle += 1


_WORKERS = _DaemonWorkers()


def normalize_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url.strip())
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # "host:abc" or a port above 65535
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ValueError(f"retrieval server URL must be http(s)://host[:port][/retrieve], "
                         f"got {url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith("/retrieve"):
        path += "/retrieve"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class RemoteRetriever:
    def __init__(self, url: str, *, timeout: float = 10.0, retries: int = 2,
                 backoff: float = 0.25, max_response_bytes: int = _MAX_RESPONSE_BYTES) -> None:
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        if retries < 0 or not (math.isfinite(backoff) and backoff >= 0):
            raise ValueError(f"need retries >= 0 and backoff >= 0, got {retries}, {backoff}")
        if not isinstance(max_response_bytes, int) or max_response_bytes < 1024:
            raise ValueError(f"max_response_bytes must be an int >= 1024, got "
                             f"{max_response_bytes!r}")
        self.max_response_bytes = max_response_bytes
        self.url = normalize_url(url)
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        parts = urllib.parse.urlsplit(self.url)
        self._target = (parts.scheme, parts.hostname, parts.port,
                        parts.path + (f"?{parts.query}" if parts.query else ""))
        proxies = urllib.request.getproxies()
        self._direct = parts.scheme not in proxies or bool(
            urllib.request.proxy_bypass(parts.hostname))
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        queries, k = check_search_args(queries, k)
        results: list[list[Passage]] = [[] for _ in queries]
        live = [i for i, query in enumerate(queries) if k > 0 and not is_blank(query)]
        if not live:
            return results
        # json.dumps escapes to ASCII, so control characters or lone surrogates in a
        # query cannot produce an unencodable body.
        body = json.dumps({"queries": [queries[i] for i in live], "topk": k,
                           "return_scores": True}).encode("ascii")
        for i, passages in zip(live, self._parse(self._post(body), len(live), k), strict=True):
            results[i] = passages
        return results

    def _post(self, body: bytes) -> bytes:
        cause: BaseException | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                return self._attempt(body)
            except _Fatal as exc:
                raise RetrievalError(f"retrieval server {self.url}: {exc}") from exc
            except (OSError, http.client.HTTPException) as exc:
                # URLError, HTTPError (retryable codes only reach here), TimeoutError,
                # ConnectionError and RemoteDisconnected/IncompleteRead are all transient.
                cause = exc
        raise RetrievalError(f"retrieval server {self.url} failed after {self.retries + 1} "
                             f"attempt(s): {type(cause).__name__}: {cause}") from cause

    def _attempt(self, body: bytes) -> bytes:
        deadline = time.monotonic() + self.timeout
        return _WORKERS.run(lambda: self._fetch(body, deadline), self.timeout)

    def _fetch(self, body: bytes, deadline: float) -> bytes:
        if not self._direct:
            return self._fetch_via_urllib(body, deadline)
        connection, reused = self._connection()
        try:
            try:
                response = self._send(connection, body)
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                if not reused:
                    raise
                # the server closed the idle connection: a fresh one, same attempt
                connection.close()
                connection, reused = self._connection(fresh=True)
                response = self._send(connection, body)
            if response.status == 429 or response.status >= 500:
                raise _Retryable(f"HTTP {response.status} {response.reason}")
            if response.status >= 400:
                detail = response.read(_SHOWN_BODY_CHARS).decode("utf-8", "replace")
                raise _Fatal(f"HTTP {response.status} {response.reason}: {detail!r}")
            data = self._read(response, deadline)
        except BaseException:
            connection.close()
            raise
        if response.will_close:
            connection.close()
        else:
            with self._lock:
                self._idle.append(connection)
        return data

    def _connection(self, fresh: bool = False) -> tuple[http.client.HTTPConnection, bool]:
        if not fresh:
            with self._lock:
                if self._idle:
                    return self._idle.pop(), True
        scheme, host, port, _ = self._target
        kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        return kind(host, port, timeout=self.timeout), False

    def _send(self, connection: http.client.HTTPConnection, body: bytes
              ) -> http.client.HTTPResponse:
        connection.request("POST", self._target[3], body=body,
                           headers={"Content-Type": "application/json",
                                    "Accept": "application/json"})
        return connection.getresponse()

    def _read(self, response, deadline: float) -> bytes:
        chunks: list[bytes] = []
        size = 0
        # read1 returns whatever one socket read gives, so the deadline is checked often
        # even when the server sends a byte at a time.
        while chunk := response.read1(1 << 16):
            size += len(chunk)
            if size > self.max_response_bytes:
                raise _Fatal(f"response larger than {self.max_response_bytes} bytes")
            if time.monotonic() > deadline:
                raise TimeoutError(f"response not complete within {self.timeout:g} s")
            chunks.append(chunk)
        response.close()  # read to its end: the connection may carry the next request
        return b"".join(chunks)

    def _fetch_via_urllib(self, body: bytes, deadline: float) -> bytes:
        request = urllib.request.Request(
            self.url, data=body, method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return self._read(response, deadline)
        except urllib.error.HTTPError as exc:
            if exc.code == 429 or exc.code >= 500:
                raise
            detail = exc.read(_SHOWN_BODY_CHARS).decode("utf-8", "replace")
            raise _Fatal(f"HTTP {exc.code} {exc.reason}: {detail!r}") from exc

    def _parse(self, body: bytes, n_queries: int, k: int) -> list[list[Passage]]:
        try:
            document = json.loads(body)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise RetrievalError(f"retrieval server {self.url}: malformed JSON ({exc}): "
                                 f"{body[:_SHOWN_BODY_CHARS]!r}") from exc
        result = document.get("result") if isinstance(document, dict) else None
        if not isinstance(result, list) or len(result) != n_queries:
            raise RetrievalError(f"retrieval server {self.url}: expected {{'result': [...]}} "
                                 f"with {n_queries} lists, got {body[:_SHOWN_BODY_CHARS]!r}")
        try:
            return [[_passage(item) for item in hits[:k]] for hits in result]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise RetrievalError(f"retrieval server {self.url}: malformed hit ({exc})") from exc


def _passage(item: Any) -> Passage:
    # {"document": ..., "score": ...} when scored; a bare corpus row never has a
    # "document" field, so its presence tells the two answer shapes apart.
    if isinstance(item, dict) and "document" in item:
        document, score = item["document"], item["score"]
    else:
        document, score = item, 0.0
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise ValueError(f"score must be a number, got {score!r}")
    if isinstance(document.get("contents"), str):
        title, text = split_contents(document["contents"])
    else:
        title, text = document.get("title", ""), document["text"]
        if not isinstance(title, str) or not isinstance(text, str):
            raise ValueError(f"title/text must be strings in {document!r}")
    pid = document.get("id", "")
    if not isinstance(pid, (str, int)) or isinstance(pid, bool):
        raise ValueError(f"id must be a string or an integer, got {pid!r}")
    return Passage(id=str(pid), title=title, text=text, score=float(score))
