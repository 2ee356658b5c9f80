"""The append-only audit log: one JSON line per proposal, decision and completion.

Rule: what a call read, wrote or printed never reaches this file, nor any
secret. `record()` keeps only the allow-listed field names below and drops
the rest, so a caller cannot leak a file's content by passing it along; each
value must be a scalar (strings are capped), so no structure smuggles it in.
Rule: a call never waits on the file, nor on formatting its records. On the event
loop's thread, a record is kept as it was given and formatted later, in a turn of
its own with the records of the other calls answered meanwhile: at the flush, or
once FORMAT_BATCH records wait (a turn per call cost a client that shares the
daemon's CPU a few us per call); then buffered and written within
FLUSH_SECONDS (or once BUFFER_BYTES pile up);
decisions and denials are written at once, and so is every record made with
no running loop (a worker thread, a script). Writes are whole lines on an
O_APPEND fd, never interleaved with another writer's; close() writes what is
buffered, and the server's shutdown calls unbuffer(), so a clean stop
(SIGTERM) loses nothing. While writes fail (a full disk), at most BACKLOG_MAX
bytes wait; later records are counted in a `records_lost` line. What a stop cannot
write is counted, said in the log, and kept for the next start's `records_lost` line
(audit_lost.py); a line cut short never stays: readers (jq) stop at it. The file is 0600 and
rotated by size (audit.log -> audit.log.1 -> ... -> audit.log.<keep>); one deleted
or renamed under the daemon is made again at its path at the next flush.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
from msgspec.structs import astuple

from . import audit_lost
from .paths import FILE_MODE, ensure_private_dir

log = logging.getLogger("scvd.audit")

FIELDS = frozenset({
    "tool", "session", "call_id", "risk", "decision", "decided_by", "duration_s",
    "outcome", "error_kind", "approval_id", "policy", "reason", "scope",
    "request_id", "key", "state", "source",  # secret requests: a secret's name and fate, never its value
})
DECIDED_BY_FIELDS = frozenset({"pid", "uid", "client"})
MAX_STRING = 512  # a deny reason is typed by a person; keep a line a line, not a document
EVENT_RE = re.compile(r"[a-z][a-z0-9_.]{0,63}")

FLUSH_SECONDS = 0.5  # the longest a buffered record waits in memory
BUFFER_BYTES = 64 << 10  # or this much, whichever comes first
FORMAT_BATCH = 64  # records kept unformatted before a turn of their own formats them (else the flush does)
UNFORMATTED_MAX = 256  # records kept unformatted before one is formatted at once (a loop that never yields)
BACKLOG_MAX = 16 << 20  # kept in memory while writes fail (a full disk); later records are counted, not kept

_encoder = msgspec.json.Encoder()
_DROP = object()
_EVENTS_SEEN: set[str] = set()
_KINDS_SEEN: set[type[Record]] = set()


DECISION_EVENTS = frozenset({"decision", "secret_resolved"})  # what a person decided


def urgent(event: str, fields: dict[str, Any]) -> bool:
    """Decisions and denials: written at once, before the caller hears of them."""
    return event in DECISION_EVENTS or fields.get("decision") == "deny" or fields.get("error_kind") == "denied"


def redact(fields: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Keep the allow-listed fields with scalar values; return them and the dropped names."""
    if fields.keys() <= FIELDS:  # every call's records: all names allowed, so only the values are looked at
        for value in fields.values():
            kind = type(value)
            if not (kind is str and len(value) <= MAX_STRING or kind in _PLAIN):
                break
        else:
            return fields, []
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for name, value in fields.items():
        kind = type(value)  # the common case inline: an allowed field with a short str or a plain scalar
        if (kind is str and len(value) <= MAX_STRING or kind in _PLAIN) and name in FIELDS:
            kept[name] = value
        elif name not in FIELDS:
            dropped.append(name)
        elif name == "decided_by" and isinstance(value, dict):
            inner = {k: _scalar(v) for k, v in value.items() if k in DECIDED_BY_FIELDS}
            kept[name] = {k: v for k, v in inner.items() if v is not _DROP}
            dropped += [f"decided_by.{k}" for k in value if k not in DECIDED_BY_FIELDS]
        elif (clean := _scalar(value)) is _DROP:
            dropped.append(name)
        else:
            kept[name] = clean
    return kept, dropped


