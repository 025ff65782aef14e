"""Store fixtures: `store` opens the store on `store_url` (tests/conftest.py: SQLite, and a real PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.config import AuditContent, Secret, StorageConfig
from bot.store import Store, open_store


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """The store opened (and migrated) on `store_url`, keeping answers in full."""
    async with open_store(StorageConfig(url=Secret(store_url)), AuditContent.FULL) as opened:
        yield opened
