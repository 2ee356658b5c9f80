"""Every error scvd and scvctl raise on purpose, in one tree.

    ScvError                      base; `code` is the wire code, `message` says what to do
    ├── ProtocolError             the peer sent something wrong: an `error` frame, connection stays
    │   ├── InvalidJSON           invalid_json
    │   ├── FrameTooLarge         frame_too_large
    │   ├── NotInitialized        not_initialized
    │   ├── VersionMismatch       version_mismatch (fatal: the connection is closed)
    │   ├── UnknownType           unknown_type
    │   ├── InvalidRequest        invalid_request
    │   │   └── HandoffFailed     invalid_request (fatal): `mcp.attach`'s fds did not come as they should
    │   ├── SessionNotFound       session_not_found
    │   ├── ConversationNotFound  conversation_not_found: chat.open of one with no transcript (removed?)
    │   ├── CallNotFound          call_not_found
    │   ├── ApprovalNotFound      approval_not_found
    │   └── Forbidden             forbidden
    ├── InternalError             internal: our fault, never the peer's
    ├── ToolError                 a call failed; `kind` goes into `call.completed.error`
    │   │                         (raised by a request outside a call: code `failed` plus `kind`)
    │   ├── InvalidArguments      invalid_arguments (outside a call: code invalid_request)
    │   ├── UnknownTool           unknown_tool (outside a call: code invalid_request)
    │   ├── Denied                denied
    │   ├── Cancelled             cancelled
    │   ├── Timeout               timeout
    │   ├── LimitExceeded         limit
    │   ├── Failed                failed
    │   │   ├── PathMissing       failed, naming the first missing component of a workspace path
    │   │   └── SkillError        a skill directory is not a valid skill, or changed
    │   ├── Unavailable           unavailable
    │   │   ├── Stopping          unavailable (fatal): scvd is stopping and will not answer a request
    │   │   └── KeyringRefused    unavailable: the OS keyring refused a secret's read or store, or did not answer
    │   └── CredentialMissing     credential_missing
    └── LocalError                never sent on the wire
        ├── ConfigError           a config file or value is wrong (names the file and key)
        ├── StartupError          the daemon cannot start (lock held, socket in use, ...)
        ├── ToolDefinitionError   a tool definition breaks a design rule (seed 003)
        ├── ScriptDefinitionError a script tool's tool.json breaks a rule (listed as a load error)
        ├── ProviderFailure       a chat turn's model could not answer (a turn.failed event)
        ├── DaemonNotRunning      client side: nothing answers on the socket
        │   ├── DaemonNotAnswering  client side: the socket accepts, but no answer comes in time
        │   ├── NotScvd           client side: what is at the socket's path is not scvd (a file, another server)
        │   └── SocketGone        client side: scvd runs (it holds the instance lock) but its socket is gone
        │       └── SocketElsewhere  client side: scvd runs, listening on another path than this environment's
        ├── ConnectionClosed      client side: the daemon closed the connection
        ├── UsageError            client side: a command line that cannot work (scvctl exits 2)
        ├── NotARegularFile       a file scvd reads (config.toml, tool.json) is a FIFO, socket, ...
        ├── UnreadableFile        a file scvd reads (its codex home's config.toml) is not UTF-8 or not valid TOML
        └── JsonRpcError          `scvctl mcp`'s server in scvd: a JSON-RPC error answered to the MCP host

`error_code()` and `public_message()` turn any exception into the `error` frame a
peer sees; an exception that is not an ScvError (or is a LocalError) becomes
`internal` with no detail leaked. The client turns each wire code (and a tool
error's kind) back into the class here: see scvctl/client.py. `shown()` is the line
a person reads: the kind of a tool error, else the code, then the message.
"""

from __future__ import annotations

from pathlib import Path


class ScvError(Exception):
    """Base of all scvd errors: a wire code plus a message that says what to do."""

    code = "internal"
    fatal = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProtocolError(ScvError):
    """The peer is at fault; answered with an error frame, the connection stays open."""


class InvalidJSON(ProtocolError):
    """A frame that is not a JSON object."""

    code = "invalid_json"


class FrameTooLarge(ProtocolError):
    """A frame longer than the negotiated limit."""

    code = "frame_too_large"


class NotInitialized(ProtocolError):
    """A request before the `hello` handshake."""

    code = "not_initialized"


class VersionMismatch(ProtocolError):
    """A `hello` with a protocol version this server does not speak."""

    code = "version_mismatch"
    fatal = True


class UnknownType(ProtocolError):
    """A frame whose `type` names no request."""

    code = "unknown_type"


class InvalidRequest(ProtocolError):
    """A well-formed frame whose fields are wrong."""

    code = "invalid_request"


class HandoffFailed(InvalidRequest):
    """`mcp.attach`: the fds did not come, or not two of them. Fatal: what the peer sends next
    could be a late fd message, which the frame reader would read as bytes and lose the fds."""

    fatal = True


