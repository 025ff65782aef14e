"""Approval receipts as a server checks them (`bot.receipts`), and the example server in docs/approvals.md that does."""

from __future__ import annotations

import datetime as dt
import re
import sys
import types as pytypes
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mcp import Client

from bot import receipts
from bot.receipts import META_KEY, Approval, BadReceipt, Nonces, issue, verify
from bot.store.audit_keys import public_key_text

KEY = Ed25519PrivateKey.generate()
PUBLIC = public_key_text(KEY.public_key())
NOW = dt.datetime(2026, 12, 7, 3, 0, tzinfo=dt.UTC)
BOB = Approval(2002, "Bob", "2026-12-07T02:59:00+00:00", "tap")


def receipt(server: str = "prod", tool: str = "drop_database", arguments: Any = None) -> dict[str, Any]:
    return {
        META_KEY: issue(
            KEY.sign,
            server=server,
            tool=tool,
            hash=receipts.content_hash(server, tool, arguments),
            approval="apr-1",
            requester=(1001, "Alice"),
            approvers=(BOB,),
            asked_at="2026-12-07T02:58:00+00:00",
            now=NOW,
        )
    }


def test_a_receipt_is_good_until_it_expires_and_only_for_its_server_and_tool() -> None:
    """Five minutes after issue it is refused; so is one made for another server or tool."""
    meta = receipt(arguments={"name": "x"})

    def check(server: str, after_s: int) -> Any:
        return verify(
            meta,
            public_key=PUBLIC,
            server=server,
            tool="drop_database",
            arguments={"name": "x"},
            now=NOW + dt.timedelta(seconds=after_s),
        )

    assert check("prod", 299).approvers == (BOB,)
    with pytest.raises(BadReceipt, match="expired"):
        check("prod", 301)
    with pytest.raises(BadReceipt, match="another server or tool"):
        check("staging", 0)


def test_a_call_without_arguments_matches_a_receipt_for_empty_arguments() -> None:
    """The bot may hash no arguments where the server receives `{}`: the same call."""
    for signed, received in ((None, {}), ({}, None)):
        meta = receipt(arguments=signed)
        assert verify(
            meta, public_key=PUBLIC, server="prod", tool="drop_database", arguments=received, now=NOW
        )


def test_a_nonce_is_forgotten_only_after_its_receipt_expired() -> None:
    """`Nonces` refuses a second use while the receipt is good, and keeps no nonce past its expiry."""
    nonces = Nonces()
    assert nonces.first_use("n", NOW, NOW)
    assert not nonces.first_use("n", NOW, NOW)
    assert nonces.first_use("m", NOW, NOW + dt.timedelta(seconds=1))
    assert nonces.first_use("n", NOW + dt.timedelta(seconds=5), NOW + dt.timedelta(seconds=1))


def _readme_server(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The example server in docs/approvals.md, with `receipts` being bot/receipts.py and the public key `PUBLIC`."""
    readme = (Path(__file__).resolve().parents[1] / "docs" / "approvals.md").read_text()
    [code] = [b for b in re.findall(r"^```python\n(.*?)^```", readme, re.M | re.S) if "from receipts" in b]
    module = pytypes.ModuleType("readme_server")
    monkeypatch.setitem(sys.modules, "receipts", receipts)
    exec(
        compile(code.replace('PUBLIC_KEY = "..."', f"PUBLIC_KEY = {PUBLIC!r}"), "docs/approvals.md", "exec"),
        vars(module),
    )
    return module.server


@pytest.mark.anyio
async def test_the_readme_example_server_runs_a_call_with_a_receipt_once_and_refuses_one_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The example as printed: a valid receipt runs the call; the same receipt again, or none, is refused."""
    server = _readme_server(monkeypatch)
    meta = {
        META_KEY: issue(
            KEY.sign,
            server="prod",
            tool="drop_database",
            hash=receipts.content_hash("prod", "drop_database", {"name": "x"}),
            approval="apr-1",
            requester=(1001, "Alice"),
            approvers=(BOB,),
            asked_at="2026-12-07T02:58:00+00:00",
            now=dt.datetime.now(dt.UTC),
        )
    }
    texts = []
    async with Client(server) as client:
        for sent in (meta, meta, None):
            result = await client.call_tool("drop_database", {"name": "x"}, meta=sent)  # type: ignore[arg-type]
            block = result.content[0]
            assert isinstance(block, types.TextContent)
            texts.append(block.text)
    assert texts[0] == "dropped x (approved by Bob, tap)"
    assert "used before" in texts[1] and "no approval receipt" in texts[2]
