"""MCP servers for tests: in-process via `build_server()`, or stdio via `python -m tests.fakes.servers.<name>`."""
