import os
import re
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # make test's two workers share the 2 cores: one thread each (and in the processes
    # they start), where two threads each made every torch op wait on the other worker
    # (the router test took 90 s in a worker against 11 s alone)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def optional_dependencies() -> dict[str, list[str]]:
    """pyproject.toml's extras and their requirements, read without tomllib (which
    Python 3.10 lacks): each ``name = [...]`` of ``[project.optional-dependencies]``."""
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    table = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return {name: re.findall(r'"([^"]+)"', body)
            for name, body in re.findall(r"^([\w-]+)\s*=\s*\[(.*?)\]", table, re.M | re.S)}


def base_dependencies() -> list[str]:
    """pyproject.toml's ``[project] dependencies`` (what ``pip install -e .`` installs),
    by distribution name."""
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    body = re.search(r"^dependencies = \[(.*?)^\]", text, re.M | re.S).group(1)
    return [re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0]
            for req in re.findall(r'^\s*"([^"]+)"', body, re.M)]


def shared_file(*parts: str) -> Path:
    """A file of ../shared/data, or a skip naming what is missing."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"benchmark data {path} is absent (it lives in ../shared/data beside "
                    f"the repository)")
    return path


@pytest.fixture
def one_torch_thread():
    """One torch thread for a test that compares weights bit for bit: with two, a
    reduction (the embedding's backward, a matmul's split) may sum in another order from
    run to run, so two runs of the same update differ in the last bits."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_loopback_proxy(monkeypatch):
    """urllib consults no_proxy on every request; the test servers are all on 127.0.0.1."""
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def math_tiny_dir(tmp_path_factory):
    """A tiny policy folder whose tokenizer read 300 math-parallel questions."""
    from srpo_agents.tiny import build_tiny_policy
    from srpo_envs import math_v0

    env = math_v0.parallel_env(workflow="parallel", seed=0)
    texts = [env.task(i).question + env.task(i).solution for i in range(300)]
    out = tmp_path_factory.mktemp("tiny")
    build_tiny_policy(texts, out, hidden_size=64, num_layers=2, num_heads=2, seed=0)
    return out
