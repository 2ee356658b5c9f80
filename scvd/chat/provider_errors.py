"""What a provider's error means for the person: the failures and hints of `openai_api`.

Rule: a hint says what to change (a setting by the name a person edits, a wait, another provider),
and sending again is offered only where it can help (not for a spent quota or a refused key).
"""

from __future__ import annotations

from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import openai

from .. import http_fields
from ..redact import redact
from ..text import printable
from .provider import ProviderFailure, Settings

# OpenAI's 429 for an account out of credit: "send it again later" would never work
QUOTA = "insufficient_quota"
QUOTA_HINT = ("the provider's account has no quota or credit left (sending again will not help): add credit or "
              "raise the limit on the provider's billing page, or use another provider")
# a request longer than the model's window, by the provider's count (OpenAI's code and wording, vLLM's,
# llama.cpp's, Anthropic's): chat.context_tokens at the window is not enough, as scvd only estimates
TOO_LONG_HINT = ("the request was longer than the model's window by the provider's count: set chat.context_tokens "
                 "lower (scvd trims to its own estimate, with a tenth kept free; code and some languages take more "
                 "tokens than it counts), or start afresh with chat.clear")
_TOO_LONG_WORDS = ("context_length_exceeded", "maximum context length", "context window", "context size",
                   "prompt is too long", "too many tokens")
# codes of an error sent inside a stream: HTTP statuses (OpenRouter, LiteLLM) or the API's own names
_KEY_CODES = {"401", "403", "invalid_api_key", "authentication_error", "permission_denied"}
_BUSY_CODES = {"429", "rate_limit_exceeded", "server_error", "overloaded", "overloaded_error", "server_is_overloaded"}


def _too_long(code: Any, message: str) -> bool:
    text = f"{code or ''} {message}".lower()
    return any(word in text for word in _TOO_LONG_WORDS)


def status_failure(where: str, exc: openai.APIStatusError, settings: Settings,
                   secrets: dict[str, str]) -> ProviderFailure:
    """An error status the client gave up on (not 401/403: `auth`)."""
    text, status = detail(exc, secrets), exc.status_code
    wait = asked_wait(exc.response.headers) if status == 429 or status >= 500 else None
    hint = (QUOTA_HINT if exc.code == QUOTA else TOO_LONG_HINT if _too_long(exc.code, text)
            else _too_long_a_wait(wait) if wait is not None and wait > CLIENT_WAITS
            else _status_hint(status, settings))
    return ProviderFailure("provider_error", f"{where} answered {status}: {text}", hint)


# the longest Retry-After the openai client waits out before sending again (its MAX_RETRY_AFTER_DELAY):
# one asking longer is not sent again at all
CLIENT_WAITS = 120


# a wait written as infinity: the client takes it for no wait asked and retries with its own backoff
# (a number too large for a float, 1e400, it takes for a wait too long, and sends nothing again)
_ENDLESS = ("inf", "+inf", "infinity", "+infinity")


def asked_wait(headers: Any) -> float | None:
    """The seconds an answer's Retry-After-Ms or Retry-After asks to wait (a number, or an HTTP date), or None
    (also for a wait written as infinity: the client ignored it, as here)."""
    for name, scale in (("retry-after-ms", 1000), ("retry-after", 1)):
        try:
            value = headers[name]
            return None if value.strip().lower() in _ENDLESS else float(value) / scale
        except (KeyError, ValueError):
            pass
    try:
        return (parsedate_to_datetime(headers["retry-after"]) - datetime.now(timezone.utc)).total_seconds()
    except (KeyError, TypeError, ValueError):  # none, or no date (a naive one cannot be compared: TypeError)
        return None


def _too_long_a_wait(seconds: float) -> str:
    return (f"the provider asked to wait {_span(seconds)} (Retry-After), beyond what scvd waits ({CLIENT_WAITS} s), "
            "so scvd did not send it again: try later")


def _span(seconds: float) -> str:
    """A wait as a person reads it: 90 s, 45 min, 27 h (whole units, rounded down)."""
    if not seconds < 1e9:  # inf, or longer than anyone waits
        return "without end"
    return (f"{seconds:.0f} s" if seconds < 120 else f"{seconds // 60:.0f} min" if seconds < 7200
            else f"{seconds // 3600:.0f} h")


def redirected(where: str, exc: openai.APIStatusError, settings: Settings,
               secrets: dict[str, str]) -> ProviderFailure:
    """A 3xx: scvd follows no redirect, as the client would send the key, a relay's headers and the whole
    conversation to wherever the provider pointed (httpx drops only Authorization on a host change)."""
    response = exc.response
    location = response.headers.get("location", "")
    if not location:
        return ProviderFailure("provider_error", f"{where} answered {exc.status_code} -> nowhere (no Location): "
                               "scvd follows no redirect", f"check the base_url of {table(settings.name)}")
    asked, to = response.request.url, response.url.join(location)
    shown = quoted(http_fields.shown_url(str(to)), secrets)
    # the Location names the endpoint: a base_url is it without what scvd appends (/chat/completions)
    suffix = asked.path.removeprefix(urlsplit(settings.base_url).path.rstrip("/"))
    base = str(to.copy_with(path=to.path.removesuffix(suffix), query=None, fragment=None))
    if suffix and to.path.endswith(suffix) and base.rstrip("/") != settings.base_url.rstrip("/"):
        base = quoted(http_fields.shown_url(base), secrets)  # the hint is not redacted after
        fix = (f"set providers.{settings.name}.base_url = \"{base}\" if you trust it" if settings.name != "codex"
               else f"set base_url = \"{base}\" in your Codex config.toml if you trust it, then run `scvctl agents "
               "import codex` again")
    else:
        fix = (f"the endpoint moved there, but scvd posts to base_url + {suffix or '/'}: check the base_url and "
               f"wire_api of {table(settings.name)}")
    # within the same server the key would go nowhere new: the reason is where the endpoint is now
    same = (to.scheme, to.host, to.port) == (asked.scheme, asked.host, asked.port)
    why = ("the provider moved the endpoint there; scvd follows no redirect" if same
           else "scvd follows no redirect, as it would send your key there")
    return ProviderFailure("provider_error", f"{where} answered {exc.status_code} -> {shown}: {why}", fix)


