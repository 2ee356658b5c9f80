"""The shapes of a conversation: history items, transcript records, a model request and its events.

History items are provider-neutral; the providers translate them to their wire
API. The same Structs are the transcript's records, so the file and the memory
never disagree. No I/O here.
"""

from __future__ import annotations

from typing import Any, Union, get_args

import msgspec


class Record(msgspec.Struct, tag_field="kind", omit_defaults=True, kw_only=True):
    """Base of every transcript line; `kind` names it."""


class ToolCall(msgspec.Struct, omit_defaults=True):
    """One tool call the model asked for; `arguments` is the model's JSON text."""

    call_id: str
    name: str
    arguments: str = "{}"


class UserText(Record, tag="user"):
    """What the person (or the bridge) said; also background results handed to the model."""

    text: str
    turn: str = ""
    note: str = ""  # a handed-over background result: its call's id (the `note` record it takes up)


class ScvdNote(Record, tag="scvd"):
    """scvd's own word to the model about the conversation (a turn cut off before its answer): the
    model reads it as user text, but it is nobody's message, so history and trimming tell it apart."""

    text: str
    turn: str = ""


class AssistantReply(Record, tag="assistant"):
    """One model reply: text, tool calls, or both."""

    text: str = ""
    calls: list[ToolCall] = []
    turn: str = ""


class ToolOutput(Record, tag="tool"):
    """A tool call's result as the model reads it (JSON text), paired with its call by `call_id`."""

    call_id: str
    name: str
    output: str
    turn: str = ""


class NoteArrived(Record, tag="note"):
    """A background call's result, waiting to be handed to the model as user text before its next request."""

    call_id: str
    text: str


class SchemasLoaded(Record, tag="schemas"):
    """Tools whose full schema this conversation has fetched (find_tools or a first call), or found
    again: the records' order is the order of use that unloads the least recently used."""

    names: list[str]


class TurnEnded(Record, tag="turn"):
    """How a turn ended and what it used."""

    turn: str
    status: str  # completed | cancelled | failed
    usage: dict[str, int] = {}
    reason: str = ""


class Cleared(Record, tag="clear"):
    """chat.clear: everything before this line is forgotten."""


class Opened(Record, tag="open"):
    """The conversation's settings, written once when it is created."""

    workspace: str
    provider: str = ""
    system_prompt: str = ""
    tools: Union[str, list[str]] = "all"


class Unreadable(Record, tag="unreadable"):
    """A transcript line that could not be read back (damaged), in its place: never written, so
    that what the model reads says a record is missing there rather than joining its neighbours."""

    line: int
    newer: bool = False  # JSON, but no record this scvd knows: a newer scvd's


HistoryItem = Union[UserText, ScvdNote, AssistantReply, ToolOutput]
HISTORY = get_args(HistoryItem)  # for isinstance
AnyRecord = Union[UserText, ScvdNote, AssistantReply, ToolOutput, NoteArrived, SchemasLoaded, TurnEnded, Cleared,
                  Opened]


# --- the provider seam's data ------------------------------------------------------------


class ToolSpec(msgspec.Struct):
    """A tool as the model sees it: its full schema."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest(msgspec.Struct):
    """One request to the model."""

    instructions: str
    items: list[Any]  # HistoryItem
    tools: list[ToolSpec]


class TextDelta(msgspec.Struct):
    """Part of the reply's text, as it streams."""

    text: str


class CallRequested(msgspec.Struct):
    """A complete tool call in the reply."""

    call: ToolCall


class Usage(msgspec.Struct):
    """Tokens one request used."""

    input_tokens: int = 0
    output_tokens: int = 0


class ReplyDone(msgspec.Struct):
    """The reply is complete."""

    usage: Usage = msgspec.field(default_factory=Usage)


ModelEvent = Union[TextDelta, CallRequested, ReplyDone]
