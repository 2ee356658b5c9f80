"""The fd budget and the caps as pure rules: who may take one more connection or session."""

from __future__ import annotations

import subprocess
import sys

from scvd.limits import HEADROOM, FdBudget, RefusalLog, child_nofile, refuse_connection, refuse_session

BUDGET = FdBudget(limit=1024, base=24)  # reserve 128: 872 fds for connections and sessions


def test_the_reserve_is_an_eighth_of_the_limit_and_never_below_64():
    assert BUDGET.reserve == 128 and BUDGET.size == 1024 - 24 - 128
    assert FdBudget(limit=256, base=20).reserve == 64
    assert FdBudget(limit=524288, base=30).reserve == 65536
    assert FdBudget(limit=64, base=40).size == 2 * HEADROOM  # a tiny limit still leaves room to be told why


def test_a_session_beyond_the_per_connection_cap_is_refused_first():
    assert refuse_session(BUDGET, used=10, held=63, max_per_connection=64) is None
    why = refuse_session(BUDGET, used=10, held=64, max_per_connection=64)
    assert why is not None and why.startswith("this connection already holds 64 sessions")


def test_sessions_never_take_the_connection_slots_kept_for_approvers():
    assert refuse_session(BUDGET, used=BUDGET.size - HEADROOM - 1, held=0, max_per_connection=64) is None
    why = refuse_session(BUDGET, used=BUDGET.size - HEADROOM, held=0, max_per_connection=64)
    assert why is not None and "open-file budget for sessions" in why and "RLIMIT_NOFILE 1024" in why
    # where sessions stop, a person's connection still fits
    assert refuse_connection(BUDGET, BUDGET.size - HEADROOM, 1, 256, spawned=False) is None


def test_processes_started_by_scvd_stop_short_of_the_headroom():
    assert refuse_connection(BUDGET, used=100, of_uid=256 - HEADROOM - 1, max_per_uid=256, spawned=True) is None
    why = refuse_connection(BUDGET, used=100, of_uid=256 - HEADROOM, max_per_uid=256, spawned=True)
    assert why is not None and f"less {HEADROOM} kept for clients that scvd did not start" in why
    assert refuse_connection(BUDGET, used=100, of_uid=256 - HEADROOM, max_per_uid=256, spawned=False) is None
    why = refuse_connection(BUDGET, used=100, of_uid=256, max_per_uid=256, spawned=False)
    assert why is not None and why.startswith("your uid already holds 256 connections")


def test_connections_stop_at_the_budget():
    assert refuse_connection(BUDGET, BUDGET.size - 1, 10, 256, spawned=False) is None
    why = refuse_connection(BUDGET, BUDGET.size, 10, 256, spawned=False)
    assert why is not None and "raise LimitNOFILE=" in why


def test_a_flood_of_refusals_is_one_log_line_per_interval(caplog):
    refusals = RefusalLog(interval=10)
    for i in range(1000):
        refusals.refused("a session", now=i / 1000)
    refusals.refused("a session", now=10.5)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["refused a session", "refused a session (999 more refused since the last line)"]


RAISE = """
import resource
from scvd.limits import raise_nofile
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 200))
print(*raise_nofile(), *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def test_children_get_back_the_soft_limit_scvd_started_with():
    assert child_nofile(1024, 524288) == 1024
    assert child_nofile(524288, 524288) is None  # the unit set it: nothing to give back


def test_raise_nofile_lifts_the_soft_limit_to_the_hard_one():
    done = subprocess.run([sys.executable, "-c", RAISE], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["64", "200", "200", "200"]
