"""The TOML scvd writes reads back as the same values (secrets.toml, check-config's listing)."""

from __future__ import annotations

import tomllib

import pytest

from scvd.toml_write import toml_key, toml_value


@pytest.mark.parametrize("value", [
    True, False, 0, -3, 2.5, float("inf"), "plain", 'say "hi"', "back\\slash", "tab\there\nnew line\x7f",
    "\u00e9\u4e2d", [], ["-m", "{model}"], [1, [True]], {}, {"read_text_file": "read_only", "odd key": 1},
])
def test_a_value_reads_back_as_itself(value):
    assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value


def test_keys_are_bare_when_they_may_be():
    assert (toml_key("pass_env"), toml_key("a.b"), toml_key("")) == ("pass_env", '"a.b"', '""')