class SessionNotFound(ProtocolError):
    """A session id this connection does not hold."""

    code = "session_not_found"


class ConversationNotFound(ProtocolError):
    """chat.open names a conversation scvd has no transcript of: never opened here, or removed
    (chat.transcript_days). A bridge that stored the id starts a new conversation."""

    code = "conversation_not_found"


class CallNotFound(ProtocolError):
    """A call id that is not pending or running."""

    code = "call_not_found"


class ApprovalNotFound(ProtocolError):
    """An approval id that is not pending."""

    code = "approval_not_found"


class Forbidden(ProtocolError):
    """The peer may not do this (another uid, or a process scvd spawned)."""

    code = "forbidden"


class InternalError(ScvError):
    """A bug or an unexpected OS failure in scvd itself."""

    code = "internal"


class ToolError(ScvError):
    """A tool call failed; `kind` is the error kind in `call.completed`, `reason` the wire's marker
    of why (STOP_REASON: scvd refused or cancelled it as it stops), None for any other failure."""

    code = "failed"
    kind = "failed"

    def __init__(self, message: str, *, hint: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.hint, self.reason = hint, reason


class InvalidArguments(ToolError):
    """The arguments do not fit the tool's schema or limits; refused before approval."""

    code = "invalid_request"
    kind = "invalid_arguments"


class UnknownTool(ToolError):
    """No tool of that name is registered."""

    code = "invalid_request"
    kind = "unknown_tool"

    @classmethod
    def not_loaded(cls, name: str, why: str) -> UnknownTool:
        """A call of a tool that failed to load, `why` its hub's not_loaded(): the same words on the
        socket and to a chat's model."""
        return cls(f"no tool named {name!r} is loaded: {why}; `scvctl tools --errors` lists the tools that "
                   "failed to load")


class Denied(ToolError):
    """The approval was denied, timed out, or the policy forbids the call."""

    kind = "denied"


class Cancelled(ToolError):
    """The call was cancelled by `call.cancel`, a disconnect, or shutdown."""

    kind = "cancelled"


class Timeout(ToolError):
    """The call ran past its deadline."""

    kind = "timeout"


class LimitExceeded(ToolError):
    """A size or count limit was reached; `why` is the message without what a socket client is told to
    do (wait for call.completed, send call.cancel), for a client that cannot (an MCP host), else None."""

    kind = "limit"

    def __init__(self, message: str, *, why: str | None = None, hint: str | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message, hint=hint, reason=reason)
        self.why = why


class Failed(ToolError):
    """The tool ran and failed."""

    kind = "failed"


class PathMissing(Failed):
    """A component of a workspace path does not exist; `missing` is the first missing prefix and
    `directory` the real directory the path's file would be in (symlinks followed), when known."""

    def __init__(self, message: str, *, missing: str, directory: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.missing, self.directory = missing, directory


class SkillError(Failed):
    """A skill directory is not a valid skill, or a mapped skill changed; the message says why."""


class Unavailable(ToolError):
    """Something the tool needs is missing (an executable, bwrap, ...)."""

    kind = "unavailable"


class Stopping(Unavailable):
    """scvd is stopping with a request unanswered. Fatal, the one fatal `unavailable`: a client reads it
    as scvd going away (DaemonNotAnswering: try again), not as a request that failed."""

    fatal = True

    def __init__(self, message: str) -> None:
        super().__init__(message, reason=STOP_REASON)


class KeyringRefused(Unavailable):
    """The OS keyring refused (locked, usually) or did not answer; `what` says which keyring could not
    do what, and why, without the way on (`list` shows it beside a name it cannot tell)."""

    def __init__(self, message: str, *, what: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.what = what


class CredentialMissing(ToolError):
    """A credential is missing or was rejected: a secret a tool needs, or an agent's sign-in."""

    kind = "credential_missing"

    def __init__(self, message: str, *, hint: str | None = None, keys: tuple[str, ...] = ()) -> None:
        super().__init__(message, hint=hint)
        self.keys = keys  # the secrets' names, where known: what store_secret would heal


class LocalError(ScvError):
    """Raised and handled on one side; never sent as an `error` frame (if one is, it is our bug)."""


class ConfigError(LocalError):
    """The configuration is wrong; the message names the file and the key path."""

    code = "config"


class StartupError(LocalError):
    """The daemon cannot start; the message says why and what to do."""

    code = "startup"


class ToolDefinitionError(LocalError):
    """A tool definition breaks one of the tool design rules; names the tool and the rule."""

    code = "tool_definition"

    def __init__(self, tool: str, rule: str, text: str, others: str = "") -> None:
        super().__init__(f"tool {tool!r} breaks rule {rule!r}: {text}")
        self.tool = tool
        self.rule = rule
        self.others = others  # `; and rule 'R': text` for each other rule it breaks, where no lint list shows them


class ScriptDefinitionError(LocalError):
    """A script tool's tool.json breaks a rule; names the rule, `source` the file. A load error."""

    code = "tool_definition"

    def __init__(self, source: Path | str, rule: str, text: str) -> None:
        super().__init__(f"rule {rule!r}: {text}")
        self.source = str(source)
        self.rule = rule


class ProviderFailure(LocalError):
    """The model could not answer a chat turn; `reason` is turn.failed's (auth or provider_error)."""

    code = "provider"

    def __init__(self, reason: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.reason, self.hint = reason, hint


class DaemonNotRunning(LocalError):
    """Nothing answers on the socket."""

    code = "not_running"


class DaemonNotAnswering(DaemonNotRunning):
    """The socket accepts, but scvd sends nothing within the client's timeout (hung, or not started),
    or closes the connection before its welcome (stopping, or restarting)."""

    code = "not_answering"


class NotScvd(DaemonNotRunning):
    """What is at the socket's path is not scvd: no socket at all, or a server that answers no scvd frame."""

    code = "not_scvd"


class SocketGone(DaemonNotRunning):
    """scvd runs (it holds the instance lock) but its socket's path no longer reaches it (removed)."""

    code = "socket_gone"


class SocketElsewhere(SocketGone):
    """scvd runs (it holds the instance lock) but listens on another path than this environment computes."""

    code = "socket_elsewhere"


class ConnectionClosed(LocalError):
    """The daemon closed the connection; `detail` is what the socket said of it (a reset), if anything."""

    code = "connection_closed"

    def __init__(self, message: str = "scvd closed the connection", *, detail: str = "") -> None:
        super().__init__(f"{message} ({detail})" if detail else message)
        self.detail = detail


class UsageError(LocalError):
    """Client side: a command line that cannot work (scvctl prints `usage: <message>`, exit 2)."""

    code = "usage"


class NotARegularFile(LocalError):
    """paths.read_regular_file refused the path: a FIFO would block its reader for good."""

    def __init__(self, path: Path | str, kind: str) -> None:
        super().__init__(f"{path} is {kind}, not a regular file")
        self.kind = kind  # "a FIFO", "a directory", ...: for a message whose source names the path


class UnreadableFile(LocalError):
    """A file scvd reads is not in its format (not UTF-8, not valid TOML); the message names the file."""


class JsonRpcError(LocalError):
    """A JSON-RPC error for the MCP host; `rpc_code` is its integer code."""

    code = "jsonrpc"

    def __init__(self, rpc_code: int, message: str) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code


def _on_wire(exc: BaseException) -> bool:
    return isinstance(exc, ScvError) and not isinstance(exc, LocalError)


def error_code(exc: BaseException) -> str:
    """The wire code for an exception; anything unexpected is `internal`."""
    return exc.code if _on_wire(exc) else "internal"  # type: ignore[attr-defined]


def error_kind(exc: BaseException) -> str | None:
    """A tool error's kind, which the `error` frame carries next to its code."""
    return exc.kind if isinstance(exc, ToolError) else None


def error_reason(exc: BaseException) -> str | None:
    """A tool error's wire reason (STOP_REASON), which the `error` frame carries next to its kind."""
    return exc.reason if isinstance(exc, ToolError) else None


def public_message(exc: BaseException) -> str:
    """What a peer may read: our own message, or a generic line for a bug."""
    if _on_wire(exc):
        return exc.message  # type: ignore[attr-defined]
    return "internal error in scvd; see the daemon log (journalctl --user -u scvd)"


def shown(exc: ScvError) -> str:
    """`kind: message` for a tool error (the kind a failed call shows: `limit`, not the wire code
    `failed` it came under), else `code: message`."""
    return f"{exc.kind if isinstance(exc, ToolError) else exc.code}: {exc.message}"


# the human words of a call or turn scvd cancels or refuses as it stops (`call <id> was cancelled: scvd
# is stopping`, `scvd is stopping; no new calls are accepted`); a client reads STOP_REASON, not these
STOPPING = "scvd is stopping"
# the wire's `reason` on those (an error frame, call.completed's error): scvd going away, not a failure
STOP_REASON = "stopping"


class BatchCut(OSError):
    """Outside the tree, an OSError as the write's own: a chat transcript's batch write failed and so
    did cutting off the part that went in; its first `written` records are in the file (the caller
    keeps only the rest, or they would be there twice)."""

    def __init__(self, err: int, message: str, written: int) -> None:
        super().__init__(err, message)
        self.written = written


class NotMcpLine(ValueError):
    """Outside the tree, as the MCP SDK's own: a line on a stdio server's stdout the SDK refused, as
    the session's message handler gets it (scvd/mcp/not_mcp.py): its first `kept` chars, its size,
    and whether it answers a request of scvd's (`answers`; None when not known)."""

    def __init__(self, line: bytes, answers: bool | None, kept: int) -> None:
        super().__init__("a line on the server's stdout is not MCP's JSON-RPC")
        line = line.rstrip()
        self.head, self.size, self.answers = line[:kept].decode("utf-8", "replace"), len(line), answers
