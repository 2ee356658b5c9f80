"""Under .ci/test (SCVD_TESTS_NO_SKIP=1) a test that skips fails, unless its reason is ALLOWED.

A skip says a part is missing (bwrap, systemd, root, a kernel feature, the agent CLIs): on a
machine .ci/setup made whole that is a broken setup, and the test it guards went untested with
no one the wiser. An xfail is left alone. tests/conftest.py registers these hooks.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

ENV = "SCVD_TESTS_NO_SKIP"

# the start of a skip's reason -> why a machine .ci/setup set up whole may still skip it
ALLOWED = {
    "the seccomp filter names x86_64's ftruncate": "no setup gives another architecture x86_64's system calls",
}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    return _skip_fails(report)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    report = yield  # a module's importorskip
    return _skip_fails(report)


def _skip_fails(report: Any) -> Any:
    if os.environ.get(ENV) != "1" or not report.skipped or hasattr(report, "wasxfail"):
        return report
    said = report.longrepr  # (path, line, "Skipped: why") for a skip
    reason = said[2].removeprefix("Skipped: ") if isinstance(said, tuple) else str(said)
    if not reason.startswith(tuple(ALLOWED)):
        report.outcome = "failed"
        report.longrepr = (f"skipped ({reason}), which fails under {ENV}=1 (.ci/test sets it): install what it "
                           f"needs (bash .ci/setup, as root), or allow a skip a set-up machine must take in "
                           f"tests/no_skip.py's ALLOWED, saying why; {ENV}=0 lets it skip")
    return report
