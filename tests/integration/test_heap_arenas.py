"""The daemon's worker threads share one malloc arena (issue 9, idle RSS): with glibc's default of an
arena per thread that met a locked heap, each kept a few MiB of a burst's freed pages, and a burst of
large reads left the idle daemon at about 60 MiB instead of 30 (bench/side_by_side.py's rss_mib). And the
pages such a burst freed in the one heap go back once the daemon is quiet again, as do those a bridge's
chat work freed (a long conversation resumed, a turn) when it runs no call."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from chat_model import Text, model  # noqa: F401 (a fixture)
from harness import make_wrapped  # noqa: F401 (a fixture)
from scvd import protocol as p
from scvd.chat.items import AssistantReply, Opened, TurnEnded, UserText
from scvd.chat.transcript import Transcripts

ARENA_SPAN = 64 << 20  # a thread arena's heap: 64 MiB of address space, aligned to its size


def thread_arenas(pid: int) -> list[str]:
    """The reserved (---p) tails of thread arenas in the process's maps: each ends at a 64 MiB boundary."""
    found = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if len(fields) == 5 and fields[1] == "---p" and end % ARENA_SPAN == 0 and end - start >= 1 << 20:
            found.append(line)
    return found


def reads(d: Any, workspace: Path, errors: list[BaseException]) -> None:
    try:
        with d.client(name="burst") as c:
            sid = c.open_session(workspace)
            for i in range(4):
                c.call(sid, "read", {"path": f"big{i}.txt", "limit": 65536})
    except BaseException as exc:  # noqa: BLE001  # reported by the test
        errors.append(exc)


def burst(daemon: Any, workspace: Path) -> None:
    """12 clients at once, each reading 64 KiB of each of four 3 MiB files (hashed whole on a worker)."""
    for i in range(4):  # distinct files: none of them is hashed from memory (fs._digests)
        (workspace / f"big{i}.txt").write_text(f"line {i} of text\n" * 200_000)  # 3 MiB each: read by a worker
    errors: list[BaseException] = []
    clients = [threading.Thread(target=reads, args=(daemon, workspace, errors)) for _ in range(12)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    assert not errors, errors


def test_a_burst_of_large_reads_leaves_no_arena_per_worker_thread(daemon: Any, workspace: Path) -> None:
    burst(daemon, workspace)
    assert thread_arenas(daemon.proc.pid) == [], (
        "the daemon's worker threads made malloc arenas of their own, which keep a burst's freed pages "
        "resident; heap.one_arena() should have run before the first thread")


def heap_rss_kib(pid: int) -> int:
    """The resident part of the brk heap, where malloc keeps what the workers' reads freed."""
    smaps = Path(f"/proc/{pid}/smaps").read_text().split("\n")
    for i, line in enumerate(smaps):
        if line.endswith("[heap]"):
            return next(int(x.split()[1]) for x in smaps[i + 1:] if x.startswith("Rss:"))
    return 0


def heap_once_quiet(pid: int, before: int, drop_kib: int) -> int:
    """The heap's resident KiB once it fell `drop_kib` below `before`, or after 20 s (QUIET_SECONDS is 6)."""
    deadline = time.monotonic() + 20
    while heap_rss_kib(pid) > before - drop_kib and time.monotonic() < deadline:
        time.sleep(0.1)
    return heap_rss_kib(pid)


def test_the_pages_a_burst_freed_go_back_once_no_call_has_run_for_a_while(make_wrapped: Any, workspace: Path) -> None:
    daemon = make_wrapped(env={"HARNESS_HEAP_QUIET_SECONDS": "6"})  # the sample below comes first, even under load
    burst(daemon, workspace)
    after_burst = heap_rss_kib(daemon.proc.pid)  # the burst freed 0.5-6 MiB of it; malloc keeps them
    now = heap_once_quiet(daemon.proc.pid, after_burst, 128)
    assert now <= after_burst - 128, (
        f"the daemon's heap stayed at {now} KiB resident ({after_burst} KiB right after the burst): the pages "
        "its calls freed were not given back once no call had run for QUIET_SECONDS (heap.WhenQuiet)")


def chat_config(m: Any) -> str:
    return (f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "chat"\n'
            'api_key_env = "SCVD_TEST_MODEL_KEY"\n[chat]\nprovider = "test"\n')


def long_conversation(folder: Path, workspace: Path) -> str:
    """A conversation of about 16 MB already on disk, as earlier turns of a bridge wrote it."""
    records: list[Any] = [Opened(workspace=str(workspace), provider="test")]
    for i in range(200):
        turn = f"t{i}"
        records += [UserText(text=f"question {i} " * 4000, turn=turn),
                    AssistantReply(text=f"answer {i} " * 4000, turn=turn), TurnEnded(turn=turn, status="completed")]
    Transcripts(folder).append("klong", records)
    return "klong"


def test_the_pages_chat_work_freed_go_back_once_no_chat_has_run_for_a_while(
        make_wrapped: Any, model: Any, tmp_path: Path, workspace: Path) -> None:
    m = model(Text("hello again"))
    home = tmp_path / "chatting"
    conversation = long_conversation(home / "state" / "chat", workspace)
    daemon = make_wrapped(chat_config(m), home=home,
                          env={"HARNESS_HEAP_QUIET_SECONDS": "6", "SCVD_TEST_MODEL_KEY": "sk-test"})
    with daemon.client(name="bridge") as c:  # a bridge that only chats: no call runs
        opened = c.request(p.ChatOpen, workspace=str(workspace), conversation=conversation)
        c.request(p.TurnStart, session=opened.session, text="hi")
        while not isinstance(c.next_event(), (p.TurnCompleted, p.TurnCancelled, p.TurnFailed)):
            pass
        c.request(p.SessionClose, session=opened.session)
        closed = heap_rss_kib(daemon.proc.pid)  # what the chat held is free now; malloc keeps its pages
        now = heap_once_quiet(daemon.proc.pid, closed, 4096)
    assert now <= closed - 4096, (
        f"the daemon's heap stayed at {now} KiB resident ({closed} KiB right after the chat's session closed): "
        "the pages its chat.open and turn freed were not given back once no chat had run for QUIET_SECONDS")
