"""`python -m bot`: the same as the `toolnexus-bot` command."""

import sys

from bot.cli import main

sys.exit(main())
