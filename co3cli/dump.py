"""The gradient dump: raw per-layer, per-step gradients in HDF5, schema ``co3.gradients/1``.

A dump is what ``co3 capture`` writes and what ``co3 fit`` / ``co3 compress`` read. It is plain
HDF5, so anyone can write one with h5py alone::

    /                       root group
      attrs:
        schema         str    "co3.gradients/1"  (required; the reader accepts major version 1:
                              "co3.gradients/1" or "co3.gradients/1.<minor>")
        layers         str    JSON list of layer names in their natural (model) order (optional;
                              datasets it does not list follow in sorted order; without it
                              the reader sorts all names)
        task, model, optimizer, lr, seed, co3cli_version, torch_version,
        created (ISO 8601 UTC), config (JSON string)      provenance: what made the dump
        ...                   any other attributes are allowed and ignored by the reader
      grads/                group: one dataset per parameter
        <name>         float32 (steps, numel)   row i = the flattened gradient at steps[i]
          attrs: shape  int64 array             the parameter's shape; prod(shape) == numel
      steps            int64 (steps,)           training step index of each row (required)
      loss             float32 (steps,)         training loss at each step (optional)
      lr               float32 (steps,)         learning rate at each step (optional)
      ...                   other groups (e.g. ``co3/`` in a decompressed dump) are ignored

``steps`` is the commit record. A layer dataset (and ``loss``/``lr``) may have MORE rows than
``steps``: the reader uses the first ``len(steps)`` rows and ignores the rest, which are rows
an incremental writer preallocated or was writing when it was killed. Fewer rows is an error.

Extensions written by ``co3cli.recorder.GradientRecorder`` (all optional, all still
``co3.gradients/1``; readers that ignore them see an ordinary dump):

    attrs  streams     JSON list of stream names, e.g. ["raw", "decoded"]. When present the
                       layers are ``grads/<stream>/<param>`` (layer names ``raw/fc1.weight``);
                       when absent there is one stream and the layout is ``grads/<param>``.
    attrs  reduction   "per-step" (row = one step's gradient) or "epoch-mean" (row = the mean
                       of an epoch's gradients; ``steps`` then holds epoch numbers)
    attrs  aliases     JSON {alias: name}: tied parameters, recorded once under ``name``
    attrs  absent      JSON {param: reason}: selected parameters that were not recorded
                       (e.g. frozen, requires_grad=False)
    grads/<name> attrs dtype   storage type: "float32", "float16" or "bfloat16". h5py has no
                       bfloat16, so bfloat16 rows are stored as uint16 bit patterns (the high
                       half of the float32); ``read_layer`` returns float32 for every type.

Layer names are dataset paths relative to ``grads``; the group is walked recursively, so
``grads/raw/fc1.weight`` is the layer ``raw/fc1.weight``. Rows are C-order flattenings of the
parameter (``g.reshape(-1)``). Writers should store float32; the reader accepts any real numeric
dtype and any HDF5 layout or standard filter (chunked, gzip) and returns float32.

Reading is lazy and validated. ``Dump.open`` checks the structure (schema version, ``grads``,
``steps``, ``loss``, every layer's rank, rows and ``shape`` attribute) without reading data;
``Dump.read_layer`` reads one layer (memory bounded by one layer) and applies the non-finite
policy: ``"error"`` rejects NaN/Inf, ``"zero"`` replaces them by 0 and counts them in
``Dump.nonfinite_counts``::

    with Dump.open("dump.h5") as d:
        for name in d.layers:
            g = d.read_layer(name)          # float32 (steps, numel)

``DumpWriter`` writes to a temporary file that is renamed into place only on success, so a
failed capture never leaves a half-written dump behind. ``StepWriter`` (used by the recorder)
is the crash-safe incremental alternative: it writes to the final path, flushes after every
step and writes the ``steps`` row last, so a killed run leaves a valid dump of the committed
steps. HDF5 needs a seekable file, so writing to
stdout (``-``) or a file object spools to a temporary file and copies it out at the end::

    with DumpWriter("dump.h5", {"task": "digits-mlp"}) as w:     # whole layers at once
        w.add_layer("fc1.weight", g, shape=(64, 64))               # g: (steps, 4096)
        w.set_steps(np.arange(steps), loss=loss)

    with DumpWriter("dump.h5", attrs) as w:                         # or streaming, step by step
        for step, grads, loss in training:
            w.append_step(step, grads, loss)                        # grads: {name: array}
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from co3cli import __version__
from co3cli.errors import InputError
from co3cli.fileio import created_timestamp, spool

SCHEMA = "co3.gradients/1"
"""The schema string this module writes."""

SCHEMA_MAJOR = 1
_SCHEMA_RE = re.compile(r"^co3\.gradients/(\d+)(?:\.(\d+))?$")

NONFINITE_POLICIES = ("error", "zero")

STORAGE_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "uint16"}
"""Storage types of a layer (its ``dtype`` attribute) -> the HDF5 dataset's numpy dtype."""

