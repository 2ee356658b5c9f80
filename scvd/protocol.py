"""The wire contract of scvd, protocol version 1: msgspec Structs for every frame, no I/O.

Framing is one JSON object per line. Every frame carries its kind in `type`.
Requests (client to server) carry a client-chosen `id` that the answer echoes;
events (pushed by the server) carry a per-connection increasing `seq`.
Wire Structs tolerate unknown fields so peers can evolve; new fields always get
defaults. `FrameReader` splits a byte stream into lines with a bounded buffer.
"""


import dataclasses
import sys
from typing import Annotated, Any, Literal, Union

import msgspec

from . import errors  # imports nothing of scvd: no cycle
from .text import json_bytes, lone_surrogate, well_formed  # imports nothing of scvd either
from .lenient_json import NOT_JSON, TOO_DEEP_JSON, lenient, top_level_id  # nor this, but text
from .frame_limits import DEFAULT_CLIENT_FRAME_LIMIT, DEFAULT_SERVER_FRAME_LIMIT  # noqa: F401 (part of the contract)

PROTOCOL_VERSION = 1

Id = Union[int, str]
# a call_id a client chooses: it names the call in events, approval prompts, the audit log and logs,
# and is typed back in call.cancel (`$(?!\n)`: Python's `$` also matches before a last newline)
CallId = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[!-~]+$(?!\n)")]
CALL_ID_RULE = "a call_id is 1-128 printable ASCII characters, no spaces; or leave it out and scvd picks one"


class Frame(msgspec.Struct, tag_field="type", omit_defaults=True, kw_only=True):
    """Base of every frame; `type` names the kind."""


# --- shared shapes -----------------------------------------------------------


class PeerInfo(msgspec.Struct, omit_defaults=True):
    """Name and version of a client or server."""

    name: str
    version: str = ""


class Limits(msgspec.Struct):
    """Frame size limits in bytes, announced in `welcome`."""

    client_frame_bytes: int
    server_frame_bytes: int


class ToolErrorInfo(msgspec.Struct, omit_defaults=True):
    """Why a call failed: a kind from the list in docs/protocol.md, a message, maybe a hint, and a
    `reason` when scvd cancelled or refused it as it stops (`stopping`)."""

    kind: str
    message: str
    hint: str | None = None
    reason: str | None = None  # a str, not a Literal: a newer scvd's reason must not break an older client


class SessionInfo(msgspec.Struct, omit_defaults=True):
    """One open session."""

    session: str
    workspace: str
    client: str = ""
    opened_at: float = 0.0
    calls: int = 0  # calls accepted in the session since it opened, whatever came of them: not those running


class ToolInfo(msgspec.Struct, omit_defaults=True):
    """One tool as `tools.list` shows it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    risk: str
    flags: dict[str, Any] = {}
    lint: list[str] = []  # seed 003 findings ("rule: text"), only when tools.list asked with lint


class ToolLoadError(msgspec.Struct, omit_defaults=True):
    """A tool that could not be loaded: a bad tool.json, a failed MCP server, ..."""

    source: str  # e.g. the tool.json path
    name: str
    message: str


class McpServerStatus(msgspec.Struct, omit_defaults=True):
    """One configured MCP server as `status` shows it."""

    name: str
    transport: str  # stdio or http
    state: str  # starting, ready, down, stopped; disabled: `enabled = false` in its table, never started
    tools: int = 0
    error: str | None = None  # why it is down, with its stderr tail or the HTTP status
    restarts: int = 0


class ApprovalInfo(msgspec.Struct, omit_defaults=True):
    """A pending approval, as `approval.requested` and `approvals.list` show it."""

    approval_id: str
    session: str
    call_id: str
    tool: str
    risk: str
    workspace: str
    summary: str  # its first line says `[cut: N more chars; see details]` when it does not show everything
    details: dict[str, Any] = {}  # whole: the command, prompt, arguments or content the call will use
    sandboxed: bool = False
    requested_at: float = 0.0
    expires_at: float | None = None
    always_ask: str | None = None  # why it asked whatever grant exists; then approved once only
    requester: str = ""  # the client that sent the call: `"<client>" (pid N, uid N)`, its name quoted


class LaunchSpec(msgspec.Struct, omit_defaults=True):
    """How to run an agent's own command exactly as the daemon would: argv, env, cwd."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    note: str = ""


# --- requests ----------------------------------------------------------------


