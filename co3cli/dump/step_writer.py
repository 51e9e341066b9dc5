"""Write a ``co3.gradients/1`` dump one step at a time, crash-safely, in place (``StepWriter``).

::

    write(step, {layer: row}, loss, lr) = stage (a row of every layer, then loss / lr)
        + commit (the ``steps`` entry, written last) + flush --> dump.h5 at its final path

A process killed at any point leaves a dump the reader accepts, holding every committed step:
rows beyond ``len(steps)`` are ignored by ``Dump``. Used by ``co3cli.recorder.GradientRecorder``
(and so ``co3 capture``) and by the simulators' dumps of transmitted gradients.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from co3cli.dump.dims import BF16_DESCRIPTION, attach_dims
from co3cli.dump.reader import Dump
from co3cli.dump.schema import (
    STORAGE_DTYPES,
    attr_value,
    check_layer_name,
    decode_attr,
    provenance,
)
from co3cli.errors import InputError
from co3cli.registry import one_of

_CHUNK_BYTES = 1 << 14  # rows per chunk of a small layer: about this many bytes per chunk
_MAX_CHUNK_ROWS = 64
_MAX_CHUNK_BYTES = 1 << 20  # one row chunk at most this big, so it fits h5py's chunk cache
_GROW_ROWS = 64  # rows preallocated at a time (so a step does not resize every dataset)


def _grow_rows(numel: int, itemsize: int) -> tuple[int, int]:
    """Chunk shape (rows, cols) for a dataset written one row at a time."""
    cols = min(numel, _MAX_CHUNK_BYTES // itemsize)
    rows = 1 if cols < numel else max(1, min(_MAX_CHUNK_ROWS, _CHUNK_BYTES // (itemsize * numel)))
    return rows, cols


class StepWriter:
    """Crash-safe incremental writer of a ``co3.gradients/1`` dump, one step per ``write``.

    Unlike ``DumpWriter`` (whole layers, atomic) it writes step-major to the final ``path`` (no
    temporary file): each ``write`` fills one row of every layer (preallocated ``_GROW_ROWS`` rows
    at a time), then ``loss`` / ``lr``, and flushes; then the ``steps`` entry (the commit record),
    and flushes again.
    A process killed at any point leaves a dump the reader accepts, holding every committed step
    (rows beyond ``len(steps)`` are ignored). Compression is not offered: rewriting a compressed
    chunk moves it, which would break that guarantee.

    ``layers`` maps dataset name (relative to ``grads``; ``<stream>/<param>`` with streams) to
    the parameter shape, in model order. ``dtype`` is the storage type of every layer, one of
    ``STORAGE_DTYPES``; rows passed to ``write`` must already be flat arrays of that storage
    dtype (uint16 bit patterns for bfloat16). ``streams`` (a list) is stored as the root
    attribute. Whether ``loss`` / ``lr`` are recorded is fixed by the first ``write``.

    Without ``resume`` an existing file at ``path`` is replaced at once (like ``open(path,
    "w")``). ``resume=True`` appends to an existing dump at ``path`` (a fresh one is created if
    there is none) whose layout matches: the same layers in the same order, shapes, dtype, streams,
    reduction and loss/lr datasets; rows beyond the committed steps are overwritten. A mismatch
    is an InputError naming the difference. On ``close`` the datasets are trimmed to the
    committed rows; a new file with no committed step is removed. I/O errors (disk full, file
    removed) raise InputError and close the writer, keeping the committed steps.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        layers: Mapping[str, tuple[int, ...]],
        *,
        dtype: str = "float32",
        streams: list[str] | None = None,
        reduction: str = "per-step",
        attrs: Mapping[str, Any] | None = None,
        resume: bool = False,
    ):
        import h5py

        one_of("dtype", dtype, STORAGE_DTYPES)
        if not layers:
            raise InputError("StepWriter needs at least one layer")
        self.path = Path(os.fspath(path))
        self.dtype = dtype
        self._np_dtype = np.dtype(STORAGE_DTYPES[dtype])
        self._layers = {check_layer_name(n): tuple(int(d) for d in s) for n, s in layers.items()}
        self._numel = {n: math.prod(s) for n, s in self._layers.items()}
        if any(v == 0 for v in self._numel.values()):
            raise InputError(f"StepWriter: empty layer in {self._layers}")
        self._streams = list(streams) if streams is not None else None
        self._reduction = reduction
        self._closed = False
        self._created = False
        self.h5 = None
        self._staged: int | None = None
        if self.path.is_dir():
            raise InputError(f"cannot write dump {self.path}: it is a directory")
        parent = self.path.parent
        if not parent.is_dir():
            raise InputError(f"cannot write dump {self.path}: directory {parent} does not exist")
        try:
            if resume and self.path.exists():
                Dump(self.path).close()  # a readable dump, or a clear error
                self.h5 = h5py.File(self.path, "r+")
                self._check_layout()
                committed = int(self.h5["steps"].shape[0])
                for ds in [self.h5["grads"][n] for n in self._layers] + [
                    self.h5[k] for k in ("loss", "lr") if k in self.h5
                ]:
                    if ds.shape[0] != committed:  # drop the rows of a step never committed
                        ds.resize(committed, axis=0)
            else:
                self.h5 = h5py.File(self.path, "w")
                self._created = True
                self._create(attrs)
            self._steps = self.h5["steps"]
            self._ds = {n: self.h5["grads"][n] for n in self._layers}  # lookups cost ~50 us
            self._ds.update({k: self.h5[k] for k in ("loss", "lr") if k in self.h5})
            self._rows_alloc = {n: int(ds.shape[0]) for n, ds in self._ds.items()}
            # one row per chunk, no filter: write the row's bytes as the chunk (skips the cache)
            self._direct = {
                n: self._ds[n].chunks == (1, self._numel[n])
                and not self._ds[n].compression
                and self._ds[n].dtype == self._np_dtype
                for n in self._layers
            }
            self.nrows = int(self._steps.shape[0])
            self._has = {k: (k in self.h5) if not self._created else None for k in ("loss", "lr")}
            self.h5.flush()
        except (OSError, RuntimeError) as exc:  # h5py raises both
            self._fail()
            raise InputError(f"cannot write dump {self.path}: {exc}") from exc
        except BaseException:
            self._fail()
            raise

    # -- setup ---------------------------------------------------------------------------------
    def _create(self, attrs: Mapping[str, Any] | None) -> None:
        root = provenance(attrs)
        root["reduction"] = self._reduction
        if self._streams is not None:
            root["streams"] = list(self._streams)
        root["layers"] = list(self._layers)
        for key, value in root.items():
            self.h5.attrs[key] = attr_value(key, value)
        grads = self.h5.create_group("grads")
        for name, shape in self._layers.items():
            numel = self._numel[name]
            ds = grads.create_dataset(
                name,
                shape=(0, numel),
                maxshape=(None, numel),
                dtype=self._np_dtype,
                chunks=_grow_rows(numel, self._np_dtype.itemsize),
            )
            ds.attrs["shape"] = np.asarray(shape, dtype=np.int64)
            ds.attrs["dtype"] = self.dtype
            if self.dtype == "bfloat16":
                ds.attrs["description"] = BF16_DESCRIPTION
        self.h5.create_dataset("steps", shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(256,))

    def _check_layout(self) -> None:
        f = self.h5
        where = f"cannot resume {self.path}"
        streams = decode_attr(f.attrs["streams"]) if "streams" in f.attrs else None
        streams = json.loads(streams) if streams is not None else None
        if streams != self._streams:
            raise InputError(f"{where}: it has streams {streams}, this run records {self._streams}")
        reduction = decode_attr(f.attrs.get("reduction", "per-step"))
        if reduction != self._reduction:
            raise InputError(
                f"{where}: it has reduction {reduction!r}, this run records {self._reduction!r}"
            )
        with Dump(self.path) as d:
            names = d.layers
            shapes = {n: d.shape(n) for n in names}
        if names != list(self._layers):
            missing = [n for n in self._layers if n not in shapes]
            extra = [n for n in names if n not in self._layers]
            raise InputError(
                f"{where}: its layers differ (missing from the file: {missing}, "
                f"not recorded by this run: {extra}, file order: {names})"
            )
        for name, shape in self._layers.items():
            if shapes[name] != shape:
                raise InputError(
                    f"{where}: layer {name!r} has shape {shapes[name]} in the file, {shape} now"
                )
            if f["grads"][name].maxshape[0] is not None or f["steps"].maxshape[0] is not None:
                raise InputError(
                    f"{where}: layer {name!r} or 'steps' has a fixed number of rows (the dump "
                    "was written whole, not by a recorder), so it cannot be appended to"
                )
            stored = decode_attr(f["grads"][name].attrs.get("dtype", "float32"))
            if stored != self.dtype:
                raise InputError(
                    f"{where}: layer {name!r} is stored as {stored}, this run records {self.dtype}"
                )

    # -- writing -------------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Current size of the file on disk."""
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0

    def check_series(self, loss: bool, lr: bool) -> None:
        """Check (and on the first step, decide) whether steps give a loss and an lr."""
        self._start_optional("loss", loss)
        self._start_optional("lr", lr)

    def _start_optional(self, key: str, given: bool) -> None:
        has = self._has[key]
        if has is None:  # a new file: the first step decides
            if given:
                rows = self._steps.shape[0]
                self._ds[key] = self.h5.create_dataset(
                    key, shape=(rows,), maxshape=(None,), dtype=np.float32, chunks=(256,)
                )
                self._rows_alloc[key] = rows
            self._has[key] = given
        elif has != given:
            raise InputError(
                f"dump {self.path}: {key} was {'given' if has else 'not given'} for the earlier "
                f"steps; give {key} on every recorded step or on none"
            )

    def write(
        self,
        step: int,
        rows: Mapping[str, np.ndarray],
        loss: float | None = None,
        lr: float | None = None,
    ) -> None:
        """Write and commit one step; ``rows`` maps every layer to a flat array of its numel."""
        self.stage(step, rows, loss, lr)
        self.commit()

    def stage(
        self,
        step: int,
        rows: Mapping[str, np.ndarray],
        loss: float | None = None,
        lr: float | None = None,
    ) -> None:
        """Write one step's rows without committing them (``commit`` makes them part of the dump).

        A staged step that is never committed is dropped: the next ``stage`` overwrites it and
        ``close`` trims it. Staging again before a commit replaces the staged step.
        """
        if self._closed:
            raise InputError(f"dump {self.path} is already closed")
        if list(rows) != list(self._layers):
            raise InputError(
                f"dump {self.path}: step {step} gives layers {list(rows)}, expected "
                f"{list(self._layers)}"
            )
        for name, arr in rows.items():
            if arr.dtype != self._np_dtype or arr.shape != (self._numel[name],):
                raise InputError(
                    f"dump {self.path}: layer {name!r} row must be {self._np_dtype} "
                    f"({self._numel[name]},), got {arr.dtype} {arr.shape}"
                )
        self.check_series(loss is not None, lr is not None)
        row = self.nrows
        self._staged = None
        try:
            for name, arr in rows.items():
                self._write_row(name, row, arr.reshape(1, -1))
            for key, value in (("loss", loss), ("lr", lr)):
                if value is not None:
                    self._write_row(key, row, np.full(1, value, np.float32))
            # the rows and their chunk index reach the file before the commit record can: one
            # flush writing both could be killed after the ``steps`` extent and before a row's
            # index entry, leaving a committed step that reads back as zeros
            self.h5.flush()
        except (OSError, RuntimeError) as exc:  # h5py raises both
            self._io_error(step, exc)
        self._staged = int(step)

    def commit(self) -> None:
        """Commit the staged step: its ``steps`` entry is written last, then the file is flushed."""
        if self._closed:
            raise InputError(f"dump {self.path} is already closed")
        step, row = self._staged, self.nrows
        if step is None:
            raise InputError(f"dump {self.path}: no staged step to commit")
        try:
            self._steps.id.set_extent((row + 1,))  # the commit record, written last
            self._steps.write_direct(
                np.full(1, step, np.int64), dest_sel=np.s_[row : row + 1]
            )
            self.h5.flush()
        except (OSError, RuntimeError) as exc:  # h5py raises both
            self._io_error(step, exc)
        self._staged = None
        self.nrows = row + 1

    def _io_error(self, step: int, exc: BaseException):
        self._fail()
        row = self.nrows
        kept = f"the {row} committed step(s) are kept" if row else "nothing was committed"
        raise InputError(f"cannot write dump {self.path} at step {step}: {exc}; {kept}") from exc

    def _write_row(self, key: str, row: int, value: np.ndarray) -> None:
        ds = self._ds[key]
        if self._rows_alloc[key] <= row:
            self._rows_alloc[key] = row + _GROW_ROWS
            ds.resize(self._rows_alloc[key], axis=0)
        if self._direct.get(key):
            ds.id.write_direct_chunk((row, 0), np.ascontiguousarray(value))
        else:
            ds.write_direct(value, dest_sel=np.s_[row : row + 1])

    # -- finishing -------------------------------------------------------------------------
    def _fail(self) -> None:
        """After an error: close, keep committed steps, remove a new file with none."""
        self._closed = True
        if self.h5 is not None:
            try:
                self.h5.close()
            except Exception:  # noqa: BLE001 - already failing
                pass
            self.h5 = None
        if self._created and getattr(self, "nrows", 0) == 0:
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Trim the preallocated rows and close; a new file with no committed step is removed."""
        if self._closed:
            return
        try:
            if self.nrows:
                for name in self._layers:
                    ds = self.h5["grads"][name]
                    if ds.shape[0] != self.nrows:
                        ds.resize(self.nrows, axis=0)
                for key in ("loss", "lr"):
                    if key in self.h5 and self.h5[key].shape[0] != self.nrows:
                        self.h5[key].resize(self.nrows, axis=0)
                attach_dims(self.h5, list(self._layers), self.nrows)
            self.h5.close()
            self.h5 = None
            self._closed = True
            if self._created and self.nrows == 0:
                self.path.unlink(missing_ok=True)
        except (OSError, RuntimeError) as exc:  # h5py raises both
            self._fail()
            raise InputError(f"cannot finish dump {self.path}: {exc}") from exc
