"""``srpo serve-retriever``: a corpus over HTTP with Search-R1's /retrieve protocol."""

from __future__ import annotations

import argparse


def cmd_serve_retriever(args: argparse.Namespace) -> int:
    from srpo_envs.retrieval.server import serve

    serve(args.corpus, backend=args.backend, host=args.host, port=args.port,
          cache_dir=args.cache_dir or None, max_queries=args.max_queries,
          max_topk=args.max_topk)
    return 0


def add_parser(commands) -> None:
    """``srpo serve-retriever`` under ``commands``."""
    sr = commands.add_parser("serve-retriever",
                             help="serve a corpus over HTTP with Search-R1's /retrieve "
                                  "protocol (needs the server extra)")
    sr.add_argument("--corpus", required=True, help="JSONL corpus (id, title, text)")
    sr.add_argument("--backend", default="bm25", choices=["bm25", "rank_bm25", "dense"],
                    help="retriever backend (default: %(default)s)")
    sr.add_argument("--host", default="127.0.0.1",
                    help="address to bind (default: %(default)s, this machine only)")
    sr.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    sr.add_argument("--cache-dir", default="",
                    help="index cache (default: $SRPO_CACHE_DIR or ~/.cache/srpo)")
    sr.add_argument("--max-queries", type=int, default=1024,
                    help="most queries per request (default: %(default)s)")
    sr.add_argument("--max-topk", type=int, default=100,
                    help="largest topk a request may ask (default: %(default)s)")
    sr.set_defaults(run=cmd_serve_retriever)
