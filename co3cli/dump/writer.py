"""Write a whole ``co3.gradients/1`` dump layer by layer, atomically (``DumpWriter``).

::

    add_layer(name, (steps, numel)) ... set_steps(steps, loss) --> anonymous file beside the target
        --close: validated as Dump.open validates--> linked into place (or copied to stdout)

A failed or interrupted write never leaves a half-written dump behind (an existing file at the
path is untouched): HDF5 writes through a file object over an anonymous ``O_TMPFILE``
(``co3cli.fileio.Scratch``; HDF5 cannot open ``/proc/self/fd/N`` by name), which is linked
into place only when complete, so even ``kill -9`` leaves nothing. A full disk reads
``cannot write 'out.h5': No space left on device``. For writing one training step at a time,
crash-safely, see ``co3cli.dump.step_writer.StepWriter``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from co3cli.dump.dims import BF16_DESCRIPTION, attach_dims
from co3cli.dump.reader import Dump
from co3cli.dump.schema import (STORAGE_DTYPES, attr_value, check_layer_name, describe_target,
                                provenance)
from co3cli.dump.output import copy_to_stream
from co3cli.errors import InputError
from co3cli.fileio import Scratch, cannot_write, no_space


class DumpWriter:
    """Write a ``co3.gradients/1`` dump to a path, ``-`` (stdout) or a binary file object.

    Use as a context manager. Layers are written whole (``add_layer``, one call per layer, all
    with the same number of rows) and ``set_steps`` gives the step index (and loss) of each row.
    ``h5`` is the open ``h5py.File`` for callers that add their own groups or attributes.
    On a clean exit the root attribute ``layers`` is written (the order of ``add_layer``, then
    any other datasets under ``grads`` sorted), the file is validated
    exactly as ``Dump.open`` validates it, and only then moved into place; on an exception or a
    failed check nothing is left behind (an existing file at the path is untouched).

    ``attrs`` become root attributes (dicts and lists are stored as JSON strings). ``schema``,
    ``created`` (ISO UTC) and ``co3cli_version`` are filled in, and ``torch_version`` too when
    torch is already imported, unless ``attrs`` gives them. ``compression`` is ``None`` or
    ``"gzip"`` (with the shuffle filter) for the layer datasets.
    """

    def __init__(
        self,
        path_or_fileobj: str | os.PathLike | BinaryIO,
        attrs: Mapping[str, Any] | None = None,
        *,
        compression: str | None = None,
    ):
        import h5py

        if compression not in (None, "gzip"):
            raise InputError(f"compression={compression!r} is not one of None, 'gzip'")
        self._compression = compression
        self._target = path_or_fileobj
        self._label = describe_target(path_or_fileobj)
        self._layers: list[str] = []
        self._nrows: int | None = None  # rows of the layers written so far
        self._steps_set = False
        self._closed = False

        if isinstance(path_or_fileobj, (str, os.PathLike)) and os.fspath(path_or_fileobj) != "-":
            final = Path(os.fspath(path_or_fileobj))
            if final.is_dir():
                raise InputError(f"cannot write dump {final}: it is a directory")
            parent = final.parent
            if not parent.is_dir():
                raise InputError(f"cannot write dump {final}: directory {parent} does not exist")
            directory: Path | None = parent
            self._final: Path | None = final
        elif path_or_fileobj == "-" or hasattr(path_or_fileobj, "write"):
            directory, self._final = None, None
        else:
            raise InputError(
                f"dump output {path_or_fileobj!r} is not a path, '-' or a binary file object"
            )

        self._fobj = None
        try:
            # an anonymous file (fileio.Scratch): a killed writer leaves nothing behind
            self._tmp = Scratch(directory, prefix="co3-dump-" if directory is None else ".co3-tmp-")
            self._fobj = self._tmp.fileobj("r+b")
            self.h5 = h5py.File(self._fobj, "w")
        except OSError as exc:
            if hasattr(self, "_tmp"):
                self._tmp.close()
            if no_space(exc):
                raise cannot_write(self._target_name(), exc) from None
            raise InputError(f"cannot write dump {self._label}: {exc}") from exc
        try:
            root = provenance(attrs)
            for key, value in root.items():
                self.h5.attrs[key] = attr_value(key, value)
            self._grads = self.h5.create_group("grads")
        except BaseException:
            self._abort()
            raise

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> DumpWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.close()
        else:
            self._abort()
            if no_space(exc):
                raise cannot_write(self._target_name(), exc) from None
        return False

    def _target_name(self) -> str:
        return self._label if isinstance(self._target, (str, os.PathLike)) else "-"

    # -- writing ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise InputError(f"dump {self._label} is already closed")

    def _check_rows(self, rows: int, what: str) -> None:
        if self._nrows is None:
            self._nrows = rows
        elif rows != self._nrows:
            raise InputError(
                f"dump {self._label}: {what} has {rows} rows/steps "
                f"but earlier data has {self._nrows}"
            )

    def add_layer(
        self,
        name: str,
        data: np.ndarray,
        shape: tuple[int, ...],
        attrs: Mapping[str, Any] | None = None,
        stored: str = "float32",
    ) -> None:
        """Write one whole layer: ``data`` is (steps, numel), stored as ``grads/<name>`` in
        ``stored`` (float32, the default: ``data`` converted; ``float16`` or ``bfloat16``:
        ``data`` already holds those words, float16 or uint16 bit patterns, written as they are
        with the ``dtype`` attribute; bfloat16 also gets its ``description``)."""
        self._check_open()
        name = check_layer_name(name)
        if name in self._layers:
            raise InputError(f"dump {self._label}: layer {name!r} was already written")
        arr = np.asarray(data)
        if arr.dtype.kind not in "fiu":
            raise InputError(f"layer {name!r}: dtype {arr.dtype} is not a real number type")
        if arr.ndim != 2:
            raise InputError(
                f"layer {name!r}: data must be 2-D (steps, numel), got shape {arr.shape}"
            )
        shape_arr = np.asarray(tuple(shape), dtype=np.int64).reshape(-1)
        if np.any(shape_arr < 0):
            raise InputError(f"layer {name!r}: shape {tuple(shape)} has a negative dimension")
        numel = int(np.prod(shape_arr)) if shape_arr.size else 1
        if arr.shape[1] != numel:
            raise InputError(
                f"layer {name!r}: data has {arr.shape[1]} columns but shape {tuple(shape)} "
                f"has {numel} entries"
            )
        if numel == 0 or arr.shape[0] == 0:
            raise InputError(f"layer {name!r} is empty (data shape {arr.shape})")
        self._check_rows(arr.shape[0], f"layer {name!r}")
        kwargs = {}
        if self._compression:
            kwargs = dict(compression="gzip", shuffle=True)
        want = STORAGE_DTYPES.get(stored)
        if want is None:
            raise InputError(f"layer {name!r}: stored={stored!r} is not one of "
                             f"{', '.join(STORAGE_DTYPES)}")
        if stored != "float32" and arr.dtype != np.dtype(want):
            raise InputError(f"layer {name!r}: stored={stored} needs {want} words, got {arr.dtype}")
        ds = self._grads.create_dataset(name, data=arr.astype(want, copy=False), **kwargs)
        ds.attrs["shape"] = shape_arr
        if stored != "float32":
            ds.attrs["dtype"] = stored
            if stored == "bfloat16":
                ds.attrs["description"] = BF16_DESCRIPTION
        for key, value in (attrs or {}).items():
            if key == "shape":
                raise InputError(f"layer {name!r}: attribute 'shape' is reserved")
            ds.attrs[key] = attr_value(key, value)
        self._layers.append(name)

    def set_steps(self, steps: Any, loss: Any = None) -> None:
        """Write ``steps`` (int64) and optionally ``loss`` (float32), one entry per row."""
        self._check_open()
        if self._steps_set:
            raise InputError(f"dump {self._label}: steps were already set")
        steps_arr = np.asarray(steps)
        if steps_arr.ndim != 1 or steps_arr.size == 0:
            raise InputError(f"steps must be a non-empty 1-D array, got shape {steps_arr.shape}")
        if steps_arr.dtype.kind not in "iu":
            raise InputError(f"steps must be integers, got dtype {steps_arr.dtype}")
        self._check_rows(steps_arr.size, "steps")
        if loss is not None:
            loss_arr = np.asarray(loss, dtype=np.float32)
            if loss_arr.shape != steps_arr.shape:
                raise InputError(
                    f"loss has shape {loss_arr.shape} but steps has shape {steps_arr.shape}"
                )
            self.h5.create_dataset("loss", data=loss_arr)
        self.h5.create_dataset("steps", data=steps_arr.astype(np.int64))
        self._steps_set = True

    # -- finishing -------------------------------------------------------------------------
    def _abort(self) -> None:
        self._closed = True
        try:
            self.h5.close()
        except Exception:  # noqa: BLE001 - already failing; the temp file is dropped below
            pass
        try:
            self._fobj.close()  # flushes: may fail again on a full disk
        except OSError:
            pass
        self._tmp.close()

    def close(self) -> None:
        """Check the dump is complete, then move it into place (or copy it to stdout/file)."""
        if self._closed:
            return
        try:
            import h5py

            found: list[str] = []
            self.h5["grads"].visititems(
                lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None
            )
            if not found:
                raise InputError(f"dump {self._label}: no layers were written")
            if "steps" not in self.h5:
                raise InputError(f"dump {self._label}: no steps were recorded (call set_steps)")
            extra = sorted(n for n in found if n not in set(self._layers))
            self.h5.attrs["layers"] = json.dumps(self._layers + extra)
            attach_dims(self.h5, self._layers + extra, int(self.h5["steps"].shape[0]))
            self.h5.close()
            self._fobj.flush()
            self._closed = True
            # never hand out a dump we cannot read
            Dump(self._tmp.path, _label=self._label).close()
            if self._final is not None:
                self._tmp.publish(self._final)
            else:
                copy_to_stream(self._tmp.path, self._target)
            self._abort()
        except BaseException as exc:
            self._abort()
            if no_space(exc):
                raise cannot_write(self._target_name(), exc) from None
            raise


def write_dump(
    path: str | os.PathLike | BinaryIO,
    layers: Mapping[str, tuple[np.ndarray, tuple[int, ...]]],
    steps: Any,
    loss: Any = None,
    attrs: Mapping[str, Any] | None = None,
) -> None:
    """Write a whole dump at once: ``layers`` maps name -> (data (steps, numel), shape)."""
    with DumpWriter(path, attrs) as w:
        for name, (data, shape) in layers.items():
            w.add_layer(name, data, shape)
        w.set_steps(steps, loss)

