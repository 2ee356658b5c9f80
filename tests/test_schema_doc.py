"""docs/protocol.schema.json is generated from the Structs and must match them."""

import json
import re
import subprocess
import sys
from pathlib import Path

from scvd import protocol as p
from scvd.schema import DOC, protocol_schema, render

ROOT = Path(__file__).resolve().parents[1]


def test_schema_file_matches_the_structs():
    assert DOC.read_text() == render(), "docs/protocol.schema.json is stale: run `python -m scvd.schema`"


def schema_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scvd.schema", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_help_is_help_and_writes_nothing(tmp_path):
    """`--help` was ignored: it wrote docs/protocol.schema.json."""
    before = DOC.stat().st_mtime_ns
    out = schema_command("--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: python -m scvd.schema [-h] [--check]"), out
    assert "wrote" not in out.stdout and DOC.stat().st_mtime_ns == before


def test_check_compares_without_writing(tmp_path):
    stale = tmp_path / "schema.json"
    stale.write_text("{}\n")
    out = schema_command("--check", "--file", str(stale))
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == f"{stale} is stale: run `python -m scvd.schema --file {stale}` to write it\n"
    assert stale.read_text() == "{}\n"
    assert schema_command("--file", str(stale)).returncode == 0
    assert stale.read_text() == render()
    out = schema_command("--check", "--file", str(stale))
    assert (out.returncode, out.stdout) == (0, f"{stale} matches scvd/protocol.py\n"), out


def test_every_frame_type_is_in_the_schema():
    defs = protocol_schema()["$defs"]
    frames = [*p.Request.__args__, *p.ServerFrame.__args__]
    for frame in frames:
        tag = frame.__struct_config__.tag
        assert defs[frame.__name__]["properties"]["type"]["enum"] == [tag]
    assert {"hello", "welcome", "call", "call.completed", "approval.requested", "approval.decide"} <= {
        f.__struct_config__.tag for f in frames
    }


def test_docs_name_every_frame_type():
    text = (DOC.parent / "protocol.md").read_text()
    for frame in [*p.Request.__args__, *p.ServerFrame.__args__]:
        tag = frame.__struct_config__.tag
        assert re.search(rf"`{re.escape(tag)}[` ]", text), f"docs/protocol.md does not describe `{tag}`"
    json.loads(DOC.read_text())


def test_the_frames_the_docs_show_decode():
    """Each whole `→` / `←` frame line of the docs (those without `...`) is a request / a server frame
    with no field the Struct lacks, as a client copying it would send or read it."""
    shown = 0
    for doc in sorted(DOC.parent.glob("*.md")):
        for arrow, line in re.findall(r"^(→|←) (\{.*\})$", doc.read_text(), re.M):
            try:
                obj = json.loads(line)
            except ValueError:  # `{...}` stands for fields left out
                continue
            frame = (p.decode_request if arrow == "→" else p.decode_server_frame)(line.encode())
            assert set(obj) - {"type"} <= set(frame.__struct_fields__), (doc.name, line)
            shown += 1
    assert shown >= 15


def _top_level_names(fields: str) -> set[str]:
    """`a, b?, c{x, y}, d \\| e` -> {a, b, c, d, e}: the names outside any nested braces."""
    depth, names = 0, set()
    for part in re.split(r"([{}\[\],|])", fields):
        if part in ("{", "["):
            depth += 1
        elif part in ("}", "]"):
            depth -= 1
        elif depth == 0 and (name := re.match(r"\s*([a-z_]+)", part)):
            names.add(name.group(1))
    return names


def test_the_tables_of_protocol_md_list_each_frames_fields():
    """A `tag {fields}` cell of the requests and events tables names each field of the Struct, no other
    (`id` and `seq`, which every request and event carries, aside)."""
    text = (DOC.parent / "protocol.md").read_text()
    frames = {f.__struct_config__.tag: f for f in [*p.Request.__args__, *p.ServerFrame.__args__]}
    checked = 0
    for row in re.findall(r"^\| (.*) \|$", text, re.M):
        for tag, fields in re.findall(r"`([a-z_.]+) \{([^`]*)\}`", row):
            if tag in frames:
                assert _top_level_names(fields) == set(frames[tag].__struct_fields__) - {"id", "type", "seq"}, tag
                checked += 1
    assert checked >= 30
