"""Argument vectors of delegated agents: pure functions, no I/O.

A run is `executable fixed_args [model_args] [effort_args] prompt`. A chosen model
or effort is substituted into its placeholder, one argument each, never shell
text; the prompt is one argument and cannot start with `-`, so the CLI never
reads it as a flag, nor with the adapter's file prefix (pi's `@`), so it is never
read as a file to attach. The schema's pattern says both (`prompt_pattern`).
"""

from __future__ import annotations

import re

from ..errors import InvalidArguments
from ..process import MAX_ARG_BYTES as MAX_PROMPT_BYTES  # one argument, the kernel's limit
from .spec import EFFORT, MODEL, Adapter

# 1-128 letters, digits or ._:/@[]-, not starting with '-' or '@'
MODEL_PATTERN = r"^[A-Za-z0-9._:/\[\]][A-Za-z0-9._:/@\[\]-]{0,127}$"
EFFORTS = ("low", "medium", "high", "xhigh", "max")
PROMPT_PATTERN = r"^[^-]"  # no file prefix; prompt_pattern() adds the adapter's

_model_re = re.compile(MODEL_PATTERN)


def check_model(model: str) -> str:
    if not _model_re.fullmatch(model):
        raise InvalidArguments(
            f"model {model[:40]!r} is not a model name: 1-128 letters, digits or ._:/@[]-, "
            f"not starting with - or @ (e.g. sonnet, gpt-5.1-codex)"
        )
    return model


def check_effort(effort: str) -> str:
    if effort not in EFFORTS:
        raise InvalidArguments(f"effort {effort[:20]!r} must be one of {', '.join(EFFORTS)}")
    return effort


def prompt_pattern(adapter: Adapter) -> str:
    """The schema's pattern of the adapter's prompt: what the server refuses at its start, refused there too."""
    return f"^[^-{re.escape(adapter.file_prefix)}]" if adapter.file_prefix else PROMPT_PATTERN


def check_start(adapter: Adapter, prompt: str) -> None:
    """A prompt starting with the adapter's file prefix is a file to attach to its CLI, not the task."""
    if adapter.file_prefix and prompt.startswith(adapter.file_prefix):
        raise InvalidArguments(
            f"a prompt for {adapter.tool_name} cannot start with {adapter.file_prefix!r} ({adapter.executable} "
            f"would read it as a file to attach, not as the task); start it with a word, "
            f"e.g. 'Read README.md and fix the failing test'"
        )


def check_prompt(prompt: str) -> str:
    if not prompt:
        raise InvalidArguments("prompt is empty; say what the agent should do")
    if prompt.startswith("-"):
        raise InvalidArguments("a prompt cannot start with '-' (it would read as a flag); reword it")
    if "\x00" in prompt:
        raise InvalidArguments("the prompt contains a NUL character, which no argument can carry; remove it")
    check_text("the prompt", prompt)
    if len(prompt.encode("utf-8")) > MAX_PROMPT_BYTES:
        raise InvalidArguments(
            f"the prompt is over {MAX_PROMPT_BYTES} bytes, the limit of one argument; write the "
            f"instructions to a file in the workspace and ask the agent to read it"
        )
    return prompt


def check_text(what: str, text: str) -> str:
    """Refuse a lone UTF-16 surrogate (a half of an emoji, as a chat model's JSON may send one): it is
    no text, cannot become an argument or a path, and would fail the call only once it runs."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArguments(
            f"{what} holds a lone surrogate U+{ord(text[exc.start]):04X} at character {exc.start} (half of a "
            f"character such as an emoji), which is not valid UTF-8; send it again as valid text") from None
    return text


def substitute(template: tuple[str, ...], placeholder: str, value: str) -> list[str]:
    """Each argument with the placeholder replaced by `value`; still one argument each."""
    return [arg.replace(placeholder, value) for arg in template]


def build_argv(
    adapter: Adapter,
    executable: str,
    prompt: str,
    *,
    model: str | None = None,
    effort: str | None = None,
) -> list[str]:
    """The full argument vector of one delegated run; refuses what the adapter does not offer."""
    argv = [executable, *adapter.fixed_args]
    if model is not None:
        if not adapter.model_args:
            raise InvalidArguments(f"{adapter.tool_name} offers no model choice here")
        argv += substitute(adapter.model_args, MODEL, check_model(model))
    if effort is not None:
        if not adapter.effort_args:
            raise InvalidArguments(f"{adapter.tool_name} offers no effort choice here")
        argv += substitute(adapter.effort_args, EFFORT, check_effort(effort))
    check_start(adapter, prompt)
    argv += [*adapter.prompt_args, check_prompt(prompt)]
    return argv


def bounded(text: str, limit: int) -> str:
    """`text` cut to `limit` characters with a note of how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"