class Hello(Frame, tag="hello"):
    """First frame of a connection. `approver` asks for this connection's own approvals and, unless
    `answers_secrets` is false (nobody types into this client), store_secret's requests for them;
    false also keeps them from it when it sends approvals.watch."""

    id: Id
    protocol: int
    client: PeerInfo
    approver: bool = False
    answers_secrets: bool = True


class Ping(Frame, tag="ping"):
    """Liveness check; answered with `pong`."""

    id: Id


class Status(Frame, tag="status"):
    """Ask for the daemon's state; answered with `status.result`."""

    id: Id


class SessionOpen(Frame, tag="session.open"):
    """Open a session on a workspace: an absolute path to an existing directory."""

    id: Id
    workspace: str


class SessionClose(Frame, tag="session.close"):
    """Close a session of this connection; its calls are cancelled."""

    id: Id
    session: str


class SessionsList(Frame, tag="sessions.list"):
    """List every open session of the daemon; answered with `sessions`."""

    id: Id


class ToolsList(Frame, tag="tools.list"):
    """List the tools; `system_use` tools only with `include_system`; `lint` adds each tool's findings;
    with `session` (one of this connection's), the tools that session calls, else the current ones."""

    id: Id
    include_system: bool = False
    lint: bool = False
    session: str | None = None


class Call(Frame, tag="call"):
    """Run one tool call in a session; answered with `call.accepted`, then events."""

    id: Id
    session: str
    tool: str
    arguments: dict[str, Any] = {}
    call_id: CallId | None = None
    timeout_seconds: float | None = None
    turn: str | None = None  # the chat turn this call belongs to; per-turn limits count by it


class CallCancel(Frame, tag="call.cancel"):
    """Cancel a call that is waiting for approval, queued, or running."""

    id: Id
    call_id: str


class ApprovalsWatch(Frame, tag="approvals.watch"):
    """Receive every `approval.requested` and `approval.resolved` from now on."""

    id: Id


class ApprovalsList(Frame, tag="approvals.list"):
    """List pending approvals; answered with `approvals`."""

    id: Id


class ApprovalDecide(Frame, tag="approval.decide"):
    """Decide a pending approval. `scope=session` grants that tool at that risk for the session."""

    id: Id
    approval_id: str
    decision: Literal["approve", "deny"]
    reason: str | None = None
    scope: Literal["once", "session"] = "once"


class SecretProvide(Frame, tag="secret.provide"):
    """Answer a `secret.requested` with the value; scvd stores it and tells the tool only that it did."""

    id: Id
    request_id: str
    value: Annotated[str, msgspec.Meta(min_length=1, max_length=65536)]


class SecretDecline(Frame, tag="secret.decline"):
    """Refuse a `secret.requested`; the store_secret call fails with the reason."""

    id: Id
    request_id: str
    reason: str | None = None


class AgentsSpec(Frame, tag="agents.spec"):
    """Ask how to run an agent's login, status or logout command; answered with `agents.launch`."""

    id: Id
    agent: str
    action: Literal["login", "status", "logout"]
    extra_args: list[str] = []


class AgentsImport(Frame, tag="agents.import"):
    """Import an existing Codex setup into the agent's private home."""

    id: Id
    agent: str
    source: str | None = None


class ChatOpen(Frame, tag="chat.open"):
    """Open a chat session on a workspace; `conversation` resumes an earlier one from its transcript."""

    id: Id
    workspace: str
    conversation: str | None = None
    provider: str | None = None  # a [providers.NAME], or "codex"; default chat.provider
    system_prompt: str | None = None
    # None (left out): a resumed conversation's own list, else "all"; "all" said widens a resumed one
    tools: Union[Literal["all"], list[str], None] = None


class TurnStart(Frame, tag="turn.start"):
    """Send the person's text; the model answers in events of a new turn."""

    id: Id
    session: str
    text: str


class TurnCancel(Frame, tag="turn.cancel"):
    """Stop a running turn: its model request and tool calls are cancelled."""

    id: Id
    session: str
    turn: str


class ChatHistory(Frame, tag="chat.history"):
    """The conversation's transcript since it was last cleared; answered with `chat.transcript`.

    Without `limit` and `before` the answer holds every record; a long conversation pages
    back from the newest: `limit` records, then `before` = the last answer's `start`.
    """

    id: Id
    session: str
    limit: Annotated[int, msgspec.Meta(
        ge=1, description="only the newest this many (of those before `before`)")] | None = None
    before: Annotated[int, msgspec.Meta(ge=0, description="only records at positions below this one")] | None = None


