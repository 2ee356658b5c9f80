"""docs/operations.md names every command and option of `scvd` and `scvctl` that argparse takes."""

import argparse
import re
from pathlib import Path

import pytest

from scvctl import cli as scvctl_cli
from scvd import cli as scvd_cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


def commands_and_options(parser: argparse.ArgumentParser, path: str):
    """`scvctl approvals approve` for each command, `scvctl approvals approve --session` for each option
    (an option given as `-v` or `--verbose` as its first spelling)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{path} {name}", ()
                yield from commands_and_options(sub, f"{path} {name}")
        elif action.option_strings and action.dest not in ("help", "version"):
            yield path, tuple(action.option_strings)


@pytest.mark.parametrize("parser, prog", [(scvd_cli.build_parser(), "scvd"),
                                          (scvctl_cli.build_parser(), "scvctl")])
def test_every_command_and_option_is_in_operations_md(parser, prog):
    text = " ".join(DOC.read_text().split())  # a command may wrap across lines
    found = list(commands_and_options(parser, prog))
    assert len(found) >= 10
    missing = sorted({f"{cmd} {'/'.join(opts)}".strip() for cmd, opts in found
                      if not (any(re.search(rf"{re.escape(o)}\b(?!-)", text) for o in opts) if opts
                              else cmd in text)})
    assert not missing, f"docs/operations.md does not mention {missing}: say what each does"
