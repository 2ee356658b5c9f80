"""`python -m scvd` runs the scvd command."""

import sys

from .cli import main

sys.exit(main())