class ChatClear(Frame, tag="chat.clear"):
    """Forget the conversation's history (the transcript keeps a `clear` record)."""

    id: Id
    session: str


class QuestionAnswer(Frame, tag="question.answer"):
    """Answer an `ask_user` question of this connection's chat session."""

    id: Id
    session: str
    question_id: str
    answer: str


# 64, the Anthropic API's most, less the prefix a host puts before a server's tool names (Claude Code:
# `mcp__scvd__`, for a server named scvd); at least a start, `_` and 8 hex digits of a hash
HOST_TOOL_NAME, MIN_HOST_TOOL_NAME = 53, 16


class McpAttach(Frame, tag="mcp.attach"):
    """Hand an MCP host's stdio to scvd (`scvctl mcp`): scvd answers `ok` once it has stopped reading
    this connection; the client then sends its stdin and stdout fds (SCM_RIGHTS, one data byte), and
    scvd serves MCP on them in a session on `workspace`, answering `mcp.attached`."""

    id: Id
    workspace: str
    # tool names longer are shortened for the host (scvd/mcp_host/names.py)
    max_tool_name: Annotated[int, msgspec.Meta(ge=MIN_HOST_TOOL_NAME)] = HOST_TOOL_NAME


# requests scvd may answer after later ones of the same connection (docs/protocol.md, Framing): a
# `chat.open` that waits for its conversation's closed session or chat's modules, a `secret.provide`
# while it is stored
ANSWERED_ASIDE = (ChatOpen, SecretProvide)


Request = Union[
    Hello,
    Ping,
    Status,
    SessionOpen,
    SessionClose,
    SessionsList,
    ToolsList,
    Call,
    CallCancel,
    ApprovalsWatch,
    ApprovalsList,
    ApprovalDecide,
    SecretProvide,
    SecretDecline,
    AgentsSpec,
    AgentsImport,
    ChatOpen,
    TurnStart,
    TurnCancel,
    ChatHistory,
    ChatClear,
    QuestionAnswer,
    McpAttach,
]


# --- responses (echo the request id) -----------------------------------------


class Welcome(Frame, tag="welcome"):
    """Answer to `hello`."""

    id: Id
    protocol: int
    server: PeerInfo
    limits: Limits


class Ok(Frame, tag="ok"):
    """A request that has nothing else to say succeeded."""

    id: Id


class Pong(Frame, tag="pong"):
    """Answer to `ping`."""

    id: Id
    time: float


class StatusResult(Frame, tag="status.result"):
    """Answer to `status`."""

    id: Id
    pid: int
    version: str
    protocol: int
    uptime_seconds: float
    sessions: int
    pending_approvals: int
    running_calls: int
    policy: str
    policy_note: str = ""
    sandbox: str = ""
    socket: str = ""
    mcp_servers: list[McpServerStatus] = []
    reload_error: str = ""  # why the last reload was refused (the old configuration runs); "" after one took


class SessionOpened(Frame, tag="session.opened"):
    """Answer to `session.open`."""

    id: Id
    session: str
    workspace: str


class Sessions(Frame, tag="sessions"):
    """Answer to `sessions.list`; `left_out` sessions, the newest, are not listed: with them the answer
    would pass server.server_frame_bytes."""

    id: Id
    sessions: list[SessionInfo]
    left_out: int = 0


class Tools(Frame, tag="tools"):
    """Answer to `tools.list`; `errors` lists tools that could not be loaded."""

    id: Id
    tools: list[ToolInfo]
    errors: list[ToolLoadError] = []


class CallAccepted(Frame, tag="call.accepted"):
    """Answer to `call`: the call is queued. `background` calls do not hold the session lane."""

    id: Id
    call_id: str
    background: bool = False


class Approvals(Frame, tag="approvals"):
    """Answer to `approvals.list`."""

    id: Id
    approvals: list[ApprovalInfo]


class AgentsLaunch(Frame, tag="agents.launch"):
    """Answer to `agents.spec`: run this to act on the agent's private sign-in."""

    id: Id
    agent: str
    action: str
    spec: LaunchSpec | None = None
    unsupported: str | None = None


