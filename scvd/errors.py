"""Every error scvd raises on purpose, in one tree.

    ScvError                      base; `code` is the wire code, `message` says what to do
    ├── ProtocolError             the peer sent something wrong: an `error` frame, connection stays
    │   ├── InvalidJSON           invalid_json
    │   ├── FrameTooLarge         frame_too_large
    │   ├── NotInitialized        not_initialized
    │   ├── VersionMismatch       version_mismatch (fatal: the connection is closed)
    │   ├── UnknownType           unknown_type
    │   ├── InvalidRequest        invalid_request
    │   ├── SessionNotFound       session_not_found
    │   ├── CallNotFound          call_not_found
    │   ├── ApprovalNotFound      approval_not_found
    │   └── Forbidden             forbidden
    ├── InternalError             internal: our fault, never the peer's
    ├── ConfigError               a config file or value is wrong (names the file and key)
    ├── StartupError              the daemon cannot start (lock held, socket in use, ...)
    └── ToolError                 a call failed; `kind` goes into `call.completed.error`
        ├── InvalidArguments      invalid_arguments
        ├── UnknownTool           unknown_tool
        ├── Denied                denied
        ├── Cancelled             cancelled
        ├── Timeout               timeout
        ├── LimitExceeded         limit
        ├── Failed                failed
        │   └── PathMissing       failed, naming the first missing component of a workspace path
        ├── Unavailable           unavailable
        └── CredentialMissing     credential_missing

`error_frame()` turns any exception into the `error` frame a peer sees; an
exception that is not an ScvError becomes `internal` with no detail leaked.
"""

from __future__ import annotations


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


class SessionNotFound(ProtocolError):
    """A session id this connection does not hold."""

    code = "session_not_found"


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


class ConfigError(ScvError):
    """The configuration is wrong; the message names the file and the key path."""

    code = "config"


class StartupError(ScvError):
    """The daemon cannot start; the message says why and what to do."""

    code = "startup"


class ToolError(ScvError):
    """A tool call failed; `kind` is the error kind in `call.completed`."""

    kind = "failed"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class InvalidArguments(ToolError):
    """The arguments do not fit the tool's schema or limits; refused before approval."""

    kind = "invalid_arguments"


class UnknownTool(ToolError):
    """No tool of that name is registered."""

    kind = "unknown_tool"


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
    """A size or count limit was reached."""

    kind = "limit"


class Failed(ToolError):
    """The tool ran and failed."""

    kind = "failed"


class PathMissing(Failed):
    """A component of a workspace path does not exist; `missing` is the first missing prefix."""

    def __init__(self, message: str, *, missing: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.missing = missing


class Unavailable(ToolError):
    """Something the tool needs is missing (an executable, bwrap, ...)."""

    kind = "unavailable"


class CredentialMissing(ToolError):
    """A credential is missing or was rejected: a secret a tool needs, or an agent's sign-in."""

    kind = "credential_missing"


def error_code(exc: BaseException) -> str:
    """The wire code for an exception; anything unexpected is `internal`."""
    return exc.code if isinstance(exc, ScvError) else "internal"


def public_message(exc: BaseException) -> str:
    """What a peer may read: our own message, or a generic line for a bug."""
    if isinstance(exc, ScvError):
        return exc.message
    return "internal error in scvd; see the daemon log (journalctl --user -u scvd)"
