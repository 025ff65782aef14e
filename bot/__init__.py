"""toolnexus-bot's process side (imperative shell): config, CLI, MCP sessions, chat surfaces, demo server.

Nothing is imported here, so `python -m bot.<module>` (e.g. the demo server) stays light.
"""
