"""Where a finished dump goes, and the checks around writing one in place.

::

    dump recorded at a path --gzip_in_place (optional)--> copy_to_stream --> stdout / file object
                                 check_space before each row; os_reason for the error text

``DumpWriter`` copies its finished temporary file out with ``copy_to_stream``; ``co3 capture``
(``co3cli.capture``) records to a path or, for ``-`` and file objects, to a temporary file that
it copies out the same way, rewriting it gzip-compressed first when asked.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from typing import Any, BinaryIO

_COPY_CHUNK = 1 << 20
_SPACE_MARGIN = 1 << 18  # bytes kept free for HDF5 metadata when checking the disk space


def human_bytes(n: float) -> str:
    """``n`` bytes as ``"512 B"``, ``"1.5 KiB"``, ... ``"2.0 GiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


class CountingWriter:
    """A binary stream that counts the bytes written through it (for ``-`` / file objects)."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.name = getattr(raw, "name", "<stdout>")
        self.nbytes = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):  # a pipe may take part of a large write; write the rest
            n = self.raw.write(view[done:])
            if n == 0:
                raise BrokenPipeError("the output stream accepts no more bytes")
            done += len(view) - done if n is None else n
        self.nbytes += done
        return done

    def flush(self) -> None:
        self.raw.flush()


def copy_to_stream(path: str | os.PathLike, out: Any) -> int:
    """Copy the file at ``path`` to ``out`` (``-``: stdout) and flush; returns the bytes copied."""
    sink = CountingWriter(sys.stdout.buffer if isinstance(out, str) and out == "-" else out)
    with open(path, "rb") as src:
        shutil.copyfileobj(src, sink, _COPY_CHUNK)
    sink.flush()
    return sink.nbytes


def check_space(path: Any, row_bytes: int) -> None:
    """Refuse a row that may not fit: HDF5 handles a full disk badly (it can crash)."""
    need = _SPACE_MARGIN + row_bytes
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except (OSError, AttributeError):
        return
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise OSError(errno.ENOSPC, f"no space left on device ({human_bytes(free)} free, "
                                    f"a row needs up to {human_bytes(need)})")


def os_reason(exc: BaseException) -> str:
    """Why writing a dump failed, for ``cannot write dump X: <reason>``."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        detail = exc.strerror if "free" in str(exc.strerror) else "no space left on device"
        return f"{detail} (the partial dump was removed)"
    reason = getattr(exc, "strerror", None) or str(exc)
    return f"{reason} (the partial dump was removed)"


_SCALE_ATTRS = ("DIMENSION_LIST", "REFERENCE_LIST", "DIMENSION_LABELS")


def gzip_in_place(path: str) -> None:
    """Rewrite the dump at ``path`` with its layers gzip-compressed (shuffle filter), through an
    anonymous file beside it (``fileio.Scratch``) that replaces ``path`` only when complete."""
    import h5py

    from co3cli.dump.dims import attach_dims, is_dimension_scale
    from co3cli.fileio import Scratch

    with Scratch(os.path.dirname(os.path.abspath(path))) as tmp, tmp.fileobj("r+b") as out:
        with h5py.File(path, "r") as src, h5py.File(out, "w") as dst:
            dst.attrs.update(src.attrs)

            def copy(name, obj):
                if isinstance(obj, h5py.Group):
                    dst.require_group(name).attrs.update(obj.attrs)
                    return
                if is_dimension_scale(obj):  # made again below (references are per file)
                    return
                gz = dict(compression="gzip", shuffle=True) if name.startswith("grads/") else {}
                dst.create_dataset(name, data=obj[()], maxshape=obj.maxshape,
                                   chunks=obj.chunks, **gz).attrs.update(
                    {k: v for k, v in obj.attrs.items() if k not in _SCALE_ATTRS})

            src.visititems(copy)
            layers = []
            dst["grads"].visititems(
                lambda n, o: layers.append(n) if isinstance(o, h5py.Dataset) else None)
            if any(is_dimension_scale(o) for o in src.values() if isinstance(o, h5py.Dataset)):
                attach_dims(dst, layers, int(dst["steps"].shape[0]))
        out.flush()
        tmp.publish(path)
