"""Which modules a `scvctl` command imported: `python scvctl_imports.py OUT ARG...` runs scvctl's main
on ARG... as its console script does, then writes every module loaded to the file OUT, one a line."""

import sys
from pathlib import Path

from scvctl.cli import main

try:
    code = main(sys.argv[2:])
except SystemExit as exc:  # --help
    code = exc.code
finally:
    Path(sys.argv[1]).write_text("\n".join(sorted(sys.modules)) + "\n")
sys.exit(code)
