"""Run inside a private pid namespace (unshare --pid --fork --mount-proc), as root: a call's
helper exits, its pid is given to an unrelated process (through ns_last_pid), and the call ends.
Prints JSON: whether that unrelated process and its child survived the call's end."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scvd import process  # noqa: E402
from scvd.proctree import read_stat  # noqa: E402


async def main() -> dict:
    tmp = Path(tempfile.mkdtemp())
    pid_file = tmp / "helper"
    call = asyncio.ensure_future(process.run_process(
        ["/bin/bash", "-c", f"sh -c 'echo $$ > {pid_file}; sleep 0.3'; sleep 3; echo leader-done"],
        cwd=tmp, env={"PATH": os.environ["PATH"]}, timeout=30, output_limit=65536))
    await asyncio.sleep(1.0)  # a scan saw the helper; it has exited since
    helper = int(pid_file.read_text())
    Path("/proc/sys/kernel/ns_last_pid").write_text(str(helper - 1))
    other = subprocess.Popen(["/bin/bash", "-c", "echo 500 > /proc/sys/kernel/ns_last_pid; sleep 100 & wait"])
    await asyncio.sleep(0.2)
    child = [int(p) for p in os.listdir("/proc") if p.isdigit() and (s := read_stat(int(p))) and s.ppid == other.pid]
    result = await call
    await asyncio.sleep(0.2)
    out = {"reused": other.pid == helper, "call_output": result.output.strip(),
           "other_alive": other.poll() is None,
           "child_alive": bool(child) and (s := read_stat(child[0])) is not None and s.alive}
    other.kill()
    other.wait()
    return out


print(json.dumps(asyncio.run(main())))
