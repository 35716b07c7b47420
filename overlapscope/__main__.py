"""`python -m overlapscope` = the `overlapscope` command."""

from .startup import run

run()
