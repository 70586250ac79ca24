"""A Search-R1-style HTTP server on 127.0.0.1 for the retriever tests."""

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def serve(respond):
    """Run a ThreadingHTTPServer on 127.0.0.1; ``respond(path, body)`` -> (status, bytes)."""
    requests = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            requests.append((self.path, json.loads(body), self.headers.get("Content-Type")))
            status, payload = respond(self.path, json.loads(body), release)
            with contextlib.suppress(OSError):  # the client may have given up already
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    # A short poll interval makes shutdown() quick; the default is 0.5 s per server.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        release.set()
        server.shutdown()
        server.server_close()
