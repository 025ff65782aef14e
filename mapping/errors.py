"""The mapping's exceptions. Pure.

MappingError
 ├── InvalidParams        elicitation params that are not the shape MCP defines
 └── UnsupportedSchema    a requestedSchema outside what the spec allows (or broken JSON Schema)
"""

from __future__ import annotations


class MappingError(Exception):
    """Base of every error `mapping` raises."""


class InvalidParams(MappingError):
    """Elicitation params that are malformed (`key` names the offending param)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


class UnsupportedSchema(MappingError):
    """A schema the spec does not allow; `path` locates it (`"properties.size"`), `reason` says why."""

    def __init__(self, reason: str, path: str = "") -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.reason = reason
        self.path = path
