"""Export the JSON Schema of every wire frame to docs/protocol.schema.json.

Run `python -m scvd.schema` after changing scvd/protocol.py; a test fails while
the file and the Structs disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

from . import protocol as p

DOC = Path(__file__).resolve().parents[1] / "docs" / "protocol.schema.json"


def protocol_schema() -> dict[str, Any]:
    """One schema document: `requests` and `server_frames` as unions, Structs in $defs."""
    (requests, server), defs = msgspec.json.schema_components(
        [p.Request, p.ServerFrame], ref_template="#/$defs/{name}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"scvd wire protocol, version {p.PROTOCOL_VERSION}",
        "description": "One JSON object per line over a Unix stream socket; `type` names the frame.",
        "$defs": {"request": requests, "server_frame": server, **defs},
        "oneOf": [{"$ref": "#/$defs/request"}, {"$ref": "#/$defs/server_frame"}],
    }


def render() -> str:
    return msgspec.json.format(msgspec.json.encode(protocol_schema()), indent=2).decode() + "\n"


def main() -> int:
    DOC.write_text(render(), encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