class AgentsImported(Frame, tag="agents.imported"):
    """Answer to `agents.import`: what was copied and what to watch out for. Never secrets."""

    id: Id
    agent: str
    copied: list[str]
    report: dict[str, Any] = {}
    warnings: list[str] = []


class ChatOpened(Frame, tag="chat.opened"):
    """Answer to `chat.open`: the session for turns, and the conversation id to resume it later."""

    id: Id
    session: str
    conversation: str
    workspace: str
    provider: str
    resumed: bool = False
    notice: str | None = None  # lines of its transcript that could not be read back


class TurnAccepted(Frame, tag="turn.accepted"):
    """Answer to `turn.start`; the turn's events follow."""

    id: Id
    turn: str


class ChatTranscript(Frame, tag="chat.transcript"):
    """Answer to `chat.history`: the transcript's records since the last clear, oldest first.

    `start` is the first record's position (0 is the oldest since the clear); `more` says
    older records exist: ask again with `before` = `start`.
    """

    id: Id
    conversation: str
    records: list[dict[str, Any]]
    start: int = 0
    more: bool = False


class McpAttached(Frame, tag="mcp.attached"):
    """Answer to `mcp.attach`, after the fds: scvd now serves MCP on them, in this session."""

    id: Id
    session: str
    workspace: str


class Error(Frame, tag="error"):
    """A request failed, or a frame could not be read. `fatal` means the server closes.

    `kind` is set when a tool error failed the request (code `failed` or
    `invalid_request`): one of call.completed's error kinds. `reason` is `stopping` when scvd
    refused the request because it is stopping.
    """

    code: str
    message: str
    id: Id | None = None
    fatal: bool = False
    kind: str | None = None
    reason: str | None = None


# --- events (carry seq) -------------------------------------------------------


class CallStarted(Frame, tag="call.started"):
    """A call that waited (for an approval or its turn in the lane) is now running.

    A call that starts at once sends none: it runs from `call.accepted` on."""

    seq: int
    call_id: str
    session: str
    tool: str
    turn: str | None = None


class CallProgress(Frame, tag="call.progress"):
    """A long call is still running."""

    seq: int
    call_id: str
    elapsed_s: float
    timeout_s: float | None = None
    turn: str | None = None
    message: str | None = None  # what the tool itself reported, e.g. an MCP server's progress


class CallCompleted(Frame, tag="call.completed"):
    """Exactly one per call: `ok` with a result, or an error."""

    seq: int
    call_id: str
    ok: bool
    result: Any = None
    error: ToolErrorInfo | None = None
    turn: str | None = None


class ApprovalRequested(Frame, tag="approval.requested"):
    """A call waits for a person's decision."""

    seq: int
    approval_id: str
    session: str
    call_id: str
    tool: str
    risk: str
    workspace: str
    summary: str
    details: dict[str, Any] = {}
    sandboxed: bool = False
    expires_at: float | None = None
    always_ask: str | None = None  # why it asked whatever grant exists; then approved once only
    requester: str = ""


class ApprovalResolved(Frame, tag="approval.resolved"):
    """An approval was decided, timed out, cancelled or dropped; the first decision wins."""

    seq: int
    approval_id: str
    call_id: str
    decision: Literal["approve", "deny"]
    state: str
    reason: str | None = None
    scope: str = "once"
    decided_by: str = ""


class SecretRequested(Frame, tag="secret.requested"):
    """store_secret asks a person for a secret's value: answer `secret.provide` (masked input) or
    `secret.decline`. Sent to approvers only; the value never goes back to the requester."""

    seq: int
    request_id: str
    session: str
    call_id: str
    key: str
    question: str
    tool: str = ""  # the tool that needs the key and will be called again
    expires_at: float | None = None


class SecretResolved(Frame, tag="secret.resolved"):
    """A secret request ended: stored, declined, timed_out or cancelled; the first answer wins."""

    seq: int
    request_id: str
    key: str
    state: str
    reason: str | None = None
    decided_by: str = ""


class TurnStarted(Frame, tag="turn.started"):
    """A turn began."""

    seq: int
    session: str
    turn: str


class AssistantDelta(Frame, tag="assistant.delta"):
    """Part of the model's answer, as it streams."""

    seq: int
    session: str
    turn: str
    text: str


class AssistantCompleted(Frame, tag="assistant.completed"):
    """One whole model reply's text (a turn with tool calls may have several)."""

    seq: int
    session: str
    turn: str
    text: str


