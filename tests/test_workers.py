"""The bounded worker pool: threads are reused, never more than its size, work runs in order."""

from __future__ import annotations

import asyncio
import os
import threading
from types import SimpleNamespace

import pytest

from scvd import workers
from scvd.workers import Pool, run_blocking


def test_threads_are_reused_between_jobs():
    pool = Pool(size=4, name="t-reuse")
    for _ in range(20):
        done = threading.Event()
        pool.submit(done.set)
        assert done.wait(10)
    assert pool.threads == 1


def test_never_more_threads_than_the_size_and_every_job_runs():
    pool = Pool(size=2, name="t-bound")
    gate = threading.Event()
    finished: list[int] = []
    lock = threading.Lock()

    def job(i: int) -> None:
        gate.wait(10)
        with lock:
            finished.append(i)

    for i in range(6):
        pool.submit(lambda i=i: job(i))
    assert pool.threads == 2
    assert sum(t.name.startswith("t-bound") for t in threading.enumerate()) == 2
    gate.set()
    for _ in range(1000):
        with lock:
            if len(finished) == 6:
                break
        threading.Event().wait(0.01)
    assert sorted(finished) == list(range(6))
    assert pool.threads == 2


def test_a_job_that_raises_keeps_its_thread(caplog):
    pool = Pool(size=1, name="t-raise")
    pool.submit(lambda: 1 / 0)
    done = threading.Event()
    pool.submit(done.set)
    assert done.wait(10)
    assert pool.threads == 1
    assert "raised past its own handler" in caplog.text



def test_an_idle_thread_keeps_nothing_of_its_last_job():
    """A thread waiting for its next job held the last one (its closure, and so its result: a whole
    resumed conversation, for the transcript pool) until that next job came, maybe never."""
    import gc
    import weakref

    class Big:
        pass

    pool = Pool(size=1, name="t-forget")
    held, done = Big(), threading.Event()
    gone = weakref.ref(held)
    pool.submit(lambda held=held: done.set())
    assert done.wait(10)
    del held
    for _ in range(1000):  # the thread is idle once it counts itself so; then nothing holds the job
        gc.collect()
        if gone() is None:
            break
        threading.Event().wait(0.01)
    assert gone() is None, "the idle pool thread still holds its last job"

def test_run_blocking_many_calls_use_the_bounded_pool(tmp_path, run_loop):
    """Hundreds of calls, 64 at a time: every one answers, on at most MAX_WORKERS threads."""
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    (tmp_path / "f").write_text("x")

    def read(fd: int, name: str, cancel) -> str:
        with open(os.open(name, os.O_RDONLY, dir_fd=fd)) as f:
            return f.read()

    async def main() -> list[str]:
        out: list[str] = []
        for _ in range(5):
            out += await asyncio.gather(*(run_blocking(read, dirfd, "f") for _ in range(64)))
        return out

    try:
        assert run_loop(main()) == ["x"] * 320
    finally:
        os.close(dirfd)
    assert workers._pool.threads <= workers.MAX_WORKERS


def test_run_blocking_raises_the_jobs_exception_and_closes_its_fd(tmp_path, run_loop):
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    seen: list[int] = []

    def fail(fd: int, cancel) -> None:
        seen.append(fd)
        raise FileNotFoundError("nope")

    try:
        with pytest.raises(FileNotFoundError):
            run_loop(run_blocking(fail, dirfd))
    finally:
        os.close(dirfd)
    with pytest.raises(OSError):
        os.fstat(seen[0])  # the duplicate was closed by the job


def test_a_cancel_after_the_job_committed_waits_for_it_and_gives_its_result(tmp_path, run_loop):
    """A write's rename under way when its call was cancelled: the call said `cancelled` (nothing
    changed) while the file was replaced. Past the job's commit, the cancel waits for its end."""
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    committed, release = threading.Event(), threading.Event()

    def install(fd: int, cancel) -> str:
        assert cancel.commit()
        committed.set()
        release.wait(10)  # the rename, slow
        return "installed"

    async def main() -> tuple[str, bool]:
        task = asyncio.ensure_future(run_blocking(install, dirfd))
        while not committed.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.05)
        waited = not task.done()
        release.set()
        return await task, waited

    try:
        assert run_loop(main()) == ("installed", True)
    finally:
        os.close(dirfd)


async def cancel_once_started(task: asyncio.Future, started: threading.Event) -> None:
    """Cancel `task` once its job runs on a pool thread; its wait ends at once, as cancelled."""
    while not started.is_set():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_cancel_before_the_commit_ends_the_wait_at_once_and_the_job_stops(tmp_path, run_loop):
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    started, release, told = threading.Event(), threading.Event(), []

    def slow(fd: int, cancel) -> str:
        started.set()
        release.wait(10)
        told.append(cancel.commit())
        return "installed"

    async def main() -> None:
        await cancel_once_started(asyncio.ensure_future(run_blocking(slow, dirfd)), started)
        release.set()
        while not told:
            await asyncio.sleep(0.01)

    try:
        run_loop(main())
    finally:
        os.close(dirfd)
    assert told == [False]  # the job is told not to install


def test_a_look_whose_call_was_cancelled_has_the_fd_it_opened_closed(tmp_path, run_loop):
    """run_file: the wait ends at the cancel, the look goes on, and the fd it opens after (an agent's
    directory, which nothing would close otherwise) goes to `drop`."""
    started, release = threading.Event(), threading.Event()
    dropped: list[bool] = []  # per fd handed to `drop`: whether it was the one the look opened

    def drop(fd: int) -> None:
        dropped.append(os.path.samestat(os.fstat(fd), os.stat(tmp_path)))
        os.close(fd)

    def look() -> int:
        started.set()
        release.wait(10)
        return os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)

    async def main() -> None:
        await cancel_once_started(asyncio.ensure_future(workers.run_file(look, drop=drop)), started)
        release.set()
        while not dropped:
            await asyncio.sleep(0.01)

    run_loop(main())
    assert dropped == [True]


def test_a_devices_filesystem_type_is_asked_again_after_a_while(tmp_path, monkeypatch):
    """It was cached for good: a device number an unmounted tmpfs left, reused by an NFS mount, kept
    its reads on the event loop, where one that hangs stops every client."""
    path = tmp_path / "small.txt"
    path.write_text("x")
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        local = workers._fs_type(fd) in workers.LOCAL_FILESYSTEMS
        assert local, "pytest's tmp dir is on a local filesystem here"
        now = [1000.0]
        monkeypatch.setattr(workers, "time", SimpleNamespace(monotonic=lambda: now[0]))  # this module's clock only
        monkeypatch.setitem(workers._local_devices, st.st_dev, (False, now[0] + 5))  # as if another fs had it
        assert workers.inline_ok(fd, st) is False  # trusted while fresh
        now[0] += 6
        assert workers.inline_ok(fd, st) is True  # asked again: the filesystem there now
        assert workers._local_devices[st.st_dev] == (True, now[0] + workers.DEVICE_SECONDS)
    finally:
        os.close(fd)
