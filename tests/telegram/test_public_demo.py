"""The public demo end to end: strangers under `allow_everyone`, the shared demo session in both eras, limits.

Real PTB against the fake Bot API, the real demo server (in-process, or over stdio from the shipped config),
/metrics scraped over loopback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.demo import shipped_config
from bot.compose.telegram import serve
from bot.config import LimitsConfig, load_config
from bot.servers.limits import Limit
from tests.fakes.telegram import FakeTelegram, FakeUser, Msg
from tests.ports import free_port
from tests.telegram.harness import Chat, bot_scene, is_result

pytestmark = pytest.mark.anyio


def has_buttons(msg: Msg) -> bool:
    return bool(msg.buttons)


def succeeded(call: Msg) -> Callable[[Msg], bool]:
    """Matches the successful result of the call `call` started."""
    return lambda m: is_result(m, after=call) and "✅" in m.text


async def refusals(port: int) -> dict[str, float]:
    """`toolnexus_refusals_total` by limit, read from /metrics."""
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    return {
        sample.labels["limit"]: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "toolnexus_refusals_total"
    }


async def deploy_card(s: Chat, user: FakeUser, service: str) -> Msg:
    await user.send(f"/call demo deploy service={service}")
    return await s.fake.wait_for(
        lambda m: m.chat_id == user.id and f"Where should {service} be deployed?" in m.text and has_buttons(m)
    )


async def finish_deploy(
    s: Chat, user: FakeUser, card: Msg, service: str, choice: str, environment: str
) -> None:
    """Choose, submit, confirm, submit; the result names this person's service and choice."""
    await user.press(card, choice)
    await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
    await user.press(card, "✅ Submit")
    confirm = await s.fake.wait_for(
        lambda m: m.chat_id == user.id and f"Deploy {service} to {environment}?" in m.text and has_buttons(m)
    )
    await user.press(confirm, "Yes")
    await s.fake.wait_for(lambda m: m is confirm and "Please review" in m.text)
    await user.press(confirm, "✅ Submit")
    await s.fake.wait_for(lambda m: m.chat_id == user.id and f"Deployed {service} to {environment}" in m.text)


async def test_a_stranger_looping_call_is_throttled_while_another_stranger_is_served() -> None:
    """Under allow_everyone, a stranger's calls past the per-minute limit are refused with one line said once
    (the rest silently, all counted in /metrics); another stranger's deploy meanwhile completes normally."""
    port = free_port()
    per_minute = LimitsConfig.public().calls_per_minute
    async with bot_scene(web={"listen": "127.0.0.1", "port": port}, allow_everyone=True, allowed=[]) as s:
        card = await deploy_card(s, s.alice, "alice")
        for _ in range(per_minute):
            call = await s.mallory.send("/call demo long_task steps=1")
            await s.fake.wait_for(succeeded(call))
        await s.mallory.send("/call demo long_task steps=1")
        refused = await s.fake.next_message(s.mallory, containing="refused")
        assert f"at most {per_minute} calls a minute" in refused.text and "\n" not in refused.text
        for _ in range(3):
            await s.mallory.send("/call demo long_task steps=1")
        await finish_deploy(s, s.alice, card, "alice", "Production (live)", "production")
        # The bot sends to one chat in the order it asked to: a reply after the loop comes after any line.
        await s.mallory.send("/help")
        await s.fake.next_message(s.mallory, containing="/tools")
        counted = await refusals(port)
        said = [m for m in s.fake.messages(s.mallory, from_bot=True) if "refused" in m.text]
        results = [m for m in s.fake.messages(s.mallory, from_bot=True) if "long_task" in m.text]
    assert said == [refused]
    assert len(results) == per_minute + 1  # its calls' results and the one refusal line
    assert counted[Limit.CALLS_PER_MINUTE] == 4
    assert not any("refused" in m.text for m in s.fake.messages(s.alice, from_bot=True))


async def test_strangers_are_limited_only_when_the_operator_sets_limits() -> None:
    """Without allow_everyone and without [limits], a person's loop is never refused."""
    async with bot_scene() as s:
        for _ in range(LimitsConfig.public().calls_per_minute + 2):
            call = await s.alice.send("/call demo long_task steps=1")
            await s.fake.wait_for(succeeded(call))
        assert not any("refused" in m.text for m in s.fake.messages(s.alice, from_bot=True))


