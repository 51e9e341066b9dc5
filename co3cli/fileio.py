"""File plumbing shared by the commands: ``-`` for stdin/stdout, and no partial outputs.

Nothing a command writes can be left behind, even by ``kill -9``: every temporary file is a
:class:`Scratch`, an *anonymous* file (Linux ``open(dir, O_TMPFILE)``) that has no name, so
the kernel frees it when the process ends, however it ends::

    output_path/output_file/output_scratch(target)
        O_TMPFILE in target's folder --write (by fd, file object or /proc/self/fd/N)-->
        success: fchmod to a new file's mode, link /proc/self/fd/N (linkat, AT_SYMLINK_FOLLOW)
                 to target (or to a side name + os.replace when target exists)
        '-':     copied to stdout;   failure or kill: the inode just disappears

    spool(stdin) / input_path('-')
        O_TMPFILE in the temp dir --copy stdin--> read through the fd, a file object over it,
        or /proc/self/fd/N (HDF5 cannot open /proc paths by name: it gets a file object)

Fallback, where ``O_TMPFILE`` is missing or the filesystem refuses it (``EOPNOTSUPP``): a
named ``mkstemp`` file (``.co3-tmp-*`` beside the target, ``co3-spool-*`` in the temp dir),
renamed into place on success and removed on failure and at interpreter exit (``atexit``);
only there can a ``kill -9`` leave one behind.

A full disk (``ENOSPC``/``EDQUOT``) while writing an output names the output the user asked
for, never a temporary name: ``cannot write 'out.h5': No space left on device``.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as _dt
import errno
import os
import secrets
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


class Scratch:
    """A temporary file that cannot outlive its process: ``fd`` is open read/write, ``path``
    opens it again (``/proc/self/fd/N`` for an anonymous file, else the fallback name).

    ``Scratch(directory)`` makes an ``O_TMPFILE`` in ``directory`` (the temp dir for None);
    where that fails (no ``O_TMPFILE``, or a filesystem without it) a named ``mkstemp`` file,
    removed by :meth:`close` and at interpreter exit. ``unnamed=True`` unlinks the fallback
    file at once (for a reader that only uses ``fd``/``path`` in this process and has /proc).
    """

    def __init__(self, directory: str | os.PathLike | None = None, prefix: str = ".co3-tmp-"):
        directory = os.fspath(directory) if directory is not None else tempfile.gettempdir()
        self.name: str | None = None
        self.fd = -1
        if hasattr(os, "O_TMPFILE"):
            try:
                self.fd = os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o600)
            except OSError as e:
                if e.errno not in _NO_TMPFILE:
                    raise
        if self.fd < 0:
            self.fd, self.name = tempfile.mkstemp(prefix=prefix, dir=directory)
            _NAMED.add(self.name)
        self.path = Path(self.name) if self.name else Path(f"/proc/self/fd/{self.fd}")

    def open(self, mode: str = "r+b") -> BinaryIO:
        """A new file object over the scratch file (its own offset; closing it keeps the fd)."""
        if self.name is None:
            return open(self.path, mode)  # reopens the anonymous inode through /proc
        return open(self.name, mode)

    def fileobj(self, mode: str = "r+b") -> BinaryIO:
        """A file object over ``fd`` itself (closing it leaves ``fd`` open)."""
        return os.fdopen(self.fd, mode, closefd=False)

    def publish(self, target: str | os.PathLike) -> None:
        """Give the file the name ``target`` atomically (replacing any file there), with a
        normal new file's mode; the scratch file then lives on as ``target``."""
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(self.fd, 0o666 & ~umask)
        target = os.fspath(target)
        if self.name is not None:
            os.replace(self.name, target)
            _NAMED.discard(self.name)
            self.name = None
            return
        folder = os.path.dirname(target) or "."
        dirfd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            try:
                self._link(os.path.basename(target), dirfd)
                return
            except FileExistsError:
                pass
            side = f".{os.path.basename(target)}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            self._link(side, dirfd)
            try:
                os.replace(side, os.path.basename(target), src_dir_fd=dirfd, dst_dir_fd=dirfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(side, dir_fd=dirfd)
                raise
        finally:
            os.close(dirfd)

    def _link(self, name: str, dirfd: int) -> None:
        # linkat(AT_FDCWD, "/proc/self/fd/N", dirfd, name, AT_SYMLINK_FOLLOW): a dir fd makes
        # CPython call linkat with the follow flag (plain link() would link the /proc symlink)
        os.link(self.path, name, dst_dir_fd=dirfd, follow_symlinks=True)

    def exists(self) -> bool:
        """Whether the file is still there (not yet closed)."""
        return self.fd >= 0

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        if self.name is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.name)
            _NAMED.discard(self.name)
            self.name = None

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_NO_TMPFILE = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOSYS}
_NAMED: set[str] = set()  # fallback scratch files still on disk, removed at exit


@atexit.register
def _remove_named() -> None:
    for name in list(_NAMED):
        with contextlib.suppress(OSError):
            os.unlink(name)