class TurnCompleted(Frame, tag="turn.completed"):
    """The turn ended with the model's answer; `usage` sums its requests' tokens."""

    seq: int
    session: str
    turn: str
    usage: dict[str, int] = {}
    warning: str | None = None  # the turn's records could not be written to the transcript (a full disk)


class TurnCancelled(Frame, tag="turn.cancelled"):
    """The turn was cancelled (turn.cancel, or its session closed)."""

    seq: int
    session: str
    turn: str
    reason: str = ""
    warning: str | None = None  # as turn.completed's


class TurnFailed(Frame, tag="turn.failed"):
    """The turn could not finish: provider_error, auth, step_limit, context_limit or cancelled_by_shutdown."""

    seq: int
    session: str
    turn: str
    reason: Literal["provider_error", "auth", "step_limit", "context_limit", "cancelled_by_shutdown"]
    message: str
    hint: str | None = None
    warning: str | None = None  # as turn.completed's


class QuestionAsked(Frame, tag="question.asked"):
    """The model asks the person (ask_user); answer with `question.answer`. It waits without a limit."""

    seq: int
    session: str
    turn: str
    question_id: str
    question: str


class McpDetached(Frame, tag="mcp.detached"):
    """The MCP host handed over by `mcp.attach` is served no more; scvd closes the connection next.

    `ok`: the host closed its stdin and every request was answered; otherwise `reason` says what ended it."""

    seq: int
    session: str
    ok: bool
    reason: str


_REQUESTED_FIELDS = tuple(f for f in ApprovalRequested.__struct_fields__ if f != "seq")


def approval_requested(info: ApprovalInfo) -> ApprovalRequested:
    """A pending approval as the event that announces it (`seq` is stamped per connection)."""
    return ApprovalRequested(seq=0, **{f: getattr(info, f) for f in _REQUESTED_FIELDS})


Response = Union[
    Welcome,
    Ok,
    Pong,
    StatusResult,
    SessionOpened,
    Sessions,
    Tools,
    CallAccepted,
    Approvals,
    AgentsLaunch,
    AgentsImported,
    ChatOpened,
    TurnAccepted,
    ChatTranscript,
    McpAttached,
    Error,
]
Event = Union[CallStarted, CallProgress, CallCompleted, ApprovalRequested, ApprovalResolved, SecretRequested,
              SecretResolved, TurnStarted, AssistantDelta, AssistantCompleted, TurnCompleted, TurnCancelled,
              TurnFailed, QuestionAsked, McpDetached]
ServerFrame = Union[Response, Event]

REQUEST_TYPES = frozenset(t.__struct_config__.tag for t in Request.__args__)

_encoder = msgspec.json.Encoder()
# measured: 978 levels decode on asyncio's loop, 985 on uvloop (the recursion limit less our own stack)
TOO_DEEP = "frame nests arrays or objects too deeply to decode; send flatter JSON (at most about 950 levels)"
_request_decoder = msgspec.json.Decoder(Request)
_server_decoder = msgspec.json.Decoder(ServerFrame)


def encode(frame: Frame) -> bytes:
    """One frame as one line, newline included."""
    try:  # not json_bytes(): one call less on every frame
        return _encoder.encode(frame) + b"\n"
    except UnicodeEncodeError:  # a lone surrogate from outside: the frame still goes out
        return json_bytes(_encoder.encode, frame) + b"\n"


def decode_request(line: bytes) -> Request:
    """Decode a client frame; raise the ProtocolError a peer should see."""
    try:
        return _request_decoder.decode(line)
    except msgspec.ValidationError as exc:
        head = _head(line)
        if isinstance(head.id, _LongId):  # first: the error, whatever it says, cannot carry this id
            raise errors.InvalidRequest(head.id.message()) from exc
        raise _invalid(exc, head.type) from exc
    except msgspec.DecodeError as exc:
        obj = lenient(line, mend=False)  # a lone surrogate escape (half an emoji, a surrogateescape name) is JSON
        if obj is NOT_JSON:
            raise errors.InvalidJSON(f"frame is not valid JSON: {exc}") from exc
        if obj is TOO_DEEP_JSON:  # the escape made msgspec stop before the depth: "not valid JSON" misled
            raise errors.InvalidRequest(TOO_DEEP) from None
        return _convert(obj)
    except RecursionError:  # msgspec decodes nested values recursively, to Python's recursion limit
        raise errors.InvalidRequest(TOO_DEEP) from None


