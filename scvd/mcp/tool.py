"""One MCP server tool as an scvd `Tool`: the server's schema and description, scvd's risk.

The risk is the user's (`tool_risk`, else the server's `risk`): a server's own
`readOnlyHint` is shown to the approver but never trusted. Arguments are checked
against the server's JSON Schema before any approval. No MCP SDK here: the link
(`link.py`) hands over plain data and does the calling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import msgspec

from ..config import server_secrets
from .. import validation_text as vt
from ..errors import Failed, InvalidArguments
from ..process import CappedOutput
from ..text import excerpt, printable
from ..tools.contract import CallContext, Plan, Tool, ToolFlags, ToolRisk
from .spec import named, refused, tool_name

OUTPUT_LIMIT = 1 << 20  # of a result's text; more is cut in the middle with a marker
TOO_LARGE = -32090  # the JSON-RPC error scvd answers a result too large to take in with (skim.py)
# in a result's _meta: the bytes of the structuredContent scvd left out unread, for being above OUTPUT_LIMIT
OMITTED_KEY = "scvd/structuredContentOmittedBytes"
DESCRIPTION_LIMIT = 4096
# of a tool's inputSchema as JSON: a larger one is refused (a load error), or one server's tool
# could push every client's tools.list past server.server_frame_bytes
SCHEMA_LIMIT = 64 << 10


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the server listed it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None

    @cached_property
    def definition(self) -> str:
        """All of it as canonical JSON: what tells a tool listed again from the one listed before. As
        values, a schema holding NaN (which a server may send) differed from itself: NaN != NaN."""
        return json.dumps([self.name, self.description, self.input_schema, self.read_only_hint,
                           self.destructive_hint], sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class CallOutcome:
    """A tools/call result as plain data, the secrets its server was given hidden."""

    is_error: bool
    text: str  # of its content items, capped (render)
    items: list[dict[str, Any]]  # a note per item that is not text
    structured: Any = None
    # the structured content's bytes as compact JSON; above OUTPUT_LIMIT it was left out unread (`structured` None)
    structured_size: int | None = None


class Link(Protocol):
    """What a tool needs from its server's connection."""

    name: str

    def usable(self, tool: str) -> Any:
        """Raise the ToolError a call of `tool` would fail with now (the server is down or starting)."""

    async def call(self, tool: str, arguments: dict[str, Any], progress: Any) -> CallOutcome: ...


def schema_too_large(spec: ToolSpec) -> str | None:
    """Why a tool is left out for the size of its inputSchema, or None when it fits."""
    size = len(json.dumps(spec.input_schema, ensure_ascii=False).encode())
    if size <= SCHEMA_LIMIT:
        return None
    return (f"{named(spec.name)}: its inputSchema is {size} bytes of JSON, above scvd's limit of {SCHEMA_LIMIT}; "
            "the tool is left out (its server's other tools are not): ask the server's author for a smaller schema")