def is_fd_path(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a ``/proc/self/fd/N`` path (HDF5 cannot open these by name)."""
    return os.fspath(path).startswith("/proc/self/fd/")


def no_space(exc: BaseException | None) -> bool:
    """Whether ``exc`` or what caused it is a full disk (ENOSPC, or EDQUOT over quota)."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def cannot_write(target: str | os.PathLike, exc: BaseException) -> InputError:
    """``cannot write 'out.h5': No space left on device``, naming the user's output."""
    name = "<stdout>" if os.fspath(target) == "-" else os.fspath(target)
    if no_space(exc):
        reason = os.strerror(errno.ENOSPC)
    else:
        reason = getattr(exc, "strerror", None) or str(exc)
    return InputError(f"cannot write {name!r}: {reason}")


@contextlib.contextmanager
def input_path(path: str | os.PathLike, what: str = "input") -> Iterator[Path]:
    """A real, seekable path for ``path``; ``-`` spools stdin to an anonymous file and yields
    its ``/proc/self/fd/N`` path (``open`` works on it; HDF5 needs a file object: see
    ``co3cli.dump.Dump``)."""
    if str(path) != "-":
        p = Path(path)
        if not p.exists():
            raise InputError(f"{what} {str(p)!r} does not exist")
        if not p.is_file():
            raise InputError(f"{what} {str(p)!r} is not a file")
        yield p
        return
    with spool(None, what) as tmp:
        yield tmp.path


def spool(src: BinaryIO | None, what: str) -> Scratch:
    """Copy ``src`` (None: piped stdin) to a :class:`Scratch` file in the temp dir, which the
    caller closes (an anonymous file vanishes with its process, even on ``kill -9``).

    Refuses a terminal on stdin (nothing piped) and an empty stream.
    """
    if src is None:
        if sys.stdin is None or sys.stdin.isatty():
            raise InputError(f"{what} is '-' but nothing is piped to stdin")
        src = sys.stdin.buffer
    tmp = Scratch(None, prefix="co3-spool-")
    try:
        with tmp.fileobj("wb") as f:
            shutil.copyfileobj(src, f, _CHUNK)
        if os.fstat(tmp.fd).st_size == 0:
            raise InputError(f"{what} is empty (nothing was piped in)")
    except OSError as e:
        tmp.close()
        raise InputError(f"cannot copy {what} from stdin to the temp dir "
                         f"{tempfile.gettempdir()!r}: {e.strerror or e}") from None
    except BaseException:
        tmp.close()
        raise
    return tmp


@contextlib.contextmanager
def output_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through; it appears only if the block succeeds.

    ``path`` may be a :class:`Scratch`'s ``/proc/self/fd/N``: that is written directly (it is
    anonymous already)."""
    if is_fd_path(path):
        with open(path, "wb") as f:
            yield f
        return
    with output_scratch(path) as tmp, tmp.fileobj("wb") as f:
        yield f
        f.flush()


def output_folder(path: str | os.PathLike, what: str = "output") -> Path:
    """The existing folder an output file ``path`` will be written to (InputError, one line,
    when ``path`` is a directory or its folder does not exist): checked before any work."""
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{what} {str(target)!r} is a directory")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{what} folder {str(folder)!r} does not exist")
    return folder


@contextlib.contextmanager
def output_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path to write (``open``/``savefig`` work on it; reopening with ``"w"``
    truncates the same file); renamed to ``path`` (or copied to stdout for ``-``) on success.
    A :class:`Scratch`'s ``/proc/self/fd/N`` is yielded as it is."""
    if is_fd_path(path):
        yield Path(path)
        return
    with output_scratch(path) as tmp:
        yield tmp.path


