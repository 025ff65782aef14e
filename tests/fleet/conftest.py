"""The fleet's tests run their own process's loop on plain asyncio; the bots they start keep uvloop (bot.cli).

Under uvloop, a fleet test that failed hung in the loop's close (`loop.close()` never returned), so its report
never came and CI ran on to its time limit; and `open_store` in the test process was once seen to hang after
tests/store/test_engine.py's tests in the same worker. Neither is understood; neither is what these tests are
about (processes, PostgreSQL, the fake Bot API), so their own loop is the standard library's.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return "asyncio", {}
