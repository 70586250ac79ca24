"""Text handling shared by the environments: the text spaces, templates, and the rule
that model output and retrieved text are data.

- ``CHARSET``: the explicit character set of every observation and action space:
  printable characters of the Basic Multilingual Plane plus newline and tab.
  Gymnasium's default ``Text`` charset is alphanumeric only (no spaces), which no
  prompt satisfies. Characters outside the set (other control characters, astral-plane
  symbols) are replaced by U+FFFD when an env builds an observation.
- ``neutralize_control_tokens``: text that came from a model or a dataset may contain
  strings that a chat template treats as control tokens (``<|im_end|>``, ``</s>``,
  ``[INST]``, ...). Before such text is placed in another agent's prompt its brackets
  are swapped for look-alike characters, so it can never close a turn or open a role.
- ``render``: single-pass placeholder substitution, so a question that itself contains
  ``{feedback}`` or LaTeX braces is never re-expanded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_EXTRA_ALLOWED = "\n\t"


def _build_charset() -> frozenset[str]:
    chars = [chr(c) for c in range(0x20, 0x10000)
             if chr(c).isprintable() and not 0xD800 <= c <= 0xDFFF]
    chars.extend(_EXTRA_ALLOWED)
    return frozenset(chars)


CHARSET: frozenset[str] = _build_charset()
REPLACEMENT_CHAR = "\ufffd"

# Families of chat-template control tokens: ChatML/Llama-3/GPT style <|...|>,
# DeepSeek's full-width <｜...｜>, SentencePiece <s> </s> <unk> <pad>, Llama-2
# [INST] and <<SYS>>, Gemma turn markers and Mistral tool tags.
_CONTROL_TOKEN = re.compile(
    r"<\|[^<>|\n]{0,64}\|>"
    r"|<｜[^<>｜\n]{0,64}｜>"
    r"|</?(?:s|unk|pad|bos|eos|mask|start_of_turn|end_of_turn|think)>"
    r"|\[/?(?:INST|SYS|TOOL_CALLS|AVAILABLE_TOOLS|TOOL_RESULTS)\]"
    r"|<</?SYS>>",
    re.IGNORECASE,
)
_LOOKALIKE = str.maketrans({"<": "‹", ">": "›", "|": "¦", "｜": "¦", "[": "⟦", "]": "⟧"})


def neutralize_control_tokens(text: str) -> str:
    """Swap the brackets of anything that looks like a chat-template control token."""
    return _CONTROL_TOKEN.sub(lambda m: m.group(0).translate(_LOOKALIKE), text)


def neutralize_tags(text: str, names: tuple[str, ...]) -> str:
    """Swap the brackets of the env's own tool tags (``<search>``, ``</information>``...)
    inside untrusted text, so data can never open or close a tagged field."""
    if "<" not in text:
        return text
    pattern = re.compile(r"</?\s*(?:" + "|".join(map(re.escape, names)) + r")\s*>",
                         re.IGNORECASE)
    return pattern.sub(lambda m: m.group(0).translate(_LOOKALIKE), text)


def to_charset(text: str) -> str:
    """Replace characters outside ``CHARSET`` with U+FFFD (cheap for ASCII text)."""
    if text.isascii():
        if all(c in CHARSET for c in text):
            return text
    return "".join(c if c in CHARSET else REPLACEMENT_CHAR for c in text)


def clip(text: str, max_chars: int) -> str:
    """Clip to ``max_chars`` characters, marking the cut so readers know text is missing."""
    if len(text) <= max_chars:
        return text
    marker = " [...]"
    return text[: max(0, max_chars - len(marker))] + marker[: max_chars]


def as_data(text: str, max_chars: int) -> str:
    """Prepare untrusted text (model output, dataset or retrieved text) for a prompt."""
    return clip(to_charset(neutralize_control_tokens(text)), max_chars)


_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill the ``{name}`` placeholders named in ``values`` in one pass.

    Other braces (``\\boxed{}``, ``{x}`` in LaTeX) are left as written; templates are
    checked for their required placeholders when an env is built.
    """

    def fill(match: re.Match[str]) -> str:
        return values.get(match.group(1), match.group(0))

    return _PLACEHOLDER.sub(fill, template)


def placeholders(template: str) -> set[str]:
    return set(_PLACEHOLDER.findall(template))


def named_prompts(prompts: Mapping[str, str] | str,
                  sets: Mapping[str, Mapping[str, str]]) -> Mapping[str, str]:
    """``prompts`` itself, or the set it names (``prompts="example-v1"``)."""
    if not isinstance(prompts, str):
        return prompts
    if prompts not in sets:
        raise ValueError(f"prompts={prompts!r}: expected a mapping of role templates or "
                         f"one of the named sets {sorted(sets)}")
    return dict(sets[prompts])


def check_prompt_overrides(prompts: Mapping[str, str], defaults: Mapping[str, str],
                           required: Mapping[str, set[str | tuple[str, ...]]]) -> None:
    """Fail clearly on an unknown role or a template missing a required placeholder.

    Each requirement is a placeholder name, or a tuple of names of which the template
    must contain at least one."""
    unknown = set(prompts) - set(defaults)
    if unknown:
        raise ValueError(f"prompts has unknown roles {sorted(unknown)}; expected any of "
                         f"{sorted(defaults)}")
    for role, template in prompts.items():
        found = placeholders(str(template))
        needs = [need if isinstance(need, tuple) else (need,) for need in required[role]]
        lacking = sorted(" or ".join(need) for need in needs if not found & set(need))
        if not isinstance(template, str) or lacking:
            wanted = sorted(" or ".join(need) for need in needs)
            raise ValueError(f"prompts[{role!r}] must be a string containing the "
                             f"placeholders {wanted}; missing {lacking}")
