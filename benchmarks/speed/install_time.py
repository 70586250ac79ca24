"""How long ``make demo``'s install takes, with pip byte-compiling what it installs and
without (issue 61: the demo in a fresh clone, install included, within 5 minutes).

    python benchmarks/speed/install_time.py [--rounds 1]

Each round makes two fresh venvs and installs into them what ``make demo`` installs
(torch, then this project), one with pip's default byte-compiling and one with
``--no-compile``, alternating; then times importing the demo in each, twice (with
``PYTHONDONTWRITEBYTECODE`` as the environment has it: set, nothing compiled on import is
kept, so every process compiles again). Packages come from pip's cache and the machine's
wheel folders as the Makefile's install finds them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from srpo_bench.machine import describe, write_results

ROOT = Path(__file__).resolve().parents[2]
IMPORT = "import srpo_agents.running.demo, transformers, torch"


def timed(command: list[str], **kwargs) -> float:
    tick = time.monotonic()
    subprocess.run(command, check=True, capture_output=True, **kwargs)
    return time.monotonic() - tick


def install(venv: Path, compile_: bool) -> dict:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True,
                   capture_output=True)
    flag = [] if compile_ else ["--no-compile"]
    pip = [python, "-m", "pip", "install", "--quiet", *flag]
    torch_s = timed(pip + ["torch==2.13.0"])
    project_s = timed(pip + ["-e", str(ROOT)])
    imports = [timed([python, "-c", IMPORT], cwd=ROOT) for _ in range(2)]
    return {"compile": compile_, "torch_s": torch_s, "project_s": project_s,
            "install_s": torch_s + project_s, "first_import_s": imports[0],
            "second_import_s": imports[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--note", default="", help="a sentence on how the run shared the CPU")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for compile_ in (True, False):
                rows.append({"round": round_, **install(Path(scratch) / f"{round_}-{compile_}",
                                                        compile_)})
    lines = ["# `make demo`'s install, with and without byte-compiling", "",
             f"Command: `python benchmarks/speed/install_time.py --rounds {args.rounds}`", "",
             f"Machine: {describe()}; PYTHONDONTWRITEBYTECODE="
             f"{os.environ.get('PYTHONDONTWRITEBYTECODE', 'unset')}. {args.note}".rstrip(), "",
             "| round | pip compiles | torch s | project s | install s | import demo s "
             "(first / second) |", "|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['round']} | {'yes' if r['compile'] else 'no (--no-compile)'} | "
                     f"{r['torch_s']:.1f} | {r['project_s']:.1f} | {r['install_s']:.1f} | "
                     f"{r['first_import_s']:.1f} / {r['second_import_s']:.1f} |")
    write_results("install_time", lines, rows)


if __name__ == "__main__":
    main()
