"""Fakes at the edges: the fake Bot API (`telegram`), test MCP servers (`servers`), a recording surface, a proxy."""
