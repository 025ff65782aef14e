"""FloodLimiter: a burst of new messages per private chat, then waiting; edits, other chats and groups unaffected."""

from __future__ import annotations

import anyio
import pytest

from bot.flood import FloodLimiter

pytestmark = pytest.mark.anyio


async def test_a_private_chat_gets_a_burst_then_new_messages_wait() -> None:
    """After the burst, a further sendMessage to the same chat waits; other chats, edits and groups do not."""
    limiter = FloodLimiter(chat_burst=3, chat_period_s=60)
    await limiter.initialize()
    sent: list[tuple[str, int]] = []

    async def request(endpoint: str, chat_id: int) -> None:
        async def callback() -> bool:
            sent.append((endpoint, chat_id))
            return True

        await limiter.process_request(callback, (), {}, endpoint, {"chat_id": chat_id}, None)

    for _ in range(3):
        await request("sendMessage", 1001)
    with anyio.move_on_after(0.2) as waited:  # the bucket would release the next one only after ~20 s
        await request("sendMessage", 1001)
    assert waited.cancelled_caught
    await request("sendMessage", 1002)
    await request("editMessageText", 1001)
    await request("sendMessage", -5001)
    assert sent == [("sendMessage", 1001)] * 3 + [
        ("sendMessage", 1002),
        ("editMessageText", 1001),
        ("sendMessage", -5001),
    ]
    await limiter.shutdown()
