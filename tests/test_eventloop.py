"""Choosing the event loop: uvloop by default, asyncio as the fallback, uvloop by name only where it is."""

from __future__ import annotations

import sys

import pytest

from scvd import errors, eventloop


@pytest.mark.parametrize("kind, expected", [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_the_loop_of_each_kind(kind, expected):
    loop = eventloop.new_event_loop(kind)
    try:
        assert eventloop.name(loop) == expected
    finally:
        loop.close()


def test_uvloop_asked_for_but_missing_says_how_to_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as on a host without the package
    with pytest.raises(errors.ConfigError, match="uvloop is not installed: pip install uvloop"):
        eventloop.check("uvloop")
    loop = eventloop.new_event_loop("auto")  # auto falls back to asyncio's own
    try:
        assert eventloop.name(loop) == "asyncio"
    finally:
        loop.close()