_PLAIN = frozenset({type(None), bool, int, float})
_SCALARS = _PLAIN | {str}


class Record(msgspec.Struct, gc=False, kw_only=True):
    """A record of a kind made for every call (a proposal, a completion) as a Struct, not a dict:
    kept as it is, then formatted by one encode of its fields in their order. Its names besides
    `ts` and `event` are checked against FIELDS once for its class (at its first record); its
    values are checked per record as a dict's are, and one that fails goes through redact()."""

    ts: str = ""  # when add_record() took it (UTC, to the millisecond), set as it is formatted
    event: str = ""  # each kind's: its default


class CallRecord(Record, kw_only=True):
    tool: str
    session: str
    call_id: str


class Proposal(CallRecord, kw_only=True):
    event: str = "proposal"
    risk: str
    policy: str
    decision: str


class Completion(CallRecord, kw_only=True):
    event: str = "completion"
    outcome: str
    error_kind: str | None
    duration_s: float


def _check_kind(kind: type[Record]) -> None:
    names = kind.__struct_fields__[2:]
    wrong = [name for name in names if name not in FIELDS]
    event = kind.__struct_defaults__[1]
    if kind.__struct_fields__[:2] != ("ts", "event") or wrong or not EVENT_RE.fullmatch(event):
        raise ValueError(f"audit record {kind.__name__} must have ts, event (matching {EVENT_RE.pattern}), "
                         f"then only allowed fields; not {wrong}")
    _KINDS_SEEN.add(kind)


def _fields_of(record: Record) -> dict[str, Any]:
    """A record's fields besides ts and event, as add() takes them."""
    return dict(zip(record.__struct_fields__[2:], astuple(record)[2:]))


