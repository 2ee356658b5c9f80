"""Which of some modules a daemon started in a fresh interpreter (default config, `SCV_HOME` = argv[1])
has imported: `python started_imports.py HOME mod1 mod2 ...` prints those loaded, comma-separated."""

import asyncio
import sys
from pathlib import Path

import scvd.cli  # noqa: F401  (what `scvd run` imports before it serves)
from scvd import config, paths as paths_mod
from scvd.server import Daemon


async def main(home: Path, modules: list[str]) -> None:
    paths = paths_mod.resolve({"SCV_HOME": str(home)})
    paths_mod.prepare(paths)
    d = Daemon(paths, config.load(paths.config_file, env={}), install_signals=False)
    await d.startup([])
    loaded = sorted(m for m in modules if m in sys.modules)
    d.request_stop()
    await d.shutdown()
    print(",".join(loaded))


asyncio.run(main(Path(sys.argv[1]), sys.argv[2:]))
