"""Tool calls made as tasks that outlive the process: what is kept of each, and who keeps it. Plain values and a
protocol, no I/O.

A person's call made as a task (2025-11-25) is kept from when its server answered with the task until its
result reached the person (or the call was cancelled): after a restart, the next process polls the task again
and shows its result. An agent's call is not kept (its HTTP request ended with the process).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from bot.core.values import Origin


@dataclass(frozen=True, slots=True)
class KeptTask:
    """One task as the store keeps it (one row)."""

    id: str
    """A uuid of the bot's own for the row."""
    server: str
    task_id: str
    """The server's task id."""
    tool: str
    arguments: dict[str, Any] | None
    origin: Origin
    """Whose call it is, and the chat its result goes to."""
    expires: float | None
    """Unix time after which the server no longer keeps the task (its `ttl`); None: unlimited."""


class TaskBook(Protocol):
    """Where running tasks are kept (the store). Every write is committed when the call returns.

    Raises `Exception` subclasses of its own for database failures; callers log them and go on.
    """

    async def keep(self, task: KeptTask) -> None:
        """Save a task once its server made it."""
        ...

    async def close(self, task_id: str) -> None:
        """Forget a task (by the row's `id`) whose result reached its person, or that was cancelled."""
        ...

    async def open_tasks(self) -> list[KeptTask]:
        """Every kept task, oldest first."""
        ...
