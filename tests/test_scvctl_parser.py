"""scvctl's parser, built without the commands' modules: the constants it writes itself are its
sources' own, and every handler it names exists (a misspelt one would fail only when run)."""

from __future__ import annotations

import argparse
import importlib

from scvctl import parser
from scvd import protocol as p
from scvd.adapters import names, spec


def test_the_agents_the_parser_offers_are_the_adapters() -> None:
    assert names.AGENTS == tuple(spec.ADAPTERS)


def test_mcp_s_tool_name_budget_is_the_protocol_s() -> None:
    assert (parser.HOST_TOOL_NAME, parser.MIN_HOST_TOOL_NAME) == (p.HOST_TOOL_NAME, p.MIN_HOST_TOOL_NAME)


def handlers(command: argparse.ArgumentParser) -> list[parser.Handler]:
    found = [command._defaults["handler"]] if "handler" in command._defaults else []
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += handlers(sub)
    return found


def test_every_command_s_handler_names_a_function_of_its_module() -> None:
    found = handlers(parser.build_parser())
    assert len(found) >= 20
    for h in found:
        assert callable(getattr(importlib.import_module(f"scvctl.{h.module}"), h.name, None)), (h.module, h.name)


def test_chat_s_help_names_its_commands_and_its_rule_for_a_line() -> None:
    from scvctl import chat

    assert all(name in parser.CHAT_DESCRIPTION for name in chat.COMMANDS)
    assert chat.LINE_RULE.capitalize() in parser.CHAT_DESCRIPTION
