"""Adapter records, argv building, model/effort mapping and validation, and the per-config schema."""

from __future__ import annotations

import pytest

from adapters_support import load_config
from scvd import paths as paths_mod
from scvd.adapters import spec
from scvd.adapters.argv import EFFORTS, build_argv, check_model, check_prompt
from scvd.adapters.tools import tools
from scvd.errors import ConfigError, InvalidArguments
from scvd.tools.contract import Registry

PATHS = paths_mod.resolve({"SCV_HOME": "/nonexistent/scv"})


def by_name(config_text: str = "") -> dict:
    return {t.name: t for t in tools(load_config(config_text), PATHS)}


def test_default_contracts_are_the_seed_table() -> None:
    assert build_argv(spec.CLAUDE, "/x/claude", "fix it", model="sonnet", effort="medium") == [
        "/x/claude", "-p", "--model", "sonnet", "--effort", "medium", "fix it"]
    assert build_argv(spec.CODEX, "/x/codex", "fix it", model="gpt-5", effort="high") == [
        "/x/codex", "exec", "--skip-git-repo-check", "-m", "gpt-5", "-c", 'model_reasoning_effort="high"', "--",
        "fix it"]
    assert build_argv(spec.PI, "/x/pi", "fix it") == ["/x/pi", "-p", "fix it"]
    assert build_argv(spec.CLAUDE, "/x/claude", "fix it") == ["/x/claude", "-p", "fix it"]


@pytest.mark.parametrize("word", ["help", "review", "resume"])
def test_a_codex_prompt_that_names_a_subcommand_is_still_the_prompt(word) -> None:
    """`codex exec help` printed codex's usage (exit 0) as the run's result; after `--` it is the task.
    claude and pi take a word after -p as the prompt (pi refuses a `--`)."""
    assert build_argv(spec.CODEX, "/x/codex", word)[-2:] == ["--", word]
    assert build_argv(spec.PI, "/x/pi", word) == ["/x/pi", "-p", word]


def test_prompt_is_one_argument_whatever_it_holds() -> None:
    prompt = "a b; rm -rf / $(id) `id` 'q' \"dq\"\n--model evil"
    argv = build_argv(spec.CLAUDE, "/x/claude", prompt)
    assert argv[-1] == prompt and len(argv) == 3


@pytest.mark.parametrize("prompt", ["-p", "--model=x", "-", ""])
def test_prompt_cannot_start_with_dash_or_be_empty(prompt: str) -> None:
    with pytest.raises(InvalidArguments):
        check_prompt(prompt)


@pytest.mark.parametrize("model", ["sonnet", "gpt-5.1-codex", "openai/gpt-4o", "a@b", "x" * 128,
                                   "claude-sonnet-4-5[1m]", "vendor:model_v2"])
def test_good_models(model: str) -> None:
    assert check_model(model) == model


@pytest.mark.parametrize("model", ["", "-m", "@x", "x" * 129, "a b", "a\n", "a;b", "a$b", "é", "a'b"])
def test_bad_models(model: str) -> None:
    with pytest.raises(InvalidArguments):
        check_model(model)


def test_schema_refuses_bad_model_and_effort_before_plan() -> None:
    t = by_name()["agent_claude"]
    for raw in ({"prompt": "x", "model": "-rf"}, {"prompt": "x", "model": "@file"},
                {"prompt": "x", "effort": "extreme"}, {"prompt": "-x"}, {"prompt": "x", "shell": "y"}):
        with pytest.raises(InvalidArguments):
            t.decode(raw)
    for effort in EFFORTS:
        assert t.decode({"prompt": "x", "effort": effort}).effort == effort


def test_the_listed_prompt_pattern_refuses_what_the_server_refuses() -> None:
    """pi's schema said `^[^-]` while scvd refused a pi prompt starting with '@' (a file to attach): a
    host checking arguments against the listed schema sent it, and only then heard no."""
    import jsonschema

    tools_by_name = by_name()
    patterns = {name: t.input_schema()["properties"]["prompt"]["pattern"] for name, t in tools_by_name.items()}
    assert patterns == {"agent_claude": "^[^-]", "agent_codex": "^[^-]", "agent_pi": "^[^-@]"}
    for name, tool in tools_by_name.items():
        for prompt in ("-x", "@alice asked: fix it", "fix it"):
            listed = jsonschema.Draft202012Validator(tool.input_schema()).is_valid({"prompt": prompt})
            try:  # the arguments' check, then the argv's (plan() builds it before approval)
                build_argv(tool.adapter, "/x/agent", tool.decode({"prompt": prompt}).prompt)
                served = True
            except InvalidArguments:
                served = False
            assert listed == served, (name, prompt)
    with pytest.raises(InvalidArguments) as info:  # in scvd's words, not the validator's regex
        tools_by_name["agent_pi"].decode({"prompt": "@alice asked: fix it"})
    assert info.value.message == (
        "a prompt for agent_pi cannot start with '@' (pi would read it as a file to attach, not as the task); "
        "start it with a word, e.g. 'Read README.md and fix the failing test'")


def test_model_and_effort_offered_only_when_configured() -> None:
    props = {name: set(t.input_schema()["properties"]) for name, t in by_name().items()}
    assert props["agent_claude"] == {"prompt", "cwd", "timeout_seconds", "model", "effort"}
    assert props["agent_codex"] == {"prompt", "cwd", "timeout_seconds", "model", "effort"}
    assert props["agent_pi"] == {"prompt", "cwd", "timeout_seconds"}
    with pytest.raises(InvalidArguments):
        by_name()["agent_pi"].decode({"prompt": "x", "model": "sonnet"})


def test_config_overrides_model_and_effort_args() -> None:
    tools_ = by_name("""
[adapters.pi]
model_args = ["--model", "{model}"]
effort_args = ["--thinking", "{effort}"]
[adapters.claude]
effort_args = []
""")
    pi = tools_["agent_pi"]
    assert {"model", "effort"} <= set(pi.input_schema()["properties"])
    assert build_argv(pi.adapter, "/x/pi", "go", model="sonnet", effort="low") == [
        "/x/pi", "-p", "--model", "sonnet", "--thinking", "low", "go"]
    claude = tools_["agent_claude"]
    assert "effort" not in claude.input_schema()["properties"]
    assert "model" in claude.input_schema()["properties"]
    with pytest.raises(InvalidArguments):
        build_argv(claude.adapter, "/x/claude", "go", effort="low")


def test_config_override_without_placeholder_or_unknown_agent_is_an_error() -> None:
    with pytest.raises(ConfigError, match="adapters.codex.model_args"):
        by_name('[adapters.codex]\nmodel_args = ["--model"]\n')
    with pytest.raises(ConfigError, match="adapters.gemini: no such agent"):
        by_name("[adapters.gemini]\nmodel_args = []\n")


def test_substituted_value_stays_one_argument() -> None:
    argv = build_argv(spec.CODEX, "/x/codex", "go", effort="xhigh")
    assert argv.count('model_reasoning_effort="xhigh"') == 1


def test_timeout_schema_has_default_and_ceiling_from_config() -> None:
    schema = by_name("[tools]\nagent_timeout_seconds = 300\nmax_timeout_seconds = 900\n")[
        "agent_codex"].input_schema()["properties"]["timeout_seconds"]
    assert schema["default"] == 300 and schema["maximum"] == 900


def test_tools_pass_the_design_rules_and_register() -> None:
    registry = Registry(by_name().values())
    assert sorted(registry.names()) == ["agent_claude", "agent_codex", "agent_pi"]
    for t in registry.visible():
        assert t.risk.value == "delegate"
