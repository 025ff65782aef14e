"""`tests/inprocess.py`: a command run as `main` in the test's process leaves the process as it found it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from tests.inprocess import toolnexus


def test_a_command_in_process_gives_its_output_and_leaves_logging_and_the_environment_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`db upgrade` at DEBUG: its line on stdout, exit 0; afterwards the root logger's handlers and level, the
    record factory, the libraries' levels and the caller's TOOLNEXUS_ variables are those from before."""
    monkeypatch.setenv("TOOLNEXUS_CONFIG", str(tmp_path / "elsewhere.toml"))
    config = tmp_path / "bot.toml"
    config.write_text('[servers.demo]\ncommand = "python"\n')
    root = logging.getLogger()
    before = (
        logging.getLogRecordFactory(),
        list(root.handlers),
        root.level,
        logging.getLogger("httpx").level,
    )
    done = toolnexus("--log-level", "DEBUG", "db", "upgrade", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "at revision" in done.stdout
    after = (logging.getLogRecordFactory(), list(root.handlers), root.level, logging.getLogger("httpx").level)
    assert after == before
    assert os.environ["TOOLNEXUS_CONFIG"] == str(tmp_path / "elsewhere.toml")
