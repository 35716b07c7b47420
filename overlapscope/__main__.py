"""`python -m overlapscope` = the `overlapscope` command."""

import sys

from .cli import main

sys.exit(main())
