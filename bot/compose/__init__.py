"""The composition above the hosts and the web endpoint: each host wired to the HTTP routes it needs.

The hosts (`bot.telegram`, `bot.console`) and the web endpoint (`bot.web`) are layers of one level and do not
import each other (tests/test_layers.py); a host takes a factory for what it needs of the web, and the
modules here, above both, pass it in. Nothing is imported here, so the console does not load Telegram's host.
"""
