"""Folders the bot makes for what it keeps private (its SQLite database, a key file). Does I/O.

`private_folder` makes every missing folder on the way (not only the last) readable by its owner only. A folder
that exists already is left exactly as its owner made it: the bot never changes the mode of anything it did
not create.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["FOLDER_MODE", "private_folder"]

FOLDER_MODE: Final = 0o700
"""A folder the bot creates: its owner only."""


def private_folder(folder: Path) -> None:
    """Make `folder` and each missing folder above it, each with mode 0700 whatever the umask. Another process
    making one of them at the same moment is fine (that one keeps the mode it was made with).

    Raises:
        OSError: a folder cannot be made (`PermissionError`, `NotADirectoryError`, ...).
    """
    missing: list[Path] = []
    for step in (folder, *folder.parents):
        if step.exists():
            break
        missing.append(step)
    for step in reversed(missing):
        try:
            os.mkdir(step, FOLDER_MODE)
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs, not ours to change
        os.chmod(step, FOLDER_MODE)  # the umask may have taken bits off (only ever of a folder made here)
