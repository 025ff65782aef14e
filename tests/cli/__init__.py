"""Tests of the command line (`bot.cli`, `bot.compose`, `bot.failures`, the demo server): the installed command."""