def _convert(obj: Any) -> Request:
    """A frame the json module decoded (`lenient`, unmended), checked as the decoder checks one; its
    lone surrogates made U+FFFD, but in a call's arguments (`_check_arguments`)."""
    try:
        _check_arguments(obj)
        return msgspec.convert(well_formed(obj), Request)
    except msgspec.ValidationError as exc:
        raise _invalid(exc, obj.get("type") if isinstance(obj, dict) else None) from exc
    except RecursionError:
        raise errors.InvalidRequest(TOO_DEEP) from None


def _check_arguments(obj: Any) -> None:
    """Refuse a `call` whose arguments hold a lone surrogate (`surrogate_refusal`); other frames'
    text (a chat message, a note) reads U+FFFD."""
    if isinstance(obj, dict) and obj.get("type") == "call" and (refused := surrogate_refusal(obj.get("arguments"))):
        raise refused


def surrogate_refusal(arguments: Any) -> errors.InvalidArguments | None:
    """Why a call's arguments (an object) are refused when a string in them holds a lone surrogate,
    or None: read as U+FFFD, it would name another file than the one sent (`"caf\\udce9.txt"`, a
    Latin-1 name as json.dumps writes it), or write other text."""
    found = lone_surrogate(arguments) if isinstance(arguments, dict) else None
    if found is None:
        return None
    where, code, at = found
    return errors.InvalidArguments(
        f"argument `{where}` holds a lone surrogate U+{code:04X} at character {at} (half of a UTF-16 pair, or "
        "a byte of a name that is not UTF-8 as json.dumps writes one), which is no text: read as U+FFFD it "
        "would name another file or write other text than the one sent, so nothing was run; send "
        "well-formed text (escape such a name's bytes, e.g. with backslashreplace)")


def _invalid(exc: msgspec.ValidationError, kind: object) -> errors.ProtocolError:
    """The error a peer sees for a frame that is JSON but no request of `type` `kind`."""
    text = str(exc)
    if "Invalid value" in text and "$.type" in text:
        if kind in REQUEST_TYPES:  # the last of two `type`s (the value read last): msgspec refused another
            return errors.InvalidRequest(f"frame has `type` more than once; send it once ({text})")
        return errors.UnknownType(f"unknown frame type {kind!r}; known types: {', '.join(sorted(REQUEST_TYPES))}")
    if "missing required field `type`" in text:
        return errors.InvalidRequest("frame has no `type` field")
    if text.endswith("at `$.call_id`"):  # msgspec's words name the bound, not what the id may hold
        return errors.InvalidRequest(f"invalid frame: {text}; {CALL_ID_RULE}")
    if text.startswith("Invalid enum value") and kind in REQUEST_TYPES:  # `decision`, `scope`: say what they take
        from . import validation_text as vt  # only on a refusal

        struct = next(t for t in Request.__args__ if t.__struct_config__.tag == kind)
        msg, where = vt.split(exc)
        return errors.InvalidRequest(f"invalid frame: `{where}`: {vt.with_values(msg, struct, where)}")
    return errors.InvalidRequest(f"invalid frame: {text}")


def decode_server_frame(line: bytes) -> ServerFrame:
    """Decode a frame the server sent (used by the client)."""
    return _server_decoder.decode(line)


class _Head(msgspec.Struct):
    """Only a frame's `type` and `id`: the other fields are skipped unparsed, so a bad value
    there (a number out of range, 1e400) cannot hide these two from the error."""

    type: Any = None
    id: Any = None


class _RawHead(msgspec.Struct):
    """_Head with the `id` left unparsed: an integer too long to read fails alone, not with `type`."""

    type: Any = None
    id: msgspec.Raw = msgspec.Raw(b"null")


def id_digits() -> int:
    """The longest integer that msgspec reads, its sign counted: 4300 characters, or Python's limit when lower."""
    return min(4300, sys.get_int_max_str_digits() or 4300)


@dataclasses.dataclass(frozen=True, slots=True)
class _LongId:
    """An integer `id` longer than scvd reads (id_digits()): it can be neither read nor echoed,
    so its error goes out without an id (answers keep their order)."""

    length: int

    def message(self) -> str:
        return (f"`id` is an integer {self.length:,} characters long, more than scvd reads ({id_digits():,}); "
                "use a shorter integer or a string")