_STREAM_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32 (exact: bf16 is the top half of a float32)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)

# Rows per chunk of a dataset grown by append_step: about this many bytes per chunk.
_CHUNK_BYTES = 1 << 14
_MAX_CHUNK_ROWS = 64


def _check_layer_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InputError(f"layer name {name!r} is not a non-empty string")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InputError(
            f"layer name {name!r} is not a valid relative HDF5 path "
            "(no leading/trailing '/', no empty, '.' or '..' components)"
        )
    return name


def _attr_value(key: str, value: Any) -> Any:
    """Convert a Python value to something h5py stores as an attribute."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, (str, bool, int, float, np.generic, np.ndarray)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise InputError(
        f"attribute {key!r}: cannot store a value of type {type(value).__name__} "
        "(use str, int, float, bool, a numpy array, or a dict/list stored as JSON)"
    )


def _decode_attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return _decode_attr(value[()])
        return [_decode_attr(v) for v in value.tolist()]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _describe(target: Any) -> str:
    if target == "-":
        return "<stdout>"
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    return getattr(target, "name", None) or "<file object>"


def _provenance(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """``attrs`` plus the schema, creation time and versions, unless ``attrs`` gives them."""
    root = dict(attrs or {})
    root.setdefault("schema", SCHEMA)
    root.setdefault("created", created_timestamp())
    root.setdefault("co3cli_version", __version__)
    if "torch" in sys.modules and "torch_version" not in root:
        root["torch_version"] = str(sys.modules["torch"].__version__)
    return root


class DumpWriter:
    """Write a ``co3.gradients/1`` dump to a path, ``-`` (stdout) or a binary file object.

    Use as a context manager. Layers are written either whole (``add_layer`` + ``set_steps``)
    or one training step at a time (``append_step``); the two styles cannot be mixed in one
    file. ``h5`` is the open ``h5py.File`` for callers that add their own groups or attributes.
    On a clean exit the root attribute ``layers`` is written (the order of ``add_layer`` /
    ``append_step``, then any other datasets under ``grads`` sorted), the file is validated
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
        self._label = _describe(path_or_fileobj)
        self._layers: list[str] = []
        self._nrows: int | None = None  # rows of the layers written so far
        self._steps_set = False
        self._mode: str | None = None  # "whole" or "append"
        self._append_shapes: dict[str, tuple[int, ...]] = {}
        self._append_has_loss: bool | None = None
        self._closed = False

        if isinstance(path_or_fileobj, (str, os.PathLike)) and os.fspath(path_or_fileobj) != "-":
            final = Path(os.fspath(path_or_fileobj))
            if final.is_dir():
                raise InputError(f"cannot write dump {final}: it is a directory")
            parent = final.parent
            if not parent.is_dir():
                raise InputError(f"cannot write dump {final}: directory {parent} does not exist")
            self._tmp = parent / f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            self._final: Path | None = final
        elif path_or_fileobj == "-" or hasattr(path_or_fileobj, "write"):
            fd, tmp = tempfile.mkstemp(prefix="co3-dump-", suffix=".h5.tmp")
            os.close(fd)
            os.unlink(tmp)
            self._tmp = Path(tmp)
            self._final = None
        else:
            raise InputError(
                f"dump output {path_or_fileobj!r} is not a path, '-' or a binary file object"
            )

        try:
            self.h5 = h5py.File(self._tmp, "x")
        except OSError as exc:
            raise InputError(f"cannot write dump {self._label}: {exc}") from exc
        try:
            root = _provenance(attrs)
            for key, value in root.items():
                self.h5.attrs[key] = _attr_value(key, value)
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
        return False

    # -- writing ---------------------------------------------------------------------------
    def _set_mode(self, mode: str) -> None:
        if self._closed:
            raise InputError(f"dump {self._label} is already closed")
        if self._mode is not None and self._mode != mode:
            raise InputError(
                f"dump {self._label}: cannot mix add_layer/set_steps with append_step in one file"
            )
        self._mode = mode

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
    ) -> None:
        """Write one whole layer: ``data`` is (steps, numel), stored as float32 ``grads/<name>``."""
        self._set_mode("whole")
        name = _check_layer_name(name)
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
        ds = self._grads.create_dataset(name, data=arr.astype(np.float32, copy=False), **kwargs)
        ds.attrs["shape"] = shape_arr
        for key, value in (attrs or {}).items():
            if key == "shape":
                raise InputError(f"layer {name!r}: attribute 'shape' is reserved")
            ds.attrs[key] = _attr_value(key, value)
        self._layers.append(name)

    def set_steps(self, steps: Any, loss: Any = None) -> None:
        """Write ``steps`` (int64) and optionally ``loss`` (float32), one entry per row."""
        self._set_mode("whole")
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

    def append_step(self, step: int, grads: Mapping[str, Any], loss: float | None = None) -> None:
        """Append one training step: ``grads`` maps layer name -> gradient (any shape).

        The first call fixes the layers, their order and shapes; later calls must give the
        same names with the same shapes, and give ``loss`` always or never. Memory is bounded
        by one step: each call appends a row to resizable datasets.
        """
        self._set_mode("append")
        if not grads:
            raise InputError(f"dump {self._label}: append_step got no gradients")
        first = self._nrows is None
        if first:
            self._append_has_loss = loss is not None
            for name, g in grads.items():
                _check_layer_name(name)
                shape = tuple(int(d) for d in np.shape(g))
                numel = math.prod(shape)
                if numel == 0:
                    raise InputError(f"layer {name!r} is empty (shape {shape})")
                rows = max(1, min(_MAX_CHUNK_ROWS, _CHUNK_BYTES // (4 * numel)))
                kwargs = {}
                if self._compression:
                    kwargs = dict(compression="gzip", shuffle=True)
                ds = self._grads.create_dataset(
                    name,
                    shape=(0, numel),
                    maxshape=(None, numel),
                    dtype=np.float32,
                    chunks=(rows, numel),
                    **kwargs,
                )
                ds.attrs["shape"] = np.asarray(shape, dtype=np.int64)
                self._append_shapes[name] = shape
                self._layers.append(name)
            self.h5.create_dataset(
                "steps", shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(256,)
            )
            if self._append_has_loss:
                self.h5.create_dataset(
                    "loss", shape=(0,), maxshape=(None,), dtype=np.float32, chunks=(256,)
                )
            self._nrows = 0
        else:
            if list(grads) != self._layers:
                raise InputError(
                    f"dump {self._label}: append_step got layers {list(grads)} "
                    f"but the first step had {self._layers}"
                )
            if (loss is not None) != self._append_has_loss:
                raise InputError(f"dump {self._label}: give loss on every append_step or on none")
        row = self._nrows
        for name, g in grads.items():
            arr = np.asarray(g)
            if arr.dtype.kind not in "fiu":
                raise InputError(f"layer {name!r}: dtype {arr.dtype} is not a real number type")
            if tuple(arr.shape) != self._append_shapes[name]:
                raise InputError(
                    f"layer {name!r}: step {step} has shape {tuple(arr.shape)}, "
                    f"expected {self._append_shapes[name]}"
                )
            ds = self._grads[name]
            ds.resize(row + 1, axis=0)
            ds[row] = arr.reshape(-1).astype(np.float32, copy=False)
        ds = self.h5["steps"]
        ds.resize(row + 1, axis=0)
        ds[row] = int(step)
        if self._append_has_loss:
            ds = self.h5["loss"]
            ds.resize(row + 1, axis=0)
            ds[row] = np.float32(loss)
        self._nrows = row + 1

    # -- finishing -------------------------------------------------------------------------
    def _abort(self) -> None:
        self._closed = True
        try:
            self.h5.close()
        except Exception:  # noqa: BLE001 - already failing; the temp file is removed below
            pass
        try:
            self._tmp.unlink()
        except FileNotFoundError:
            pass

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
                raise InputError(
                    f"dump {self._label}: no steps were recorded (call set_steps or append_step)"
                )
            if self._nrows == 0:
                raise InputError(f"dump {self._label}: no steps were recorded")
            extra = sorted(n for n in found if n not in set(self._layers))
            self.h5.attrs["layers"] = json.dumps(self._layers + extra)
            self.h5.close()
            self._closed = True
            Dump(self._tmp, _label=self._label).close()  # never hand out a dump we cannot read
            if self._final is not None:
                os.replace(self._tmp, self._final)
            else:
                out = sys.stdout.buffer if self._target == "-" else self._target
                with open(self._tmp, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
                out.flush()
                self._tmp.unlink()
        except BaseException:
            self._abort()
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


class Dump:
    """A ``co3.gradients/1`` dump opened for reading (validated at open, read layer by layer).

    Use ``Dump.open(path)`` as a context manager. ``path`` may be ``-`` to read stdin (spooled
    to a temporary file, removed on close) or a binary file object (spooled the same way).
    ``nonfinite`` is the NaN/Inf policy of ``read_layer``: ``"error"`` or ``"zero"``.
    """

    def __init__(
        self,
        path: str | os.PathLike | BinaryIO,
        nonfinite: str = "error",
        *,
        _label: str | None = None,
    ):
        import h5py

        if nonfinite not in NONFINITE_POLICIES:
            raise InputError(
                f"nonfinite={nonfinite!r} is not one of {', '.join(map(repr, NONFINITE_POLICIES))}"
            )
        self.nonfinite = nonfinite
        self.nonfinite_counts: dict[str, int] = {}
        self._spool: Path | None = None
        self.h5 = None
        if path == "-" or hasattr(path, "read"):
            self.label = "<stdin>" if path == "-" else _describe(path)
            self._spool = spool(None if path == "-" else path, f"dump {self.label}")
            file_path: str | os.PathLike = self._spool
        elif isinstance(path, (str, os.PathLike)):
            self.label = _label or os.fspath(path)
            file_path = path
            if not Path(file_path).exists():
                raise InputError(f"dump {self.label} does not exist")
            if Path(file_path).is_dir():
                raise InputError(f"dump {self.label} is a directory, not a file")
        else:
            raise InputError(f"dump input {path!r} is not a path, '-' or a binary file object")
        try:
            try:
                self.h5 = h5py.File(file_path, "r")
            except OSError as exc:
                raise InputError(f"{self.label} is not a readable HDF5 file: {exc}") from exc
            self._validate()
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, path: str | os.PathLike | BinaryIO, nonfinite: str = "error") -> Dump:
        """Open and validate a dump; see the class docstring."""
        return cls(path, nonfinite=nonfinite)

    def __enter__(self) -> Dump:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close()
        return False

    def close(self) -> None:
        if self.h5 is not None:
            self.h5.close()
            self.h5 = None
        if self._spool is not None:
            self._spool.unlink(missing_ok=True)
            self._spool = None

    # -- validation --------------------------------------------------------------------------
    def _validate(self) -> None:
        import h5py

        f = self.h5
        where = self.label
        try:
            if "schema" not in f.attrs:
                raise InputError(
                    f"{where} is not a co3 gradient dump: root attribute 'schema' is missing "
                    f"(expected {SCHEMA!r})"
                )
            schema = _decode_attr(f.attrs["schema"])
            m = _SCHEMA_RE.match(schema) if isinstance(schema, str) else None
            if m is None or int(m.group(1)) != SCHEMA_MAJOR:
                raise InputError(
                    f"{where}: unsupported schema {schema!r} (this co3cli reads {SCHEMA!r}, "
                    f"major version {SCHEMA_MAJOR})"
                )
            self.schema = schema

            grads = f.get("grads")
            if not isinstance(grads, h5py.Group):
                raise InputError(f"{where}: group 'grads' is missing")
            found: list[str] = []

            def visit(name: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset):
                    found.append(name)

            grads.visititems(visit)
            if not found:
                raise InputError(f"{where}: group 'grads' holds no datasets (no layers)")

            steps_ds = f.get("steps")
            if not isinstance(steps_ds, h5py.Dataset):
                raise InputError(f"{where}: dataset 'steps' is missing")
            if steps_ds.ndim != 1 or steps_ds.dtype.kind not in "iu":
                raise InputError(
                    f"{where}: dataset 'steps' must be 1-D integers, got shape {steps_ds.shape} "
                    f"dtype {steps_ds.dtype}"
                )
            if steps_ds.shape[0] < 1:
                raise InputError(f"{where}: dataset 'steps' is empty (no steps recorded)")
            self._steps = np.asarray(steps_ds[()], dtype=np.int64)
            nsteps = self._steps.size

            self._loss = self._per_step_series(f, "loss", nsteps, where)
            self._lr = self._per_step_series(f, "lr", nsteps, where)
            self._streams = self._read_streams()

            order = self._layer_order(found)
            self._shapes: dict[str, tuple[int, ...]] = {}
            self._bf16: dict[str, bool] = {}
            for name in order:
                ds = grads[name]
                path = f"grads/{name}"
                if ds.dtype.kind not in "fiu":
                    raise InputError(
                        f"{where}: dataset {path!r} has dtype {ds.dtype}, not a real number type"
                    )
                if ds.ndim != 2:
                    raise InputError(
                        f"{where}: dataset {path!r} must be 2-D (steps, numel), "
                        f"got shape {ds.shape}"
                    )
                if "shape" not in ds.attrs:
                    raise InputError(f"{where}: dataset {path!r} has no 'shape' attribute")
                shape_attr = np.asarray(ds.attrs["shape"])
                if (
                    shape_attr.ndim > 1
                    or shape_attr.dtype.kind not in "iu"
                    or np.any(shape_attr < 0)
                ):
                    raise InputError(
                        f"{where}: dataset {path!r} attribute 'shape' must be a 1-D array of "
                        f"non-negative integers, got {shape_attr!r}"
                    )
                shape = tuple(int(d) for d in shape_attr.reshape(-1))
                numel = math.prod(shape)
                if ds.shape[1] == 0 or numel == 0:
                    raise InputError(
                        f"{where}: layer {name!r} is empty (dataset shape {ds.shape}, "
                        f"parameter shape {shape})"
                    )
                if ds.shape[0] < nsteps:
                    raise InputError(
                        f"{where}: dataset {path!r} has {ds.shape[0]} rows but 'steps' has {nsteps}"
                    )
                stored = _decode_attr(ds.attrs["dtype"]) if "dtype" in ds.attrs else None
                if stored is not None and (
                    stored not in STORAGE_DTYPES or ds.dtype != np.dtype(STORAGE_DTYPES[stored])
                ):
                    raise InputError(
                        f"{where}: dataset {path!r} has dtype {ds.dtype} but attribute "
                        f"dtype={stored!r} (allowed: float32, float16, bfloat16 as uint16)"
                    )
                if self._streams and name.split("/", 1)[0] not in self._streams:
                    raise InputError(
                        f"{where}: layer {name!r} is not under one of the streams {self._streams}"
                    )
                self._bf16[name] = stored == "bfloat16"
                if ds.shape[1] != numel:
                    raise InputError(
                        f"{where}: dataset {path!r} has {ds.shape[1]} entries per row but its "
                        f"'shape' attribute {shape} has {numel}"
                    )
                self._shapes[name] = shape
            self._layers = order
            self._attrs = {k: _decode_attr(v) for k, v in f.attrs.items()}
        except (OSError, KeyError, RuntimeError) as exc:
            raise InputError(f"{where}: cannot read the dump structure: {exc}") from exc

    @staticmethod
    def _per_step_series(f, key: str, nsteps: int, where: str):
        """Optional 1-D numeric dataset with at least one entry per step (first ``nsteps`` used)."""
        import h5py

        if key not in f:
            return None
        ds = f[key]
        if not isinstance(ds, h5py.Dataset) or ds.ndim != 1 or ds.dtype.kind not in "fiu":
            raise InputError(f"{where}: '{key}' must be a 1-D numeric dataset")
        if ds.shape[0] < nsteps:
            raise InputError(f"{where}: dataset '{key}' has {ds.shape[0]} entries but 'steps' "
                             f"has {nsteps}")
        return np.asarray(ds[:nsteps], dtype=np.float32)

    def _read_streams(self) -> list[str] | None:
        if "streams" not in self.h5.attrs:
            return None
        raw = _decode_attr(self.h5.attrs["streams"])
        try:
            listed = json.loads(raw) if isinstance(raw, str) else None
        except json.JSONDecodeError:
            listed = None
        if (
            not isinstance(listed, list)
            or not listed
            or not all(isinstance(n, str) and _STREAM_RE.match(n) for n in listed)
            or len(set(listed)) != len(listed)
        ):
            raise InputError(
                f"{self.label}: root attribute 'streams' is not a JSON list of distinct stream "
                f"names, got {raw!r}"
            )
        return listed

    def _layer_order(self, found: list[str]) -> list[str]:
        f = self.h5
        if "layers" not in f.attrs:
            return sorted(found)
        raw = _decode_attr(f.attrs["layers"])
        try:
            listed = json.loads(raw) if isinstance(raw, str) else None
        except json.JSONDecodeError:
            listed = None
        if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
            raise InputError(f"{self.label}: root attribute 'layers' is not a JSON list of names")
        present = set(found)
        missing = [n for n in listed if n not in present]
        if missing:
            raise InputError(
                f"{self.label}: root attribute 'layers' lists {missing[:5]} but there is no such "
                "dataset under 'grads'"
            )
        if len(set(listed)) != len(listed):
            raise InputError(f"{self.label}: root attribute 'layers' repeats a name")
        seen = set(listed)
        return listed + sorted(n for n in found if n not in seen)

    # -- metadata ------------------------------------------------------------------------------
    @property
    def layers(self) -> list[str]:
        """Layer names, in the order recorded in the ``layers`` attribute (else sorted)."""
        return list(self._layers)

    @property
    def steps(self) -> np.ndarray:
        """Step index of each row, int64 (steps,)."""
        return self._steps.copy()

    @property
    def nsteps(self) -> int:
        return int(self._steps.size)

    @property
    def loss(self) -> np.ndarray | None:
        """Training loss per row, float32 (steps,), or None when the dump has none."""
        return None if self._loss is None else self._loss.copy()

    @property
    def lr(self) -> np.ndarray | None:
        """Learning rate per row, float32 (steps,), or None when the dump has none."""
        return None if self._lr is None else self._lr.copy()

    @property
    def streams(self) -> list[str] | None:
        """The ``streams`` root attribute (layers are ``<stream>/<param>``), or None."""
        return None if self._streams is None else list(self._streams)

    @property
    def attrs(self) -> dict[str, Any]:
        """Root attributes decoded to str / int / float / bool / lists."""
        return dict(self._attrs)

    @property
    def config(self) -> dict[str, Any]:
        """The ``config`` root attribute parsed from JSON ({} when absent)."""
        raw = self._attrs.get("config")
        if raw is None:
            return {}
        try:
            value = json.loads(raw)
        except (TypeError, json.JSONDecodeError) as exc:
            raise InputError(
                f"{self.label}: root attribute 'config' is not valid JSON: {exc}"
            ) from exc
        if not isinstance(value, dict):
            raise InputError(f"{self.label}: root attribute 'config' is not a JSON object")
        return value

    def _check_name(self, name: str) -> None:
        if name not in self._shapes:
            shown = ", ".join(self._layers[:8]) + (" ..." if len(self._layers) > 8 else "")
            raise InputError(f"{self.label}: no layer {name!r} (layers: {shown})")

    def shape(self, name: str) -> tuple[int, ...]:
        """The parameter shape of layer ``name``."""
        self._check_name(name)
        return self._shapes[name]

    def numel(self, name: str) -> int:
        """Entries per step of layer ``name``."""
        self._check_name(name)
        return math.prod(self._shapes[name])

    def nbytes(self, name: str) -> int:
        """Bytes of ``read_layer(name)``: steps x numel x 4 (float32)."""
        return self.nsteps * self.numel(name) * 4

    @property
    def total_entries(self) -> int:
        """Entries over all layers and steps."""
        return self.nsteps * sum(math.prod(s) for s in self._shapes.values())

    # -- data ----------------------------------------------------------------------------------
    def read_layer(self, name: str) -> np.ndarray:
        """Read layer ``name`` as float32 (steps, numel), applying the non-finite policy."""
        self._check_name(name)
        if self.h5 is None:
            raise InputError(f"{self.label} is closed")
        path = f"grads/{name}"
        try:
            ds = self.h5["grads"][name]
            raw = ds[()] if ds.shape[0] == self.nsteps else ds[: self.nsteps]
            g = bf16_to_float32(raw) if self._bf16[name] else np.asarray(raw, dtype=np.float32)
        except (OSError, RuntimeError, ValueError) as exc:
            raise InputError(f"{self.label}: cannot read dataset {path!r}: {exc}") from exc
        bad = ~np.isfinite(g)
        count = int(np.count_nonzero(bad))
        if count:
            if self.nonfinite == "error":
                row = int(np.argmax(bad.any(axis=1)))
                raise InputError(
                    f"{self.label}: dataset {path!r} has {count} non-finite value(s) (NaN/Inf); "
                    f"the first is at step index {row} (step {int(self._steps[row])}); "
                    "use the nonfinite='zero' policy to replace them by 0"
                )
            g[bad] = 0.0
        if self.nonfinite == "zero":
            self.nonfinite_counts[name] = count
        return g


def _grow_rows(numel: int, itemsize: int) -> tuple[int, int]:
    """Chunk shape (rows, cols) for a dataset written one row at a time."""
    cols = min(numel, _MAX_CHUNK_BYTES // itemsize)
    rows = 1 if cols < numel else max(1, min(_MAX_CHUNK_ROWS, _CHUNK_BYTES // (itemsize * numel)))
    return rows, cols


_MAX_CHUNK_BYTES = 1 << 20  # one row chunk at most this big, so it fits h5py's chunk cache
_GROW_ROWS = 64  # rows preallocated at a time (so a step does not resize every dataset)


class StepWriter:
    """Crash-safe incremental writer of a ``co3.gradients/1`` dump, one step per ``write``.

    Unlike ``DumpWriter`` it writes to the final ``path`` (no temporary file): each ``write``
    fills one row of every layer (preallocated ``_GROW_ROWS`` rows at a time), then ``loss`` /
    ``lr``, then the ``steps`` entry (the commit record), and flushes. A process killed at any
    point leaves a dump the reader accepts, holding every committed step (rows beyond
    ``len(steps)`` are ignored). Compression is not offered: rewriting a compressed chunk moves
    it, which would break that guarantee.

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

        if dtype not in STORAGE_DTYPES:
            allowed = ", ".join(map(repr, STORAGE_DTYPES))
            raise InputError(f"dtype={dtype!r} is not one of {allowed}")
        if not layers:
            raise InputError("StepWriter needs at least one layer")
        self.path = Path(os.fspath(path))
        self.dtype = dtype
        self._np_dtype = np.dtype(STORAGE_DTYPES[dtype])
        self._layers = {_check_layer_name(n): tuple(int(d) for d in s) for n, s in layers.items()}
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
        root = _provenance(attrs)
        root["reduction"] = self._reduction
        if self._streams is not None:
            root["streams"] = list(self._streams)
        root["layers"] = list(self._layers)
        for key, value in root.items():
            self.h5.attrs[key] = _attr_value(key, value)
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
        self.h5.create_dataset("steps", shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(256,))

    def _check_layout(self) -> None:
        f = self.h5
        where = f"cannot resume {self.path}"
        streams = _decode_attr(f.attrs["streams"]) if "streams" in f.attrs else None
        streams = json.loads(streams) if streams is not None else None
        if streams != self._streams:
            raise InputError(f"{where}: it has streams {streams}, this run records {self._streams}")
        reduction = _decode_attr(f.attrs.get("reduction", "per-step"))
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
            stored = _decode_attr(f["grads"][name].attrs.get("dtype", "float32"))
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
            self.h5.close()
            self.h5 = None
            self._closed = True
            if self._created and self.nrows == 0:
                self.path.unlink(missing_ok=True)
        except (OSError, RuntimeError) as exc:  # h5py raises both
            self._fail()
            raise InputError(f"cannot finish dump {self.path}: {exc}") from exc
