"""Files written whole or not at all: the one way this server writes a file another reader may open."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from .errors import CannotStore


@contextmanager
def atomic_write(path: Path) -> Iterator[IO[bytes]]:
    """A binary file for `path`'s new content, which replaces `path` in one step when the block ends.

    A reader sees the old file or the new one, never half of one. The content is synced before the rename, so a
    full disk fails here rather than leaving a short file behind. On an error nothing is written and no temporary
    file stays; a disk that refuses the file (full, read-only, not ours) raises CannotStore, which says why to a
    client and keeps the OSError as its cause, for the log. Each call writes its own temporary file beside `path` (the
    rename stays within one file system), so calls at the same time never share one: the last to finish wins.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
    except OSError as err:
        raise refused(err) from err
    try:
        with file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(file.name, path)
    except BaseException as err:
        with suppress(OSError):  # the disk went read-only meanwhile: nothing more to do
            Path(file.name).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise refused(err) from err
        raise


def refused(err: OSError) -> CannotStore:
    """A write the disk refused, as a client is told it: what went wrong, not where (the cause's path is for
    the log)."""
    return CannotStore(f"The server's data dir cannot be written: {err.strerror or err}")
