"""PromptRegistry's writes around a question: its audit row and its kept copy go at once, both before its card
is shown and both before its card is settled; a failing write fails the question as it would alone."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from bot.core import Origin, Outcome, Prompt, PromptRegistry
from mapping import Answer, Request, RequestKind
from tests.fakes.surface import RecordingSurface

pytestmark = pytest.mark.anyio

ORIGIN = Origin(chat_id=7, user_id=7)


class Rendezvous:
    """An observer and a keeper whose writes each wait until the other's has started: written one after the
    other, the first would wait for good (it gives up with TimeoutError after a few seconds instead)."""

    def __init__(self, surface: RecordingSurface, *, fail_keeping: bool = False) -> None:
        self.surface = surface
        self.fail_keeping = fail_keeping
        self.started: dict[str, anyio.Event] = {}
        self.log: list[str] = []

    async def _write(self, name: str, other: str) -> None:
        self.started.setdefault(name, anyio.Event()).set()
        with anyio.fail_after(3):
            await self.started.setdefault(other, anyio.Event()).wait()
        self.log.append(f"{name} (shown: {len(self.surface.shown)}, settled: {len(self.surface.settled)})")

    # Observer
    async def prompt_shown(self, prompt: Prompt) -> None:
        await self._write("audit shown", "kept")

    async def prompt_ended(self, prompt: Prompt, outcome: Outcome, answer: Answer | None) -> None:
        await self._write("audit ended", "closed")

    # Keeper
    @property
    def resumable(self) -> bool:
        return False  # as a 2025-era question's keeper

    async def shown(self, prompt: Prompt) -> None:
        await self._write("kept", "audit shown")
        if self.fail_keeping:
            raise OSError("disk full")

    async def placed(self, prompt: Prompt, chat_id: int, message_id: int) -> None:
        pass

    async def progress(self, prompt: Prompt, progress: dict[str, Any]) -> None:
        pass

    async def ended(self, prompt: Prompt, answer: dict[str, Any] | None) -> None:
        await self._write("closed", "audit ended")


def question(keeper: Rendezvous) -> Prompt:
    request = Request(id="elc-test-1", kind=RequestKind.INPUT, prompt="Sure?")
    return Prompt(request=request, origin=ORIGIN, server="s", keeper=keeper)


async def test_the_audit_row_and_the_kept_copy_are_written_at_once_before_the_card_and_before_settling() -> (
    None
):
    surface = RecordingSurface()
    writes = Rendezvous(surface)
    registry = PromptRegistry(surface, 60.0, observer=writes)  # type: ignore[arg-type]  # observer: the two hooks used
    prompt = question(writes)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(registry.ask, prompt)
            await surface.wait_for(lambda: surface.shown)
            prompt.answer(Answer(id=prompt.request.id, ok=True, data={}))
    assert sorted(writes.log[:2]) == ["audit shown (shown: 0, settled: 0)", "kept (shown: 0, settled: 0)"]
    assert sorted(writes.log[2:]) == ["audit ended (shown: 1, settled: 0)", "closed (shown: 1, settled: 0)"]


async def test_a_question_whose_keeping_fails_is_not_shown_and_the_error_is_the_keepers() -> None:
    surface = RecordingSurface()
    writes = Rendezvous(surface, fail_keeping=True)
    registry = PromptRegistry(surface, 60.0, observer=writes)  # type: ignore[arg-type]
    with anyio.fail_after(10), pytest.raises(OSError, match="disk full"):
        await registry.ask(question(writes))
    assert surface.shown == []
