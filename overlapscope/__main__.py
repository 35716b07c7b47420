"""`python -m overlapscope` = the `overlapscope` command."""

from .cli import exit_after_command, main

exit_after_command(main())
