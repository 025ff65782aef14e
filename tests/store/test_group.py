"""Group commit (`bot.store.group`) without a database: batches, who is woken when, and cancellation."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest
from anyio.lowlevel import checkpoint

from bot.store.group import GroupCommit


class Writes:
    """A `write` that holds each batch until `release` is set, and records the batches."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = anyio.Event()
        self.started = anyio.Event()
        self.finished: list[list[int]] = []

    async def __call__(self, batch: Sequence[int]) -> list[int | BaseException]:
        self.batches.append(list(batch))
        self.started.set()
        await self.release.wait()
        self.finished.append(list(batch))
        return [ValueError(n) if n < 0 else n * 10 for n in batch]


@pytest.mark.anyio
async def test_writes_queued_during_a_batch_go_together_in_the_next_and_each_caller_gets_its_own_result() -> (
    None
):
    writes = Writes()
    commits = GroupCommit(writes)
    results: dict[int, int] = {}

    async def submit(n: int) -> None:
        results[n] = await commits.submit(n)

    async with anyio.create_task_group() as tg:
        tg.start_soon(submit, 0)
        await writes.started.wait()
        for n in range(1, 21):
            tg.start_soon(submit, n)
        await anyio.wait_all_tasks_blocked()
        writes.release.set()
    assert writes.batches == [[0], list(range(1, 21))]
    assert results == {n: n * 10 for n in range(21)}


@pytest.mark.anyio
async def test_the_callers_of_a_batch_are_woken_together_not_one_after_another() -> None:
    """Once a batch is written, every caller in it returns within a few passes of the event loop (a lock held
    in turn would let one through a pass: under a flood, seconds for the last of a hundred)."""
    writes = Writes()
    commits = GroupCommit(writes)
    returned: list[int] = []

    async def submit(n: int) -> None:
        await commits.submit(n)
        returned.append(n)

    async with anyio.create_task_group() as tg:
        tg.start_soon(submit, 0)
        await writes.started.wait()
        for n in range(1, 101):
            tg.start_soon(submit, n)
        await anyio.wait_all_tasks_blocked()
        writes.release.set()
        for _ in range(5):
            await checkpoint()
        assert sorted(returned) == list(range(101))


@pytest.mark.anyio
async def test_an_item_that_fails_fails_alone_and_a_failing_batch_fails_each_caller() -> None:
    writes = Writes()
    writes.release.set()
    commits = GroupCommit(writes)
    outcomes: dict[int, object] = {}

    async def submit(n: int) -> None:
        try:
            outcomes[n] = await commits.submit(n)
        except ValueError as exc:
            outcomes[n] = exc

    async with anyio.create_task_group() as tg:
        for n in (1, -2, 3):
            tg.start_soon(submit, n)
    assert outcomes[1] == 10 and outcomes[3] == 30 and isinstance(outcomes[-2], ValueError)

    async def broken(batch: Sequence[int]) -> list[int | BaseException]:
        raise RuntimeError("the database went away")

    failing: GroupCommit[int, int] = GroupCommit(broken)
    with pytest.raises(RuntimeError, match="went away"):
        await failing.submit(1)


@pytest.mark.anyio
async def test_a_caller_cancelled_while_waiting_still_has_its_write_committed_and_the_queue_goes_on() -> None:
    writes = Writes()
    commits = GroupCommit(writes)
    later: list[int] = []

    with anyio.fail_after(5):  # a queue that stalled behind the cancelled caller would hang here
        async with anyio.create_task_group() as tg:
            tg.start_soon(commits.submit, 0)
            await writes.started.wait()
            with anyio.CancelScope() as scope:
                scope.cancel()  # cancelled at its first wait: queued, then gone
                await commits.submit(1)
            writes.release.set()

            async def submit(n: int) -> None:
                later.append(await commits.submit(n))

            tg.start_soon(submit, 2)
    assert [n for batch in writes.batches for n in batch] == [0, 1, 2] and later == [20]


@pytest.mark.anyio
async def test_a_writer_cancelled_mid_batch_still_writes_it_and_the_next_caller_writes_the_rest() -> None:
    writes = Writes()
    commits = GroupCommit(writes)
    results: dict[int, int] = {}
    scopes: list[anyio.CancelScope] = []

    async def submit(n: int) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            results[n] = await commits.submit(n)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(submit, 0)
            await writes.started.wait()
            for n in (1, 2, 3):
                tg.start_soon(submit, n)
            await anyio.wait_all_tasks_blocked()
            scopes[0].cancel()  # the writer's caller goes away while its batch is being written
            await anyio.wait_all_tasks_blocked()
            assert writes.finished == []  # the batch was not interrupted: it still waits to be released
            writes.release.set()
    assert writes.finished == [[0], [1, 2, 3]]
    assert {n: results[n] for n in (1, 2, 3)} == {1: 10, 2: 20, 3: 30}
