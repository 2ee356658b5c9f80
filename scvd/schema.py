"""Export the JSON Schema of every wire frame to docs/protocol.schema.json.

Run `python -m scvd.schema` after changing scvd/protocol.py; a test fails while
the file and the Structs disagree. `--check` only compares (exit 1 when stale).
"""

from __future__ import annotations

import argparse
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scvd.schema",
                                     description="Write the JSON Schema of scvd's wire frames (scvd/protocol.py).")
    parser.add_argument("--check", action="store_true",
                        help="only compare: exit 1 when the file differs from the Structs, writing nothing")
    parser.add_argument("--file", type=Path, default=DOC, help=f"the schema file (default: {DOC})")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    text = render()
    if not args.check:
        args.file.write_text(text, encoding="utf-8")
        print(f"wrote {args.file}")
        return 0
    try:
        current = args.file.read_text(encoding="utf-8")
    except FileNotFoundError:
        current = None
    if current == text:
        print(f"{args.file} matches scvd/protocol.py")
        return 0
    state = "is missing" if current is None else "is stale"
    again = "python -m scvd.schema" + ("" if args.file == DOC else f" --file {args.file}")
    print(f"{args.file} {state}: run `{again}` to write it", file=sys.stderr)
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
