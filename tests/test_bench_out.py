"""`python -m bench` leaves tracked files alone unless asked: its default output is ignored by git."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench.__main__ import _parser

REPO = Path(__file__).resolve().parents[1]


def test_the_bench_writes_its_results_where_git_does_not_track_them() -> None:
    """The default `--out` is a path git ignores; the published figures need an explicit `--out`."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = _parser().parse_args([]).out
    ignored = subprocess.run(["git", "check-ignore", "-q", str(out)], cwd=REPO, check=False)
    assert ignored.returncode == 0, f"{out} would be tracked by git"
    assert _parser().parse_args(["--out", "x.json"]).out == Path("x.json")
