"""What calls not completed may hold of scvd's memory: what their frames decode to, per connection and in all.

Rules:
- A call costs the bytes of the frame that carried it (known when the frame was read: nothing is
  encoded again), plus ITEM for each `[`, `{` and `,` in it: a frame of 1 MiB of empty arrays
  (`[[],[],...]`) decodes to 22 MB, and a connection's 64 MiB of such frames took scvd to 2.7 GB.
  At least FLOOR, what a call waiting in its lane costs scvd beside its arguments (its record,
  future and handle: about 4 KiB measured), so that many small calls count too: `cost()`.
  bench/call_memory.py measures what calls of each shape hold against what they cost. A socket
  client's frame, an MCP host's line (`scvctl mcp`: the whole line for each call of a batch), a
  chat turn's arguments as the model sent them.
- The calls of one owner (a connection, across its sessions) hold at most `per_owner` bytes; the
  calls of every owner at most `total`. server.max_calls_per_session alone let one connection
  hold 64 sessions x 256 calls of up to 1 MiB each: RSS went from 29 MiB to 1.5 GiB.
- A call is counted (its owner's `call_bytes`, and `held`) before it holds anything (a refusal
  drops its arguments with the frame), and given back once it completed: one pair per call, in
  calls.CallRegistry's submit() and _complete(), inline there (a read's fast path).
"""

from __future__ import annotations

from . import errors

FLOOR = 4096
# a list (56 bytes) or dict (64) and its slot in the one holding it (8), or one more value (its slot,
# and an object: a short string 56, a float 24)
ITEM = 64
ITEMS = b"[{,"
COUNTS = f"a call counts its frame's bytes and {ITEM} for each `[`, `{{` and `,` in it, at least {FLOOR:,}"
PER_OWNER, TOTAL = "server.max_call_bytes_per_connection", "server.max_call_bytes"
# what a socket client refused for want of room is told to do (an MCP host is told its own: mcp_host/bridge.py)
WAIT_OR_CANCEL = ("wait for earlier calls to complete (call.completed), or cancel those you no longer need "
                  "(call.cancel), then send this one again")
# a frame this short costs FLOOR even if every other byte were an item: not counted (a 4 KiB read's)
SHORT = FLOOR // (1 + ITEM // 2)


def cost(frame: bytes) -> int:
    """What a call carried by `frame` (or whose arguments are `frame`) holds of the budget."""
    size = len(frame)
    if size <= SHORT:
        return FLOOR
    # one pass in C (translate is faster than three counts); JSON has at most about one item in two
    # bytes, more are in strings: a frame of such a string counts no more than one of empty arrays
    items = min(size - len(frame.translate(None, ITEMS)), size // 2)
    size += ITEM * items
    return size if size > FLOOR else FLOOR


class CallBudget:
    """The bounds of what calls not completed count, by owner (sessions.Owner.call_bytes) and in all (`held`)."""

    def __init__(self, per_owner: int = 64 << 20, total: int = 512 << 20) -> None:
        self.per_owner = per_owner  # server.max_call_bytes_per_connection
        self.total = total  # server.max_call_bytes
        self.held = 0

    def too_large(self, cost: int) -> tuple[int, str] | None:
        """(the bound, its key) that a call of `cost` passes alone, where no wait would make room: a reload
        lowered it below what an older connection's frames may carry, or a frame of many arrays."""
        for bound, key in ((self.per_owner, PER_OWNER), (self.total, TOTAL)):
            if cost > bound:
                return bound, key
        return None

    def refusal(self, mine: int, cost: int) -> errors.LimitExceeded:
        """Why a call that costs `cost` is not taken on while its owner's calls hold `mine`."""
        if alone := self.too_large(cost):
            bound, key = alone
            return errors.LimitExceeded(
                f"this call alone counts {cost:,} bytes, more than {key} ({bound:,}) lets calls hold at once "
                f"({COUNTS}); send less in one call, or raise {key}")
        if mine + cost > self.per_owner:
            return until_calls_end(
                f"this connection's calls that have not completed already hold {mine:,} bytes, and this one's "
                f"{cost:,} would pass {PER_OWNER} ({self.per_owner:,}; {COUNTS})")
        return until_calls_end(
            f"the calls of every client that have not completed already hold {self.held:,} bytes, and this "
            f"one's {cost:,} would pass {TOTAL} ({self.total:,})",
            f"wait for calls to complete (call.completed), then send this one again, or raise {TOTAL}")


def until_calls_end(why: str, then: str = WAIT_OR_CANCEL) -> errors.LimitExceeded:
    """A call refused until earlier calls end: `why`, then what a socket client does about it (`then`)."""
    return errors.LimitExceeded(f"{why}; {then}", why=why)