_head_decoder = msgspec.json.Decoder(_Head)
_raw_head_decoder = msgspec.json.Decoder(_RawHead)
ID_SCAN_BYTES = 64 << 10  # how far into a frame not JSON or nested too deeply its outer `id` is looked for


def _head(line: bytes) -> _Head:
    try:
        return _head_decoder.decode(line)
    except msgspec.DecodeError:  # not an object, a bad `type` / `id` itself, or a lone surrogate escape
        obj = lenient(line)
        return _Head(obj.get("type"), _long(obj.get("id"))) if isinstance(obj, dict) else _raw_head(line)
    except RecursionError:  # msgspec walks even the fields it skips: find the outer `id` without it
        return _scanned(line)


def _scanned(line: bytes) -> _Head:
    """The head of a frame no decoder reads: its outer `id`, found by `top_level_id` within
    ID_SCAN_BYTES (a frame of small alternating brackets takes the scan ~0.3 s per MiB)."""
    return _Head(id=_long(top_level_id(line[:ID_SCAN_BYTES])))


def _long(ident: Any) -> Any:
    """`ident`, or a _LongId for an integer the json module read but msgspec does not (its sign)."""
    if isinstance(ident, int) and len(text := str(ident)) > id_digits():
        return _LongId(len(text))
    return ident


def _raw_head(line: bytes) -> _Head:
    """The head of a frame that neither decoder reads: its `type` still, when only its `id` is
    the trouble (an integer too long to read: a _LongId then)."""
    try:
        head = _raw_head_decoder.decode(line)
    except (msgspec.DecodeError, RecursionError):  # not JSON (a trailing comma, a bracket missing)
        return _scanned(line)
    raw = bytes(head.id)
    return _Head(head.type, _LongId(len(raw)) if raw.lstrip(b"-").isdigit() and len(raw) > id_digits() else None)


def request_id(line: bytes) -> Id | None:
    """The `id` of a frame that failed to decode, so the error can echo it."""
    return _an_id(_head(line).id)


def _an_id(ident: Any) -> Id | None:
    if isinstance(ident, (int, str)) and not isinstance(ident, bool):  # JSON true is no Id
        return ident
    return None


TOO_LARGE_HEAD_BYTES = 4096  # of a line over the limit, kept to find its `id` in (as the MCP host's)


@dataclasses.dataclass(frozen=True, slots=True)
class TooLarge:
    """In place of a line over the limit: its first bytes (TOO_LARGE_HEAD_BYTES, or the limit
    and one if less), where a frame's `id` usually stands."""

    head: bytes

    @property
    def id(self) -> Id | None:
        """The outer object's `id`, if the head holds it whole."""
        return _an_id(top_level_id(self.head))


class FrameReader:
    """Splits bytes into lines; never holds more than `limit` bytes of one line.

    `feed()` returns complete lines. A line over the limit is dropped as it
    streams and reported once as a `TooLarge` (with its first bytes) in its place.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._skipping = False

    def feed(self, data: bytes) -> list[Any]:
        if not self._buf and not self._skipping and data[-1:] == b"\n" and len(data) <= self.limit:
            # whole lines, none of them near the limit (the common case): no copy through the buffer
            return [line for line in data[:-1].split(b"\n") if line and not line.isspace()]
        out: list[Any] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            chunk = data[start:] if nl < 0 else data[start:nl]
            if self._skipping:
                pass
            elif len(self._buf) + len(chunk) > self.limit:
                # report at once, then discard the rest of the line as it streams
                out.append(TooLarge(self._head(chunk)))
                self._buf.clear()
                self._skipping = True
            else:
                self._buf += chunk
            if nl < 0:
                return out
            start = nl + 1
            if not self._skipping and self._buf and not self._buf.isspace():  # no copy, unlike strip()
                out.append(bytes(self._buf))
            self._buf.clear()
            self._skipping = False

    def _head(self, chunk: bytes) -> bytes:
        """The first bytes of the line that `chunk` takes over the limit: as many whatever the
        stream's cuts (the buffer and the chunk hold the limit and one at least)."""
        size = min(TOO_LARGE_HEAD_BYTES, self.limit + 1)
        head = bytes(self._buf[:size])
        return head + chunk[:size - len(head)]

    @property
    def pending(self) -> bool:
        """True while part of a line (or of an oversized one) was read and its newline not yet."""
        return bool(self._buf) or self._skipping

    @property
    def overflowed(self) -> bool:
        """True while the rest of an oversized line is being discarded."""
        return self._skipping
