"""Tests of `bot.console`: the terminal host, run as a person runs it."""