class McpTool(Tool):
    """`mcp__SERVER__TOOL`: forwards a call to the server once scvd's gate let it through."""

    third_party = True
    decode_blocks = True  # jsonschema over arguments of up to client_frame_bytes: seconds, off the loop

    def __init__(self, link: Link, spec: ToolSpec, *, risk: ToolRisk, risk_from: str,
                 timeout: float | None) -> None:
        self.link, self.spec = link, spec
        self.name = tool_name(link.name, spec.name)  # type: ignore[misc]
        self.description = spec.description[:DESCRIPTION_LIMIT]  # type: ignore[misc]
        self.risk = risk  # type: ignore[misc]
        self.risk_from = risk_from
        self.source = f"mcp:{link.name}"
        self.flags = ToolFlags(timeout=timeout)
        self._validator: Any = None

    def input_schema(self) -> dict[str, Any]:
        return self.spec.input_schema

    def timeout_fix(self, config: Any) -> str | None:
        key = f"mcp.servers.{self.link.name}.timeout_seconds"
        if self.flags.timeout is None:
            return f"set {key}, or raise tools.default_timeout_seconds, in config.toml"
        return f"raise {key} in config.toml"

    def secret_keys(self, config: Any) -> frozenset[str]:
        """Its server's: a call fails for want of one when the server could not start with it, or
        refused it (401/403)."""
        return server_secrets(self.link.cfg)

    def decode(self, arguments: Any) -> Any:
        if not isinstance(arguments, dict):
            raise InvalidArguments(f"{self.name}: arguments must be an object")
        arguments, wrong = vt.schema_refusal(arguments, self._errors)
        if wrong is not None:
            raise InvalidArguments(f"{self.name}: {wrong}")
        return arguments

    def _errors(self, arguments: dict[str, Any]) -> list[Any]:
        if self._validator is None:
            import jsonschema  # only when a server is configured, like the SDK
            import referencing

            from ..bounded_regex import install
            from ..schema_keywords import linear

            install()  # its patterns matched with a time bound, the loop free meanwhile (a server's schema)

            cls = jsonschema.validators.validator_for(self.spec.input_schema, jsonschema.Draft202012Validator)
            cls = linear(cls)  # uniqueItems and unevaluated* in one pass: a server's schema may use them
            try:
                # an empty registry: a $ref is looked up in the schema, never fetched (jsonschema's default
                # fetches any URL, before approval); one it cannot resolve leaves the check to the server
                self._validator = cls(self.spec.input_schema, registry=referencing.Registry())
            except Exception:  # a broken schema from the server: let the server judge its own arguments
                self._validator = False
        if self._validator is False:
            return []
        try:
            return vt.schema_errors(self._validator, arguments)
        except Exception:  # a $ref it cannot resolve, a pattern too slow: the server judges them
            return []

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        self.link.usable(self.spec.name)  # a server down (for want of a secret, say): nobody is asked
        arguments = json.dumps(args, ensure_ascii=False)
        shown, note = excerpt(arguments)
        hint = {True: "read-only", False: "not read-only", None: "says nothing"}[self.spec.read_only_hint]
        return Plan(
            risk=self.risk,
            # the name on one line: a server's name with line breaks made lines that read as scvd's details
            summary=f"MCP server {self.link.name}{note}: {printable(named(self.spec.name), keep='')} {shown}",
            details={
                "server": self.link.name, "tool": self.spec.name, "arguments": arguments,
                "risk_from": self.risk_from,
                "server_says": f"{hint} (a server's hint, not trusted by scvd)",
            },
        )

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        report = ctx.progress

        async def progress(done: float, total: float | None, message: str | None) -> None:
            if report is not None:
                of = f"/{total:g}" if total else ""
                report(f"{self.name}: {done:g}{of}" + (f" {message}" if message else ""))

        outcome = await self.link.call(self.spec.name, args, progress)
        text, items = outcome.text, outcome.items
        if outcome.is_error:
            said = f"{self.name}: {text.strip() or 'the server reported an error without text'}"
            raise refused(self.link.name, self.link.cfg, self.spec.name, said) or Failed(said)
        result: dict[str, Any] = {"text": text}
        if items:
            result["content"] = items
        size = outcome.structured_size
        if outcome.structured is not None and size is not None and size + len(text.encode()) <= OUTPUT_LIMIT:
            result["structured_content"] = outcome.structured
        elif size is not None:
            result["structured_content_omitted"] = (f"{size} bytes of JSON, above the {OUTPUT_LIMIT}-byte output "
                                                    "cap with the text; to have it, ask the tool for less")
        return result


def omitted(size: int, meta: Any) -> Any:
    """The rule for a large structuredContent, stdio or HTTP, skimmed or parsed: one of `size` bytes as compact
    JSON above OUTPUT_LIMIT scvd leaves out, its size under OMITTED_KEY in the result's `meta`. That _meta,
    or None: it is kept. A _meta that is no object stays as it is (the SDK refuses the result, as it would have)."""
    if size <= OUTPUT_LIMIT:
        return None
    return {**meta, OMITTED_KEY: size} if isinstance(meta, dict) else meta


def json_size(value: Any) -> int:
    """The bytes of a structuredContent `value` as compact JSON: msgspec's encoder, a C loop (json.dumps of
    10 MB held the loop 0.4 s). Raises Failed for a string no UTF-8 encoder takes (a lone surrogate)."""
    try:
        try:
            return len(msgspec.json.encode(value))
        except (TypeError, OverflowError, msgspec.EncodeError):  # an integer above 64 bits: rare, and slow is fine
            return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    except UnicodeEncodeError:  # a ValueError: the link took it for a broken connection, and restarted the server
        raise Failed("its structuredContent holds a string that is not valid Unicode (a lone surrogate such as "
                     "\\ud800, half of a UTF-16 pair), which JSON cannot carry; report it to the server's "
                     "author") from None


def render(content: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The text of a result (capped at OUTPUT_LIMIT with a marker) and a note per non-text item."""
    out = CappedOutput(OUTPUT_LIMIT)
    items: list[dict[str, Any]] = []
    first = True
    for block in content:
        kind = block.get("type")
        text = block.get("text")
        resource = block.get("resource") if kind == "resource" else None
        if isinstance(resource, dict) and isinstance(resource.get("text"), str):
            text = resource["text"]
        if isinstance(text, str):
            out.feed(("" if first else "\n").encode() + text.encode())
            first = False
            continue
        note = {k: v for k, v in block.items() if k in ("type", "mime_type", "uri", "name")}
        data = block.get("data") or (resource or {}).get("blob")
        if isinstance(data, str):
            note["base64_chars"] = len(data)  # binary is not relayed, only described
        items.append(note)
    return out.text(), items
