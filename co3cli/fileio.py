"""File plumbing shared by the commands: ``-`` for stdin/stdout, and no partial outputs.

Inputs named ``-`` are spooled to a temporary file (HDF5 and ``.co3`` readers seek).
Outputs go to a temporary file beside the target (or in the temp dir for ``-``) and are
renamed into place, or copied to stdout, only when the writer finished without error.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

from co3cli.errors import InputError

_CHUNK = 1 << 22


def created_timestamp() -> str:
    """ISO UTC time, or ``SOURCE_DATE_EPOCH`` when set (for byte-reproducible outputs)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc) if epoch and epoch.isdigit() \
        else _dt.datetime.now(_dt.timezone.utc)
    return when.isoformat(timespec="seconds")


def versions() -> dict[str, str]:
    """The versions a run's outputs record (co3cli, torch, numpy, python)."""
    import platform

    import numpy as np
    import torch

    from co3cli import __version__

    return {"co3cli": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


@contextlib.contextmanager
def input_path(path: str | os.PathLike, what: str = "input") -> Iterator[Path]:
    """A real, seekable path for ``path``; ``-`` spools stdin to a temporary file."""
    if str(path) != "-":
        p = Path(path)
        if not p.exists():
            raise InputError(f"{what} {str(p)!r} does not exist")
        if not p.is_file():
            raise InputError(f"{what} {str(p)!r} is not a file")
        yield p
        return
    tmp = spool(None, what)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def spool(src: BinaryIO | None, what: str) -> Path:
    """Copy ``src`` (None: piped stdin) to a temporary file that the caller removes.

    Refuses a terminal on stdin (nothing piped) and an empty stream.
    """
    if src is None:
        if sys.stdin is None or sys.stdin.isatty():
            raise InputError(f"{what} is '-' but nothing is piped to stdin")
        src = sys.stdin.buffer
    fd, tmp = tempfile.mkstemp(prefix="co3-spool-")
    try:
        with os.fdopen(fd, "wb") as f:
            shutil.copyfileobj(src, f, _CHUNK)
        if os.path.getsize(tmp) == 0:
            raise InputError(f"{what} is empty (nothing was piped in)")
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp)


@contextlib.contextmanager
def output_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through; it appears only if the block succeeds."""
    with output_path(path) as tmp, open(tmp, "wb") as f:
        yield f


@contextlib.contextmanager
def output_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path to write; renamed to ``path`` (or copied to stdout for ``-``) on success."""
    to_stdout = str(path) == "-"
    if to_stdout:
        if sys.stdout is None:
            raise InputError("output is '-' but there is no stdout")
        directory = None
    else:
        target = Path(path)
        if target.is_dir():
            raise InputError(f"output {str(target)!r} is a directory")
        directory = target.parent if str(target.parent) else Path(".")
        if not directory.is_dir():
            raise InputError(f"output folder {str(directory)!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".co3-tmp-", dir=directory)
    except OSError as e:
        raise InputError(f"cannot write to {str(directory or tempfile.gettempdir())!r}: {e.strerror}") from None
    os.close(fd)
    try:
        yield Path(tmp)
        if to_stdout:
            with open(tmp, "rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer, _CHUNK)
            sys.stdout.buffer.flush()
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp made it 0600; give it a normal file's mode
            os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def progress_bar(enabled: bool, desc: str, *, total=None, unit: str = "layer", iterable=None,
                 leave: bool = True):
    """A tqdm bar on stderr, drawn only when ``enabled`` and stderr is a terminal (a disabled
    bar still counts and iterates, silently): the one progress helper of every command."""
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=leave,
                disable=not (enabled and sys.stderr.isatty()))


def progress_iter(it, enabled: bool, desc: str, total=None, unit: str = "layer"):
    """``it`` with a :func:`progress_bar` (``it`` itself when not ``enabled``)."""
    return progress_bar(True, desc, total=total, unit=unit, iterable=it) if enabled else it
