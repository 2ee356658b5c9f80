"""An empty, relative or workspace entry in scvd's search paths, through a real daemon and real bwrap.

What scvd starts starts in a session's workspace, which an unasked sandboxed call writes, and reads
an empty or relative entry of PATH or LD_LIBRARY_PATH there: bwrap's own loader, outside the
sandbox, and a script tool's `#!/usr/bin/env python3` with its secrets (scvd/search_paths.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import wait_pending
from scvd import protocol as p
from scvd.secrets import SecretStore

pytestmark = [pytest.mark.bwrap, pytest.mark.one_loop]

SANDBOXED = '[approvals]\npolicy = "sandbox-aware"\n[sandbox]\nmode = "bwrap"\n'
# bwrap needs libcap.so.2: a workspace file of that name on its loader's path is what it loads. A real
# library's constructor ran outside the sandbox (the review's proof); one that is no library shows the
# loader read it without a compiler: bwrap cannot start, and the call fails
NOT_A_LIBRARY = "echo not a library > libcap.so.2"


def test_an_empty_library_path_entry_has_bwrap_load_nothing_from_the_workspace(make_daemon, workspace: Path,
                                                                               tmp_path: Path):
    """`LD_LIBRARY_PATH=/opt/x/lib:` (a shell's `$LD_LIBRARY_PATH` appended to nothing) is the working
    directory at its end, and bwrap starts in the workspace: the next call loaded a libcap.so.2 an
    unasked call had left there into bwrap, outside the sandbox."""
    lib = tmp_path / "nothing" / "lib"
    d = make_daemon(SANDBOXED, env={"LD_LIBRARY_PATH": f"{lib}:"})
    with d.client() as c:
        sid = c.open_session(workspace)
        planted = c.call(sid, "bash", {"command": f"{NOT_A_LIBRARY}; echo \"LD=$LD_LIBRARY_PATH\""})
        after = c.call(sid, "bash", {"command": "echo still sandboxed"})
        assert c.request(p.ApprovalsList).approvals == []  # both unasked, as before
    assert (workspace / "libcap.so.2").exists()
    assert after.ok and after.result["exit_code"] == 0, after  # bwrap: error while loading shared libraries
    assert "still sandboxed" in after.result["output"]
    assert planted.ok and f"LD={lib}\n" in planted.result["output"], planted  # what every child gets now
    assert f"dropped '' from scvd's LD_LIBRARY_PATH (it is now '{lib}')" in d.log()


def test_a_workspace_that_holds_a_library_path_directory_asks_for_every_call(make_daemon, workspace: Path):
    """`LD_LIBRARY_PATH=$PWD/build/lib`, started from the project: an unasked call there wrote
    build/lib/libcap.so.2, and bwrap loaded it at the next call. Such a workspace asks, as one holding
    a PATH directory does; one inside it that does not hold the directory runs unasked."""
    (workspace / "src").mkdir()
    d = make_daemon(SANDBOXED, env={"LD_LIBRARY_PATH": str(workspace / "build" / "lib")})
    with d.client() as c, d.client(name="owner") as owner:
        inside = c.call(c.open_session(workspace / "src"), "bash", {"command": "echo unasked"})
        assert inside.ok and inside.result["exit_code"] == 0 and owner.request(p.ApprovalsList).approvals == []
        call_id = c.start_call(c.open_session(workspace), "bash", {"command": f"mkdir -p build/lib; cd build/lib; "
                                                                              f"{NOT_A_LIBRARY}"})
        pending = wait_pending(owner)[0]
        assert pending.call_id == call_id and pending.tool == "bash"
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="deny")
        assert c.wait_call(call_id).error.kind == "denied"
    assert not (workspace / "build").exists()


def test_a_workspace_at_scvds_working_directory_asks_when_scvds_own_loader_looks_there(make_daemon,
                                                                                      workspace: Path):
    """scvd's own loader keeps the LD_LIBRARY_PATH scvd started with: its empty entry is scvd's working
    directory, where a module scvd imports later (ssl) finds its libraries. Run from the project, a
    session on it asks; one on a folder inside it, which cannot write the project's top, does not."""
    (workspace / "sub").mkdir()
    d = make_daemon(SANDBOXED, env={"LD_LIBRARY_PATH": "/nonexistent/lib:", "PYTHONSAFEPATH": "1"}, cwd=workspace)
    with d.client() as c, d.client(name="owner") as owner:
        inside = c.call(c.open_session(workspace / "sub"), "bash", {"command": "echo unasked"})
        assert inside.ok and owner.request(p.ApprovalsList).approvals == []
        call_id = c.start_call(c.open_session(workspace), "bash", {"command": NOT_A_LIBRARY})
        pending = wait_pending(owner)[0]
        assert pending.call_id == call_id
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="deny")
        assert c.wait_call(call_id).error.kind == "denied"
    assert not (workspace / "libcap.so.2").exists()


COUNTS = """#!/usr/bin/env python3
import json, sys
print(json.dumps({"words": len(json.load(sys.stdin)["text"].split())}))
"""
# prints the secret hex-encoded (redacted now, but the words count is what proves which python3 ran)
LEAKS = """cat > python3 <<'EOF'
#!/bin/sh
printf '{"leak": "%s"}\\n' "$(printf %s "$API_TOKEN" | od -An -tx1 | tr -d ' \\n')"
EOF
chmod +x python3
"""


def test_an_empty_path_entry_does_not_run_a_workspace_program_with_a_script_tools_secret(
        make_daemon, scv_home: Path, workspace: Path):
    """`PATH=:/usr/bin:...`: a script tool's `#!/usr/bin/env python3` ran the ./python3 an unasked call
    had put in the workspace, with the tool's secret in its environment."""
    folder = scv_home / "tools" / "script" / "count"
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text(json.dumps({
        "description": "Count the words in a text given as argument.\nUse for quick statistics; bash for anything else.",
        "parameters": {"type": "object", "required": ["text"], "additionalProperties": False, "properties": {
            "text": {"type": "string", "description": "The text to count, from the user's message, e.g. 'a b'."}}},
        "risk": "read_only", "secrets": ["API_TOKEN"]}))
    (folder / "run").write_text(COUNTS)
    (folder / "run").chmod(0o700)
    SecretStore(scv_home / "secrets.toml", env={}).set("API_TOKEN", "tok-planted-7f3a9c")
    d = make_daemon(SANDBOXED, home=scv_home, env={"PATH": f":{os.environ['PATH']}",
                                                   "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    with d.client() as c:
        sid = c.open_session(workspace)
        planted = c.call(sid, "bash", {"command": LEAKS})
        done = c.call(sid, "script_count", {"text": "a b c"})
        assert c.request(p.ApprovalsList).approvals == []
    assert planted.ok and planted.result["exit_code"] == 0 and (workspace / "python3").exists(), planted
    assert done.ok and done.result == {"words": 3}, done
    assert "dropped '' from scvd's PATH" in d.log()
