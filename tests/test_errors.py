"""The one error tree: every wire code and tool error kind comes back to a client as its own class."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scvctl.client import BY_CODE, BY_KIND, error_from_frame
from scvd import errors, protocol as p

ROOT = Path(__file__).resolve().parents[1]

# DESIGN.md's lists (add more; never rename these)
DESIGN_CODES = {"invalid_json", "frame_too_large", "not_initialized", "version_mismatch", "unknown_type",
                "invalid_request", "session_not_found", "call_not_found", "approval_not_found", "forbidden",
                "internal"}
DESIGN_KINDS = {"invalid_arguments", "unknown_tool", "denied", "cancelled", "timeout", "limit", "failed",
                "unavailable", "credential_missing"}


def all_subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *all_subclasses(sub)]
    return found


BASES = {errors.ProtocolError, errors.ToolError, errors.LocalError}  # never raised bare


def wire_classes() -> list[type[errors.ScvError]]:
    """Every error class the server may put on the wire: all but the LocalError branch."""
    return [c for c in all_subclasses(errors.ScvError)
            if not issubclass(c, errors.LocalError) and c not in BASES]


def make(cls: type[errors.ScvError]) -> errors.ScvError:
    """An instance with the message "what to do", whatever extra arguments its class takes."""
    exc = cls.__new__(cls)
    base = errors.ToolError if issubclass(cls, errors.ToolError) else errors.ScvError
    base.__init__(exc, "what to do")  # type: ignore[misc]
    return exc


def as_frame(exc: BaseException) -> p.Error:
    """The error frame the server builds (server.py's _send_error), through the real codec."""
    frame = p.Error(code=errors.error_code(exc), message=errors.public_message(exc),
                    id=1, kind=errors.error_kind(exc), reason=errors.error_reason(exc))
    return p.decode_server_frame(p.encode(frame))


@pytest.mark.parametrize("cls", wire_classes(), ids=lambda c: c.__name__)
def test_every_error_the_server_sends_comes_back_as_its_class(cls):
    exc = make(cls)
    frame = as_frame(exc)
    assert frame.code != "internal" or cls is errors.InternalError
    back = error_from_frame(frame)
    assert type(back) is not errors.ScvError, f"{frame.code}/{frame.kind} has no client class"
    assert isinstance(exc, type(back)) and back.message == "what to do"
    assert back.code == frame.code


def test_every_code_and_kind_in_the_tree_and_design_is_mapped():
    codes = {c.code for c in wire_classes()} | DESIGN_CODES
    kinds = {c.kind for c in all_subclasses(errors.ToolError)} | DESIGN_KINDS
    assert codes <= set(BY_CODE), codes - set(BY_CODE)
    assert kinds <= set(BY_KIND), kinds - set(BY_KIND)
    for code, cls in BY_CODE.items():
        assert cls.code == code
    for kind, tool_cls in BY_KIND.items():
        assert tool_cls.kind == kind


def test_codes_written_out_in_the_daemon_are_mapped():
    """An `Error(code="...")` built by hand (not from an exception) needs a class too."""
    literal = re.compile(r"""Error\(\s*code\s*=\s*["']([a-z_]+)["']""")
    found = {code for path in (ROOT / "scvd").rglob("*.py") for code in literal.findall(path.read_text())}
    found |= {code for code in literal.findall((ROOT / "scvctl" / "client.py").read_text())}
    assert found, "the scan found nothing: the pattern no longer matches the code"
    assert found <= set(BY_CODE), found - set(BY_CODE)


def test_every_code_and_kind_is_documented():
    doc = (ROOT / "docs" / "protocol.md").read_text()
    for name in [*BY_CODE, *BY_KIND]:
        assert f"`{name}`" in doc, name


def test_a_code_from_a_newer_server_keeps_its_code():
    back = error_from_frame(p.Error(code="brand_new", message="m", kind="also_new"))
    assert type(back) is errors.ScvError and back.code == "brand_new"


def test_local_errors_and_bugs_are_internal_with_no_detail():
    for exc in (errors.ConfigError("config.toml: secret detail"), RuntimeError("secret detail")):
        frame = as_frame(exc)
        assert (frame.code, frame.kind) == ("internal", None)
        assert "secret" not in frame.message and "daemon log" in frame.message


def test_every_error_class_is_defined_in_scvd_errors():
    """The tree is one module: an error class kept elsewhere fails here (every module imported)."""
    import importlib
    import pkgutil

    import scvctl
    import scvd

    for package in (scvd, scvctl):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
    elsewhere = [f"{c.__module__}.{c.__qualname__}" for c in all_subclasses(errors.ScvError)
                 if c.__module__ != "scvd.errors" and not c.__module__.startswith(("tests", "test_"))]
    assert not elsewhere, f"move these into scvd/errors.py: {elsewhere}"


def test_every_scvd_exception_class_is_in_the_tree():
    """No module keeps its own exception outside scvd.errors (a private `_Name` that never leaves
    its module, a control-flow signal, may stay)."""
    own = re.compile(r"^class ([A-Za-z]\w*)\((?:\w+\.)?(Exception|ValueError|RuntimeError|OSError)\)", re.M)
    for path in [*(ROOT / "scvd").rglob("*.py"), *(ROOT / "scvctl").rglob("*.py")]:
        if path != ROOT / "scvd" / "errors.py":
            assert not own.findall(path.read_text()), f"{path}: move it into scvd/errors.py"
