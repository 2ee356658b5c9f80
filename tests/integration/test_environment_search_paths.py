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

from scvd import protocol as p
from scvd.secrets import SecretStore

pytestmark = pytest.mark.bwrap

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


COUNTS = """#!/usr/bin/env python3
import json, sys
print(json.dumps({"words": len(json.load(sys.stdin)["text"].split())}))
"""
# prints the secret hex-encoded: redaction looks for the value as it is
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
