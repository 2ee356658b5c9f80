"""Which of some modules `scvd run` (a fresh interpreter, default config, `SCV_HOME` = argv[1]) had
imported when it sent READY=1: `python ready_imports.py HOME mod1 mod2 ...` prints those, comma-separated.

READY=1 goes out before the server is imported (cli.run), so the first import of scvd.server is where
the start's own imports end: the process stops there, once READY=1 has come."""

import os
import socket
import sys
from pathlib import Path

home, wanted = Path(sys.argv[1]), sys.argv[2:]
manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
manager.bind(str(home.parent / "notify"))
os.environ.update(SCV_HOME=str(home), NOTIFY_SOCKET=str(home.parent / "notify"))


class AtTheServer:
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "scvd.server":
            manager.setblocking(False)
            said = manager.recv(4096)  # BlockingIOError: READY=1 did not go out before the server's import
            print(said.decode() if said != b"READY=1" else ",".join(m for m in wanted if m in sys.modules),
                  flush=True)
            os._exit(0)


sys.meta_path.insert(0, AtTheServer())
from scvd import cli  # noqa: E402  (as `python -m scvd` imports it)

cli.main(["run"])
sys.exit("scvd run returned without importing scvd.server")
