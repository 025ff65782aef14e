"""Tests of `bot.servers`: the hub, sessions, rounds, limits and checks against real MCP servers (tests/fakes/servers)."""