def _scalar(value: Any) -> Any:
    """A JSON scalar for `value`, or _DROP: containers and unknown objects never pass."""
    kind = type(value)  # exact types first: every call records a few of these
    if kind is str:
        return value if len(value) <= MAX_STRING else value[:MAX_STRING] + "..."
    if kind in _PLAIN:
        return value
    if isinstance(value, enum.Enum):
        value = value.value
    elif isinstance(value, os.PathLike):
        value = os.fspath(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value if len(value) <= MAX_STRING else value[:MAX_STRING] + "..."
    return _DROP


class AuditLog:
    """An append-only JSON-lines file, 0600, rotated when it would pass `max_bytes`."""

    def __init__(self, path: Path, max_bytes: int, keep: int) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()  # tools may record from worker threads
        self._warned: set[str] = set()
        self._closed = False
        self._unformatted: list[tuple[float, str, dict[str, Any] | Record]] = []  # (time, event, fields), in order
        self._format_soon = False  # a turn of their own formats them (FORMAT_BATCH waited)
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._timer: asyncio.TimerHandle | None = None
        self._direct = False  # set by unbuffer(): write each record at once
        # a write failed (a full disk): until one works, only the timer and urgent records try again,
        # not every record past BUFFER_BYTES (each retry writes the whole backlog), and it is logged once
        self._failing = False
        self._lost = 0  # records dropped past BACKLOG_MAX while failing; a `records_lost` line says how many
        self._dropped = 0  # records a stop could not write: the count the marker keeps (audit_lost.py)
        self._marked = False  # a marker's count waits in the buffer: the marker goes once it is written
        ensure_private_dir(self.path.parent)
        self._fd: int | None = None
        self._size = 0
        self._torn = False  # the buffer starts with the tail of a line the file has the head of
        self._head = b""  # that head: a stop that cannot write the tail takes it out again
        self._open()
        self._count_earlier_losses()

    def _open(self) -> int:
        # O_NONBLOCK: a FIFO in its place (a log shipper's) whose reader stopped fails a write, which
        # waits as on a full disk, instead of blocking the event loop, and every client, for good
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(self.path, flags, FILE_MODE)
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)  # an older file, or one made under another umask
        size = st.st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a line cut short (a full disk, then a kill)
            size = self._end_cut_line(fd, size)
        self._fd, self._size = fd, size
        return fd

    def _end_cut_line(self, fd: int, size: int) -> int:
        """Take a record's head out of the file's end, counted lost: readers (jq) stop at a broken line.
        A longer one is no record of scvd's: it is ended, so the first record here is a line of its own."""
        start = audit_lost.last_line_start(fd, size)
        if start is not None:
            os.ftruncate(fd, start)  # frees room: a start on a full disk must not fail
            self._lost += 1
            return start
        try:
            return size + os.write(fd, b"\n")
        except OSError:  # the disk is still full: end it first once there is room (a start must not fail)
            self._buffer.insert(0, b"\n")
            self._buffered += 1
            self._torn = True
            return size

    def _count_earlier_losses(self) -> None:
        """A `records_lost` line first for what an earlier run lost: the marker's count (a stop on a
        full disk) and a record's head cut off the end; written now, or with the first record."""
        kept = audit_lost.take(self.path)
        self._lost += kept
        if not self._lost:
            return
        self._marked = bool(kept)
        self._mark_lost(time.time())
        try:
            self._write_buffer()
        except OSError:  # the disk is still full: the next write carries it, and says so if it fails
            return
        self._forget_marker()

    def _forget_marker(self) -> None:
        if self._marked:
            self._marked = False
            audit_lost.clear(self.path)

    def record(self, event: str, **fields: Any) -> None:
        """Append one line {ts, event, <allowed fields>}; raises OSError when a write at once fails
        (once: while writes keep failing, the timer tries again with it quietly)."""
        self.add(event, fields)

    def add(self, event: str, fields: dict[str, Any]) -> None:
        """record() with the fields as a dict made for this record alone: it is kept until formatted."""
        if event not in _EVENTS_SEEN:
            if not EVENT_RE.fullmatch(event):
                raise ValueError(f"audit event name {event!r} must match {EVENT_RE.pattern}")
            _EVENTS_SEEN.add(event)  # a handful of names: checked once each, not per record
        # urgent(), inlined
        self._keep(event, fields, event in DECISION_EVENTS or fields.get("decision") == "deny"
                   or fields.get("error_kind") == "denied")

    def add_record(self, record: Record) -> None:
        """add() of a Record made for this record alone (a call's proposal and completion)."""
        if type(record) not in _KINDS_SEEN:
            _check_kind(type(record))
        # urgent(), for a record (no kind of them is a DECISION_EVENT)
        self._keep(record.event, record, getattr(record, "decision", None) == "deny"
                   or getattr(record, "error_kind", None) == "denied")

    def _keep(self, event: str, fields: dict[str, Any] | Record, urgent: bool) -> None:
        now = time.time()
        lock = self._lock
        lock.acquire()  # not `with`: its __exit__(None, None, None) costs each record 1,000 instructions
        try:
            if self._closed:
                raise ValueError(f"audit log {self.path} is closed")
            # `fields` is this record's own; its values are scalars or dropped
            self._unformatted.append((now, event, fields))  # behind what came before, urgent or not
            # a flush already due within FLUSH_SECONDS (most records) needs no call to _flush_later
            if urgent or (self._direct or self._timer is None) and not self._flush_later():
                failing = self._failing
                self._format_locked()
                try:
                    self._flush_locked()
                except OSError:
                    # kept: the timer tries again, as for any other record; a failure said already (the
                    # disk still full) is not said again for each decision and denial
                    if not (self._flush_later() and failing):
                        raise
                return
            waiting = len(self._unformatted)
            if waiting >= UNFORMATTED_MAX:
                self._format_locked()
            elif waiting >= FORMAT_BATCH and not self._format_soon:
                self._format_soon = True
                asyncio.get_running_loop().call_soon(self._on_format)
            if self._buffered >= BUFFER_BYTES and not self._failing:
                self._flush_locked()
        finally:
            lock.release()

    def _format_locked(self) -> None:
        """The records that wait, as lines in the buffer, in order."""
        pending, self._unformatted = self._unformatted, []
        if self._failing or self._lost:
            return self._format_backlog(pending)
        buffer, encode, added = self._buffer, _encoder.encode, 0
        for now, event, fields in pending:
            if type(fields) is not dict:  # a Record: its names were checked; its values are looked at in C
                if _SCALARS.issuperset(map(type, astuple(fields))):
                    fields.ts = _timestamp(now)
                    line = encode(fields) + b"\n"
                    if len(line) <= MAX_STRING:
                        buffer.append(line)
                        added += len(line)
                        continue
                fields = _fields_of(fields)
            # most records: allowed names, plain scalars (looked at in C, not in redact's loop) and a line
            # within MAX_STRING, so no string in it is longer: the line is theirs as they are
            elif fields and fields.keys() <= FIELDS and _SCALARS.issuperset(map(type, fields.values())):
                line = ('{"ts":"%s","event":"%s",' % (_timestamp(now), event)).encode() + encode(fields)[1:] + b"\n"
                if len(line) <= MAX_STRING:
                    buffer.append(line)
                    added += len(line)
                    continue
            kept, dropped = redact(fields)
            if dropped:
                self._warn_dropped(event, dropped)
            line = encode({"ts": _timestamp(now), "event": event, **kept}) + b"\n"
            buffer.append(line)
            added += len(line)
        self._buffered += added

    def _format_backlog(self, pending: list[tuple[float, str, dict[str, Any] | Record]]) -> None:
        """_format_locked while writes fail: past BACKLOG_MAX a record is counted, not kept, and a
        `records_lost` line stands where the records dropped would have been."""
        for now, event, fields in pending:
            if self._failing and self._buffered >= BACKLOG_MAX:
                if not self._lost:
                    log.error("audit log backlog reached %d MiB while %s cannot be written; later records "
                              "are counted, not kept, until it can (free space on its disk)",
                              BACKLOG_MAX >> 20, self.path)
                self._lost += 1
                continue
            self._mark_lost(now)
            kept, dropped = redact(fields if type(fields) is dict else _fields_of(fields))
            if dropped:
                self._warn_dropped(event, dropped)
            self._append(_encoder.encode({"ts": _timestamp(now), "event": event, **kept}) + b"\n")

    def _mark_lost(self, now: float) -> None:
        if self._lost:
            lost, self._lost = self._lost, 0
            self._append(_encoder.encode({"ts": _timestamp(now), "event": "records_lost", "count": lost}) + b"\n")

    def _append(self, line: bytes) -> None:
        self._buffer.append(line)
        self._buffered += len(line)

    def _on_format(self) -> None:
        with self._lock:
            self._format_soon = False
            self._format_locked()
            if self._buffered >= BUFFER_BYTES and not self._failing:
                try:
                    self._flush_locked()
                except OSError as exc:  # a full disk must not stop calls; say so in the log
                    log.error("audit log write failed: %s", exc)

    def flush(self) -> None:
        """Write every buffered record now; raises OSError when that fails (they stay buffered)."""
        with self._lock:
            if self._failing and self._buffered >= BACKLOG_MAX:
                # the backlog first: if there is room again, the records waiting to be formatted are
                # kept, not counted lost for a backlog about to be written
                self._flush_locked()
            self._format_locked()
            self._flush_locked()

    def unbuffer(self) -> None:
        """Write what is buffered, and every later record at once (shutdown: no timer may run again);
        what cannot be written is counted lost, never raised (_drop_unwritten)."""
        with self._lock:
            self._direct = True
            self._format_locked()
            self._flush_locked()

    def _flush_later(self) -> bool:
        """Have this thread's running loop flush within FLUSH_SECONDS; False without one."""
        if self._direct:
            return False
        if self._timer is not None:
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._timer = loop.call_later(FLUSH_SECONDS, self._on_timer)
        return True

    def _on_timer(self) -> None:
        self._timer = None
        failing = self._failing
        try:
            self.flush()
        except (OSError, ValueError) as exc:  # a full disk must not stop calls; say so in the log, once
            if not failing:
                log.error("audit log write failed: %s (records are kept in memory and written once it "
                          "works again)", exc)
            if isinstance(exc, OSError) and not self._closed:
                self._flush_later()  # the backlog waits for room, not for the next record

    def _flush_locked(self) -> None:
        """Write the buffer in as few whole-line writes as rotation allows; what fails stays buffered,
        or, once no later try will come (unbuffer, close), is counted lost."""
        try:
            self._write_buffer()
        except OSError as exc:
            self._failing = True
            if self._direct:
                return self._drop_unwritten(exc)
            raise
        self._forget_marker()
        if self._failing:
            self._failing = False
            lost = self._lost
            self._mark_lost(time.time())
            if lost:
                log.warning("audit log %s is written again: the records kept meanwhile are in it, and a "
                            "records_lost line counts the %d dropped", self.path, lost)
                self._flush_locked()
            else:
                log.warning("audit log %s is written again: the records kept meanwhile are in it", self.path)

    def _drop_unwritten(self, exc: OSError) -> None:
        """No later try will come (the process ends): count what waits, say it, keep the count for
        the next start's `records_lost` line, and leave the file ending on a whole line."""
        self._untear()
        lost = self._lost + len(self._unformatted) + audit_lost.records_in(self._buffer)
        self._buffer = [b"\n"] if self._torn else []  # a head that stays: a later record ends it
        self._buffered, self._lost = len(self._buffer), 0
        self._failing = self._marked = False  # a start's marker count is in `lost`: the new marker keeps it
        if not lost:
            return
        self._dropped += lost
        failed = audit_lost.keep(self.path, self._dropped)
        log.error("audit log %s: %d record(s) lost as scvd stops, never written (%s); %s", self.path, lost, exc,
                  "the next start counts them in a records_lost line" if failed is None else
                  f"their count cannot be kept for the next start either ({failed})")

    def _untear(self) -> None:
        """Take the head of a line cut short back out of the file, and put it before its tail."""
        head, self._head = self._head, b""
        if not (self._torn and head) or self._fd is None:
            return
        try:
            end = os.fstat(self._fd).st_size
            if end < len(head) or os.pread(self._fd, len(head), end - len(head)) != head:
                return  # emptied or replaced meanwhile: not ours to cut
            os.ftruncate(self._fd, end - len(head))
        except OSError:  # a FIFO: its reader has the head already
            return
        self._size = end - len(head)
        self._buffer[0] = head + self._buffer[0]
        self._torn = False

    def _write_buffer(self) -> None:
        while self._buffer:
            fd = self._writable_fd()
            if (not self._torn and self.max_bytes and self._size
                    and self._size + len(self._buffer[0]) > self.max_bytes):
                fd = self._rotate()  # one line larger than max_bytes still goes into a fresh file
            if not self.max_bytes or self._size + self._buffered <= self.max_bytes:
                count, size = len(self._buffer), self._buffered  # all of it fits (most flushes): no walk
            else:
                count = size = 0
                for line in self._buffer:
                    if count and self._size + size + len(line) > self.max_bytes:
                        break
                    count, size = count + 1, size + len(line)
            view = memoryview(b"".join(self._buffer[:count]))
            try:
                while view:
                    view = view[os.write(fd, view):]
            finally:
                self._written(size - len(view))

    def _written(self, size: int) -> None:
        """Drop `size` written bytes from the buffer's head: a line cut by a full disk keeps its tail."""
        if size and size == self._buffered:  # all of it (most writes): no walk over its lines
            self._size += size
            self._buffered = 0
            self._buffer.clear()
            self._torn = False
            return
        self._size += size
        self._buffered -= size
        whole = 0
        for line in self._buffer:
            if size < len(line):
                break
            size -= len(line)
            whole += 1
        del self._buffer[:whole]
        if whole:
            self._head = b""  # a line cut earlier is whole now
        if size:  # the next write ends this line in the same file, so no record is torn or doubled
            self._head += self._buffer[0][:size]
            self._buffer[0] = self._buffer[0][size:]
        self._torn = bool(size) or (self._torn and whole == 0)

    def _writable_fd(self) -> int:
        if self._fd is None:  # a rotation failed half-way (OSError): open audit.log again
            return self._open()
        # a torn line's tail goes to the file that has its head, wherever that file is now
        if not self._torn and self._moved():
            log.warning("audit log %s was removed or moved away; writing to a new one there", self.path)
            os.close(self._fd)
            self._fd = None
            return self._open()
        return self._fd

    def _moved(self) -> bool:
        """True when the file at the path is no longer the open one (deleted, or renamed by hand or
        by a log rotator); else its size is taken afresh (a `copytruncate` emptied it in place)."""
        assert self._fd is not None
        st = os.fstat(self._fd)  # two stats per flush, not per record
        try:
            there = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return True
        if there.st_ino != st.st_ino or there.st_dev != st.st_dev:
            return True
        self._size = st.st_size
        return False

    def _warn_dropped(self, event: str, dropped: list[str]) -> None:
        for name in dropped:  # a caller's bug: say it once per name, never with the value
            if name not in self._warned:
                self._warned.add(name)
                log.warning("audit: dropped field %r of %s (not allowed in the audit log)", name, event)

    def _rotate(self) -> int:
        """audit.log.(keep-1) -> .keep, ..., audit.log -> .1; a fresh audit.log."""
        assert self._fd is not None
        os.close(self._fd)
        self._fd = None
        if self.keep == 0:
            self.path.unlink(missing_ok=True)
        generations = self._generations()
        for i in generations:  # past a lowered audit.keep
            if i > self.keep:
                self._numbered(i).unlink(missing_ok=True)
        # the generations there are, not every number up to keep: a large audit.keep held the loop
        for i in sorted((n for n in generations if n < self.keep), reverse=True):
            os.replace(self._numbered(i), self._numbered(i + 1))
        if self.keep > 0:
            os.replace(self.path, self._numbered(1))
        return self._open()

    def _generations(self) -> list[int]:
        """The N of each audit.log.N beside the log."""
        prefix = self.path.name + "."
        with os.scandir(self.path.parent) as entries:
            return [int(e.name[len(prefix):]) for e in entries
                    if e.name.startswith(prefix) and e.name[len(prefix):].isdigit() and e.name[len(prefix)] != "0"]

    def _numbered(self, i: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{i}")

    def close(self) -> None:
        """Write what is buffered (what cannot be is counted lost), then close; records after this
        raise ValueError."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            try:
                if not self._closed:
                    self._direct = True  # no later try will come
                    self._format_locked()
                    self._flush_locked()
            finally:
                self._closed = True
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# the second formatted last, reused by every record within it: its start in ms as a float (floats
# compared and subtracted, where ints of 2 digits and a `% 1000` cost a record 900 instructions more)
_second: tuple[float, str] = (math.inf, "")
_MILLIS = tuple(f".{ms:03d}Z" for ms in range(1000))  # cheaper than formatting the tail per record


def _timestamp(now: float) -> str:
    """UTC, millisecond precision, sortable: 2025-01-31T12:00:00.123Z."""
    global _second
    ms = now * 1000
    start, text = _second
    if not start <= ms < start + 1000:
        second = int(ms // 1000)
        start, text = _second = (second * 1000.0, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return text + _MILLIS[int(ms - start)]
