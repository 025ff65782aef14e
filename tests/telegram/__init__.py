"""Tests of `bot.telegram`, end to end: real PTB against the fake Bot API (tests/fakes/telegram), real MCP servers."""