async def test_two_people_on_the_shared_2026_session_get_their_own_questions_at_once() -> None:
    """One shared demo session in the 2026-07-28 era: both people's first questions are out together, and
    each answer reaches the call that asked it."""
    servers = {"demo": {"command": "in-process", "protocol": "2026-07-28", "shared": True}}
    async with bot_scene(servers=servers) as s:
        alice_card = await deploy_card(s, s.alice, "alice")
        bob_card = await deploy_card(s, s.bob, "bob")
        await finish_deploy(s, s.bob, bob_card, "bob", "Staging (safe to try)", "staging")
        await finish_deploy(s, s.alice, alice_card, "alice", "Production (live)", "production")
        assert not any("waiting for another" in m.text for m in s.fake.messages(s.bob, from_bot=True))


async def test_on_a_shared_legacy_session_the_next_person_is_told_they_wait_for_another_question() -> None:
    """A 2025 shared session runs one call at a time: while Alice's question is open, Bob's call waits and
    Bob is told why; once Alice has her result, Bob gets his own question and his own result."""
    servers = {"demo": {"command": "in-process", "protocol": "legacy", "shared": True}}
    async with bot_scene(servers=servers) as s:
        alice_card = await deploy_card(s, s.alice, "alice")
        await s.bob.send("/call demo deploy service=bob")
        told = await s.fake.next_message(s.bob, containing="waiting")
        assert told.text == "⏳ waiting for another person's question on demo"
        assert not any("Where should bob" in m.text for m in s.fake.messages(s.bob, from_bot=True))
        await finish_deploy(s, s.alice, alice_card, "alice", "Staging (safe to try)", "staging")
        bob_card = await s.fake.wait_for(
            lambda m: "Where should bob be deployed?" in m.text and has_buttons(m)
        )
        await finish_deploy(s, s.bob, bob_card, "bob", "Production (live)", "production")


STRANGERS = 30


@asynccontextmanager
async def shipped_demo(folder: Path) -> AsyncIterator[FakeTelegram]:
    """The bot from `config.example.toml` as shipped (only the Bot API address and `allow_everyone` changed,
    as for a public demo; the token from the environment): its demo server a real stdio process, its store a
    SQLite file beside the config."""
    async with FakeTelegram() as fake:
        path = folder / "config.toml"
        path.write_text(shipped_config(fake.base_url), encoding="utf-8")
        config = load_config(path, {"TELEGRAM_BOT_TOKEN": fake.token})
        stop, ready = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve, config, stop, ready)
            with anyio.fail_after(20):
                await ready.wait()
            yield fake
            stop.set()
        assert not fake.unexpected_errors, fake.unexpected_errors


async def test_thirty_strangers_at_once_on_the_shipped_demo_each_get_their_card_and_their_own_result(
    tmp_path: Path,
) -> None:
    """30 strangers `/call demo deploy` at once on the shipped shared demo: every one gets their own first
    question (none is refused for the others' open questions) and sees the deploy through to the result
    naming their service and choice."""
    async with shipped_demo(tmp_path) as fake:
        people = [fake.user(id=700_000 + i, first_name=f"S{i}") for i in range(STRANGERS)]
        done: list[int] = []

        async def deploy(user: FakeUser) -> None:
            service = f"s{user.id}"
            choice, environment = (("Staging (safe to try)", "staging"), ("Production (live)", "production"))[
                user.id % 2
            ]
            await user.send(f"/call demo deploy service={service}")
            card = await fake.wait_for(
                lambda m: (
                    m.chat_id == user.id
                    and (f"Where should {service} be deployed?" in m.text or "too many questions" in m.text)
                ),
                timeout=60,
            )
            assert has_buttons(card), card.text
            await user.press(card, choice, timeout=30)
            await fake.wait_for(lambda m: m is card and "Please review" in m.text, timeout=30)
            await user.press(card, "✅ Submit", timeout=30)
            confirm = await fake.wait_for(
                lambda m: (
                    m.chat_id == user.id
                    and f"Deploy {service} to {environment}?" in m.text
                    and has_buttons(m)
                ),
                timeout=30,
            )
            await user.press(confirm, "Yes", timeout=30)
            await fake.wait_for(lambda m: m is confirm and "Please review" in m.text, timeout=30)
            await user.press(confirm, "✅ Submit", timeout=30)
            await fake.wait_for(
                lambda m: m.chat_id == user.id and f"Deployed {service} to {environment}" in m.text,
                timeout=60,
            )
            done.append(user.id)

        async with anyio.create_task_group() as tg:
            for user in people:
                tg.start_soon(deploy, user)
    assert sorted(done) == [user.id for user in people]
