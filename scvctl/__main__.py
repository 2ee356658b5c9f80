"""`python -m scvctl` runs the scvctl command."""

import sys

from .cli import main

sys.exit(main())