def in_stream(message: str, code: Any, settings: Settings) -> ProviderFailure:
    """An error the provider sent inside its answer (after a 200, so the client retried nothing);
    its code says what to do: a relay's refused key (401, invalid_api_key), or a busy server."""
    code = str(code or "").lower()
    if _too_long(code, message):
        return ProviderFailure("provider_error", message, TOO_LONG_HINT)
    if code in _KEY_CODES:
        return ProviderFailure("auth", message, settings.auth_hint())
    if code == QUOTA:
        return ProviderFailure("provider_error", message, QUOTA_HINT)
    if code in _BUSY_CODES or code.startswith("5"):
        return ProviderFailure("provider_error", message, "the provider is busy or failed: send the text "
                               "again later")
    return ProviderFailure("provider_error", message, "send the text again; if it fails the same way, the "
                           f"provider's message says why (check the model of {table(settings.name)})")


def cause(exc: Exception) -> str:
    """The lower error under the client's generic "Connection error." (a reset, an incomplete body)."""
    lower = exc.__cause__ or exc.__context__
    return str(lower or exc) or type(lower or exc).__name__


def token_limit(where: str, settings: Settings) -> ProviderFailure:
    """The answer stopped at the output token limit: a tool call in it would be cut, a text unfinished."""
    name = settings.name
    fix = (f"raise {setting(name, 'max_output_tokens')} ({settings.max_output_tokens} now)"
           if settings.max_output_tokens else f"set {setting(name, 'max_output_tokens')} above the server's default")
    return ProviderFailure("provider_error", f"{where} cut the answer off at its output token limit",
                           f"{fix}, or ask for less at a time")


def content_filtered(where: str) -> ProviderFailure:
    """The provider's content filter stopped the answer: what came is not the whole answer."""
    return ProviderFailure("provider_error", f"{where} withheld the rest of the answer: its content filter stopped it",
                           "rephrase the request, or ask the provider's administrator")


def _status_hint(status: int, settings: Settings) -> str:
    """What to do about an error status the client gave up on (401/403 are `auth`, 429 was retried)."""
    name, where_set = settings.name, table(settings.name)
    if status in (400, 413, 422):  # most often a request longer than the model's window
        return ("if it says the input is too long, lower chat.context_tokens (at or below the model's window), or "
                f"start afresh with chat.clear; else check the model and wire_api of {where_set}")
    if status == 404:  # often a server with Chat Completions only, asked with the default wire_api
        where = f"{http_fields.shown_url(settings.base_url).rstrip('/')}/"
        if settings.wire_api == "chat":
            return (f"check the base_url and model of {where_set}: the server has no such endpoint or model "
                    f"(scvd posts to {where}chat/completions)")
        other = (f"set providers.{name}.wire_api = \"chat\"" if name != "codex" else "which codex cannot use, add "
                 "it as a [providers.NAME] with wire_api = \"chat\" to scvd's config.toml and set chat.provider to "
                 "that NAME")
        return (f"check the base_url and model of {where_set}: the server has no such endpoint or model (scvd posts "
                f"to {where}responses, the Responses API; for a server with Chat Completions only, {other})")
    if status >= 500 or status == 429:
        return "the provider failed after scvd's retries: send the text again later"
    return f"check {where_set}"


def table(name: str) -> str:
    """Where provider `name`'s settings are."""
    return ("the imported Codex setup (`scvctl agents import codex`)" if name == "codex"
            else f"[providers.{name}] in config.toml")


def setting(name: str, key: str) -> str:
    """A setting of provider `name` as a person changes it. The imported Codex setup has no such key, and a
    [providers.codex] table would replace the import (its model is required): another table carries one."""
    if name == "codex":
        return f"{key} in a [providers.NAME] table of your own, with chat.provider = \"NAME\" (the imported " \
               f"Codex setup has no {key})"
    return f"providers.{name}.{key}"


DETAIL_CHARS = 300  # of the provider's message, an error body that is no JSON, or a Location


def detail(exc: openai.APIStatusError, secrets: dict[str, str]) -> str:
    """The provider's own message in an error answer, or the start of a body that is no JSON (a proxy's web
    page: the client's message is only `Error code: 500`), its control characters escaped; `secrets` are
    taken out before it is cut (a key cut in two showed its first part)."""
    body, text = exc.body, str(exc.message)
    if isinstance(body, dict):
        body = body.get("error", body)
        if isinstance(body, dict):
            text = str(body.get("message") or body)
    elif isinstance(body, str) and body.strip():
        text = body.strip()
    return quoted(text, secrets)


def quoted(text: str, secrets: dict[str, str]) -> str:
    """A provider's text as a failure quotes it: `secrets` taken out before the cut at DETAIL_CHARS (a
    key cut in two showed its first part), control characters escaped."""
    text = redact(text, secrets)
    return printable(text[:DETAIL_CHARS], keep="") + (" ..." if len(text) > DETAIL_CHARS else "")