@contextlib.contextmanager
def output_scratch(path: str | os.PathLike) -> Iterator[Scratch]:
    """A :class:`Scratch` beside ``path`` (in the temp dir for ``-``) that becomes ``path``
    (or is copied to stdout) when the block succeeds; a full disk anywhere in the block or
    in publishing raises ``cannot write 'path': No space left on device``."""
    to_stdout = str(path) == "-"
    if to_stdout:
        if sys.stdout is None:
            raise InputError("output is '-' but there is no stdout")
        directory = None
    else:
        directory = output_folder(path)
    try:
        tmp = Scratch(directory)
    except OSError as e:
        raise InputError(f"cannot write to {str(directory or tempfile.gettempdir())!r}: {e.strerror}") from None
    try:
        yield tmp
        if to_stdout:
            with tmp.open("rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer, _CHUNK)
            sys.stdout.buffer.flush()
        else:
            tmp.publish(Path(path))
    except BaseException as e:
        if no_space(e):
            raise cannot_write(path, e) from None
        raise
    finally:
        tmp.close()


# -- what a misplaced file is ---------------------------------------------------------------
# Messages for a co3 file passed where another kind belongs ("book.json is a co3 codebook ...,
# read by co3 compress --codebook"): the readers of dumps, .co3 files and codebooks call
# misplaced() when the file is not theirs. Only the first bytes are read (a JSON file whole,
# up to _SNIFF_JSON: a codebook's "schema" follows its tables).

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
CO3_MAGIC = b"CO3\x89GRD\n"
"""The first 8 bytes of a ``.co3`` file (``co3cli.container`` writes and checks them)."""
_SNIFF_JSON = 64 << 20

KINDS: dict[str, tuple[str, str]] = {
    "dump": ("a co3 gradient dump (HDF5, co3.gradients/1)",
             "co3 fit, co3 compress, co3 report and co3 codebook build DUMP"),
    "co3": ("a compressed .co3 file",
            "co3 decompress, co3 inspect and co3 report FILE.co3"),
    "codebook": ("a co3 codebook (JSON, co3.codebook/1)",
                 "co3 compress --codebook BOOK and co3 codebook show BOOK"),
    "run-config": ("the config.json of a co3 simulate fl run",
                   "co3 simulate plot RUN_DIR and co3 simulate clock RUN_DIR (the run folder), "
                   "co3 simulate fl --config FILE (to run it again)"),
    "run-file": ("a file of a co3 simulate fl run folder",
                 "co3 simulate plot RUN_DIR and co3 simulate clock RUN_DIR (the run folder)"),
    "run-dir": ("a co3 simulate fl run folder",
                "co3 simulate plot RUN_DIR and co3 simulate clock RUN_DIR"),
    "uep-train": ("the result JSON of co3 simulate uep train (an output no command reads)", ""),
    "hdf5": ("an HDF5 file that is not a co3 gradient dump (no root attribute "
             "schema='co3.gradients/1')", ""),
}
"""Kinds :func:`sniff` recognizes -> (what the file is, which commands take it)."""


def sniff(src: str | os.PathLike | BinaryIO) -> str | None:
    """Which of co3's own files ``src`` (a path or a seekable binary file) is: a key of
    :data:`KINDS`, or None. From the magic bytes (HDF5, ``.co3``), a JSON document's
    ``schema`` or a run folder's CSV header; a file object is read from its start."""
    if isinstance(src, (str, os.PathLike)) and Path(src).is_dir():
        return "run-dir" if (Path(src) / "metrics.csv").is_file() else None
    try:
        if hasattr(src, "read"):
            src.seek(0)
            return _sniff_open(src, getattr(src, "name", None))
        with open(src, "rb") as f:
            return _sniff_open(f, src)
    except (OSError, ValueError):
        return None


def _sniff_open(f: BinaryIO, path) -> str | None:
    import json
    import re

    head = f.read(4096)
    if head.startswith(HDF5_MAGIC):
        f.seek(0)
        return _sniff_hdf5(f)
    if head.startswith(CO3_MAGIC):
        return "co3"
    name = Path(path) if isinstance(path, (str, os.PathLike)) else None
    if head.lstrip()[:1] == b"{":
        head += f.read(_SNIFF_JSON)
        try:
            doc = json.loads(head)
            schema = doc.get("schema") if isinstance(doc, dict) else None
        except (ValueError, RecursionError):
            found = re.search(rb'"schema"\s*:\s*"([^"]{1,64})"', head)
            schema = found.group(1).decode("utf-8", "replace") if found else None
        schema = schema if isinstance(schema, str) else ""
        for prefix, kind in (("co3.codebook/", "codebook"), ("co3.simulate-fl/", "run-config"),
                             ("co3.simulate-uep-train/", "uep-train")):
            if schema.startswith(prefix):
                return kind
        if name is not None and name.name == "summary.json" \
                and (name.parent / "metrics.csv").exists():
            return "run-file"
        return None
    first = head.split(b"\n", 1)[0]
    if first.startswith(b"round,") and b"uplink_bytes" in first:
        return "run-file"
    return None


def _sniff_hdf5(f: BinaryIO) -> str | None:
    import h5py

    try:
        with h5py.File(f, "r") as h5:
            schema = h5.attrs.get("schema")
    except (OSError, RuntimeError):
        return None  # a damaged HDF5 file: the reader's own message says why
    if isinstance(schema, bytes):
        schema = schema.decode("utf-8", "replace")
    return "dump" if isinstance(schema, str) and schema.startswith("co3.gradients/") else "hdf5"


def misplaced(src: str | os.PathLike | BinaryIO, label: str, wanted: str) -> str | None:
    """``"book.json is a co3 codebook (JSON, co3.codebook/1), not a gradient dump; it is read by
    co3 compress --codebook BOOK and ..."``, when ``src`` is one of co3's own files of another
    kind than ``wanted`` (a key of :data:`KINDS`); None when it is not one of them."""
    kind = sniff(src)
    if kind is None or kind == wanted:
        return None
    what, takes = KINDS[kind]
    wanted_what = {"dump": "a gradient dump", "co3": "a .co3 file",
                   "codebook": "a codebook"}.get(wanted, wanted)
    line = f"{label} is {what}, not {wanted_what}"
    line = f"{line}; it is read by {takes}" if takes else line
    dumped = Path(src) / "transmitted.h5" if kind == "run-dir" else None
    if wanted == "dump" and dumped is not None and dumped.is_file():
        line += f" (the gradients it transmitted are the dump {os.fspath(dumped)})"
    return line
