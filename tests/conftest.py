"""Shared pytest configuration: the anyio plugin runs async tests on asyncio (PTB is asyncio-only)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
