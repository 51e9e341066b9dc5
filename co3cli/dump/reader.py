"""Read a ``co3.gradients/1`` dump (``Dump``): validated at open, read lazily layer by layer."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from co3cli.dump.dims import DESCRIPTION, is_dimension_scale
from co3cli.dump.schema import (
    MAX_NAME_PARTS,
    NONFINITE_POLICIES,
    SCHEMA,
    SCHEMA_MAJOR,
    SCHEMA_RE,
    READ_DTYPES,
    STREAM_RE,
    bf16_to_float32,
    decode_attr,
    describe_target,
)
from co3cli.errors import InputError
from co3cli.fileio import is_fd_path, misplaced, spool
from co3cli.registry import one_of


class Dump:
    """A ``co3.gradients/1`` dump opened for reading (validated at open, read layer by layer).

    Use ``Dump.open(path)`` as a context manager. ``path`` may be ``-`` to read stdin (spooled
    to an anonymous temporary file, gone on close or when the process ends) or a binary file
    object (spooled the same way).
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

        one_of("nonfinite", nonfinite, NONFINITE_POLICIES)
        self.nonfinite = nonfinite
        self.nonfinite_counts: dict[str, int] = {}
        self._spool = None  # a fileio.Scratch holding piped input
        self._fileobj = None  # what HDF5 reads when the file has no name it can open
        self.h5 = None
        if path == "-" or hasattr(path, "read"):
            self.label = "<stdin>" if path == "-" else describe_target(path)
            self._spool = spool(None if path == "-" else path, f"dump {self.label}")
            file_path: str | os.PathLike = self._spool.path
        elif isinstance(path, (str, os.PathLike)):
            self.label = _label or os.fspath(path)
            file_path = path
            if not Path(file_path).exists():
                raise InputError(f"dump {self.label} does not exist")
            if Path(file_path).is_dir():
                raise InputError(misplaced(file_path, self.label, "dump")
                                 or f"dump {self.label} is a directory, not a file")
        else:
            raise InputError(f"dump input {path!r} is not a path, '-' or a binary file object")
        try:
            try:
                if is_fd_path(file_path):  # an anonymous file: HDF5 cannot open it by name
                    self._fileobj = open(file_path, "rb")
                    self.h5 = h5py.File(self._fileobj, "r")
                else:
                    self.h5 = h5py.File(file_path, "r")
            except OSError as exc:
                raise InputError(misplaced(file_path, self.label, "dump")
                                 or f"{self.label} is not a readable HDF5 file: {exc}") from exc
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
        if self._fileobj is not None:
            self._fileobj.close()
            self._fileobj = None
        if self._spool is not None:
            self._spool.close()
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
            schema = decode_attr(f.attrs["schema"])
            m = SCHEMA_RE.match(schema) if isinstance(schema, str) else None
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
                if isinstance(obj, h5py.Dataset) and not is_dimension_scale(obj):
                    found.append(name)

            grads.visititems(visit)
            if not found:
                raise InputError(f"{where}: group 'grads' holds no datasets (no layers)")
            for name in found:  # h5py hands a name that is not UTF-8 over as bytes
                if not isinstance(name, str):
                    raise InputError(f"{where}: layer name {name[:80]!r} is not UTF-8")
                if name.count("/") >= MAX_NAME_PARTS:  # (a .co3 reader refuses it)
                    raise InputError(f"{where}: layer name {name[:80]!r}... has "
                                     f"{name.count('/')} folders (limit {MAX_NAME_PARTS - 1})")

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
                self._check_dtype(ds, path, where)
                stored = decode_attr(ds.attrs["dtype"]) if "dtype" in ds.attrs else None
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
            self._attrs = {k: decode_attr(v) for k, v in f.attrs.items()}
            if self._attrs.get("description") == DESCRIPTION:  # the writers' boilerplate, not
                del self._attrs["description"]                 # provenance to pass on
        except (OSError, KeyError, RuntimeError) as exc:
            raise InputError(f"{where}: cannot read the dump structure: {exc}") from exc

    @staticmethod
    def _check_dtype(ds, path: str, where: str) -> None:
        """A layer is float32, or the storage type its ``dtype`` attribute declares."""
        stored = decode_attr(ds.attrs["dtype"]) if "dtype" in ds.attrs else None
        if stored is not None:
            known = isinstance(stored, str) and stored in READ_DTYPES
            if not known or ds.dtype != np.dtype(READ_DTYPES[stored]):
                raise InputError(
                    f"{where}: dataset {path!r} has dtype {ds.dtype} but attribute "
                    f"dtype={stored!r} (allowed: float32, float16, float64, bfloat16 as uint16)"
                )
        elif ds.dtype.kind in "iu":
            raise InputError(
                f"{where}: dataset {path!r} has integer dtype {ds.dtype}; gradients are floats "
                "(store float32, or bfloat16 bit patterns as uint16 with attribute "
                "dtype='bfloat16')"
            )
        elif ds.dtype != np.float32:
            fix = (f", or set the dataset attribute dtype={ds.dtype.name!r} to read it as float32"
                   if ds.dtype.name in READ_DTYPES else "")
            raise InputError(
                f"{where}: dataset {path!r} is {ds.dtype} without a 'dtype' attribute; "
                f"store float32{fix}"
            )

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
        raw = decode_attr(self.h5.attrs["streams"])
        try:
            listed = json.loads(raw) if isinstance(raw, str) else None
        except json.JSONDecodeError:
            listed = None
        if (
            not isinstance(listed, list)
            or not listed
            or not all(isinstance(n, str) and STREAM_RE.match(n) for n in listed)
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
        raw = decode_attr(f.attrs["layers"])
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
        """Root attributes decoded to str / int / float / bool / lists (without the writers'
        standard ``description``, which is about the file, not its provenance)."""
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
