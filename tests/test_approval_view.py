"""How many screen rows a request takes decides whether it is paged before the prompt."""

from __future__ import annotations

from scvctl.approval_view import _rows, fold


def test_wide_characters_count_two_cells_so_a_tall_request_is_paged():
    """Counted in characters, 50 CJK characters were one row of an 80-column screen, not two: a
    request of such lines went unpaged and its top scrolled off above the prompt."""
    assert _rows("漢" * 50, 80) == 2
    assert _rows("\n".join(["漢" * 50] * 12), 80) == 24  # over a 24-row screen: paged
    assert _rows("a" * 80 + "\n" + "b" * 81, 80) == 3
    assert _rows("", 80) == 1
    assert _rows("x", 80) == len(fold("x", 80).split("\n"))
