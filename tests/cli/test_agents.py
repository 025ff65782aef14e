"""`toolnexus-bot agents list` and `agents revoke`: the operator's view of the gateway's tokens, without SQL.
Real processes on a SQLite database the store filled, as the running bot would have."""

from __future__ import annotations

from pathlib import Path

import anyio

from bot.config import Secret, StorageConfig
from bot.core.agents import TOKEN_PREFIX, hash_token
from bot.store import open_store
from tests.cli.test_operator import run

ALICE, BOB = 1001, 1002


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "c.toml"
    config.write_text('[servers.demo]\ncommand = "python"\n')
    return config


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'toolnexus.db'}"


def _tokens(tmp_path: Path, *made: tuple[int, str]) -> list[str]:
    """Tokens made in the config's database (beside it), as `/agents new` makes them; their texts."""

    async def make() -> list[str]:
        async with open_store(StorageConfig(url=Secret(_url(tmp_path)))) as store:
            return [(await store.agents.create(user, name, 0))[1] for user, name in made]

    return anyio.run(make)


def _state(tmp_path: Path, *texts: str) -> tuple[list[bool], list[tuple[str, int | None, dict[str, object]]]]:
    """Whether each token still verifies, and the audit rows (event, person, detail)."""

    async def read() -> tuple[list[bool], list[tuple[str, int | None, dict[str, object]]]]:
        async with open_store(StorageConfig(url=Secret(_url(tmp_path)))) as store:
            live = [await store.agents.verify(text) is not None for text in texts]
            rows = [(r.event, r.user_id, r.as_dict()["detail"]) for r in await store.audit.rows()]
        return live, rows

    return anyio.run(read)


def test_agents_list_shows_the_live_tokens_and_never_their_text(tmp_path: Path) -> None:
    """One line per live token (its person, name, when made, use, expiry), everyone's or one person's; a revoked
    token is left out; neither a token's text nor its hash is printed."""
    config = _config(tmp_path)
    texts = _tokens(tmp_path, (ALICE, "laptop"), (ALICE, "ci"), (BOB, "ide"))
    assert (
        run("agents", "revoke", "--config", str(config), "--user", str(ALICE), "--name", "ci").returncode == 0
    )
    everyone = run("agents", "list", "--config", str(config))
    bobs = run("agents", "list", "--config", str(config), "--user", str(BOB))
    assert everyone.returncode == bobs.returncode == 0, everyone.stderr
    lines = everyone.stdout.splitlines()
    assert len(lines) == 2
    assert f"user {ALICE}  laptop  made " in lines[0] and "never used · 0 calls · until revoked" in lines[0]
    assert lines[1].startswith(f"user {BOB}  ide  made ")
    assert bobs.stdout.splitlines() == [lines[1]]
    for text in texts:
        for printed in (everyone.stdout, bobs.stdout):
            assert text.removeprefix(TOKEN_PREFIX) not in printed and hash_token(text) not in printed


def test_agents_revoke_ends_one_token_or_all_of_a_person_and_is_audited_as_the_operators(
    tmp_path: Path,
) -> None:
    """`--name` revokes that token; without it every live token of the person; each is audited as the operator's
    doing. Nothing left to revoke is exit 1 and says so; another person's tokens stay."""
    config = _config(tmp_path)
    texts = _tokens(tmp_path, (ALICE, "laptop"), (ALICE, "ci"), (BOB, "laptop"))
    one = run("agents", "revoke", "--config", str(config), "--user", str(ALICE), "--name", "laptop")
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith(f"revoked: user {ALICE}  laptop  made ")
    rest = run("agents", "revoke", "--config", str(config), "--user", str(ALICE))
    assert rest.returncode == 0 and "  ci  " in rest.stdout and "laptop" not in rest.stdout
    again = run("agents", "revoke", "--config", str(config), "--user", str(ALICE))
    assert again.returncode == 1 and f"user {ALICE} has no live agent tokens: nothing revoked" in again.stderr
    live, rows = _state(tmp_path, *texts)
    assert live == [False, False, True]
    revoked = [
        (user, detail["agent"], detail["by"])
        for event, user, detail in rows
        if event == "agent_token_revoked"
    ]
    assert revoked == [(ALICE, "laptop", "operator"), (ALICE, "ci", "operator")]


def test_agents_where_there_is_no_database_is_an_error_and_creates_none(tmp_path: Path) -> None:
    """A wrong path must not look like "no tokens": exit 1, the missing file named, nothing created."""
    config = _config(tmp_path)
    done = run("agents", "list", "--config", str(config))
    assert done.returncode == 1 and "no database file at" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]
