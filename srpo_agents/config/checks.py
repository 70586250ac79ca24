"""Value checks that more than one section of ``TrainConfig`` uses, and the allowed values."""

from __future__ import annotations

import math
import re
from typing import Any

RETRIEVERS = ("bm25", "rank_bm25", "dense")


DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def check_int(config, name: str, low: int) -> None:
    value = getattr(config, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}={value!r}: expected an int >= {low}")


def check_positive(config, name: str) -> None:
    value = getattr(config, name)
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={value!r}: expected a finite number > 0")


SAMPLING_KEYS = ("temperature", "top_p", "max_new_tokens", "stop")


def check_role_sampling(value: Any) -> None:
    """``role_sampling``: {role: {key: value}} with keys of ``SAMPLING_KEYS``."""
    if not isinstance(value, dict):
        raise ValueError(f"role_sampling={value!r}: expected a JSON object of roles")
    for role, setting in value.items():
        where = f"role_sampling[{role!r}]"
        if not isinstance(setting, dict) or set(setting) - set(SAMPLING_KEYS):
            raise ValueError(f"{where}={setting!r}: expected an object with keys among "
                             f"{SAMPLING_KEYS}")
        temperature, top_p = setting.get("temperature", 1.0), setting.get("top_p", 1.0)
        if not isinstance(temperature, int | float) or not 0 < temperature < math.inf:
            raise ValueError(f"{where}['temperature']={temperature!r}: expected a number > 0")
        if not isinstance(top_p, int | float) or not 0 < top_p <= 1:
            raise ValueError(f"{where}['top_p']={top_p!r}: expected a number in (0, 1]")
        tokens = setting.get("max_new_tokens", 1)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise ValueError(f"{where}['max_new_tokens']={tokens!r}: expected an int >= 1")
        stop = setting.get("stop", [])
        if not isinstance(stop, list | tuple) or not all(isinstance(s, str) and s
                                                         for s in stop):
            raise ValueError(f"{where}['stop']={stop!r}: expected a list of non-empty "
                             f"strings")


FSDP_STRATEGIES = ("", "full_shard", "no_shard")


WEIGHT_SYNCS = ("collective", "object_store")


MINIBATCH_BY = ("episode", "task")
