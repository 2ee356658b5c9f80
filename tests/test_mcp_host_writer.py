"""What `scvctl mcp` writes to its host: a tool result measured as a socket client's frame would be."""

from __future__ import annotations

import json
import re

import pytest

from scvd import protocol as p
from scvd.mcp_host.jsonrpc import call_result
from scvd.mcp_host.pipes import MessageWriter


class _Collect:
    """Host pipes that keep what is written."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)


@pytest.mark.parametrize("chars, whole", [(200, True), (400, False)])
def test_a_result_is_measured_as_a_socket_clients_frame_would_be(chars: int, whole: bool) -> None:
    """200 control characters are 1,200 bytes of JSON in scvd's frame (under the 2,000 limit) but
    about 2,600 in the MCP line, which carries them twice: sent whole. 400 are over it either way."""
    pipes = _Collect()
    done = p.CallCompleted(seq=1, call_id="c", ok=True, result={"content": "\x01" * chars})
    MessageWriter(pipes, 2000).write({"jsonrpc": "2.0", "id": 1, "result": call_result(done)})
    sent = json.loads(pipes.lines[0])
    if whole:
        assert len(pipes.lines[0]) > 2000 and sent["result"]["structuredContent"]["content"] == "\x01" * chars
    else:
        assert sent["result"]["isError"] is True
        assert re.fullmatch(r"limit: result too large: frame of \d+ bytes exceeds server.server_frame_bytes "
                            r"\(2000\); ask for less output", sent["result"]["content"][0]["text"])


def test_a_batch_past_the_hosts_line_gives_up_its_largest_answer_and_keeps_the_rest() -> None:
    """A batch's answers are one line: each fitting alone, together they were past what the host reads."""
    pipes = _Collect()
    answers = [{"jsonrpc": "2.0", "id": i, "result": call_result(
        p.CallCompleted(seq=1, call_id="c", ok=True, result="x" * size))} for i, size in enumerate((1400, 1800, 50))]
    MessageWriter(pipes, 10_000, line_limit=3000).write(answers)
    (line,) = pipes.lines
    sent = {a["id"]: a["result"] for a in json.loads(line)}
    assert len(line) <= 3000
    assert [sent[0]["content"][0]["text"], sent[2]["content"][0]["text"]] == ["x" * 1400, "x" * 50]
    assert sent[1]["isError"] is True and sent[1]["content"][0]["text"].startswith("limit: result too large: its line of ")
