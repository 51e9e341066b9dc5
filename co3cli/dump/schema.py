"""Names and checks shared by the dump's reader and writers: the schema string, storage types,
layer-name and attribute conversions, and the provenance every writer adds.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from co3cli import __version__
from co3cli.errors import InputError
from co3cli.fileio import created_timestamp

SCHEMA = "co3.gradients/1"
"""The schema string the writers write."""

SCHEMA_MAJOR = 1
SCHEMA_RE = re.compile(r"^co3\.gradients/(\d+)(?:\.(\d+))?$")

NONFINITE_POLICIES = ("error", "zero")

STORAGE_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "uint16"}
"""Storage types of a layer (its ``dtype`` attribute) -> the HDF5 dataset's numpy dtype."""

READ_DTYPES = {**STORAGE_DTYPES, "float64": "float64"}
"""The ``dtype`` attributes the reader accepts: the storage types plus ``float64`` (written by
other tools; read rounded to float32, which the attribute declares). A layer without the
attribute must be a float32 dataset."""

STREAM_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32 (exact: bf16 is the top half of a float32)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


MAX_NAME_PARTS = 64
"""``/``-separated parts a layer name has at most: HDF5 (h5py's ``visititems``, which every
dump reader and writer runs) walks a name of n folders in ~n**2 steps (4,000: 26 s)."""


def check_layer_name(name: Any) -> str:
    """``name`` if it is a relative HDF5 path under ``grads`` of at most ``MAX_NAME_PARTS``
    parts (InputError otherwise)."""
    if not isinstance(name, str) or not name:
        raise InputError(f"layer name {name!r} is not a non-empty string")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\0" in name:
        raise InputError(
            f"layer name {name!r} is not a valid relative HDF5 path "
            "(no leading/trailing '/', no empty, '.' or '..' components, no NUL)"
        )
    if len(parts) > MAX_NAME_PARTS:
        raise InputError(f"layer name {name[:80]!r}... has {len(parts) - 1} folders "
                         f"(limit {MAX_NAME_PARTS - 1})")
    return name


def attr_value(key: str, value: Any) -> Any:
    """Convert a Python value to something h5py stores as an attribute."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, int) and not -2**63 <= value < 2**64:
        raise InputError(f"attribute {key!r}: an integer beyond 64 bits does not fit HDF5")
    if isinstance(value, str) and "\0" in value:
        raise InputError(f"attribute {key!r}: a string with a NUL does not fit HDF5")
    if isinstance(value, (str, bool, int, float, np.generic, np.ndarray)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise InputError(
        f"attribute {key!r}: cannot store a value of type {type(value).__name__} "
        "(use str, int, float, bool, a numpy array, or a dict/list stored as JSON)"
    )


def decode_attr(value: Any) -> Any:
    """An HDF5 attribute as str / int / float / bool / list."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return decode_attr(value[()])
        return [decode_attr(v) for v in value.tolist()]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def describe_target(target: Any) -> str:
    """How messages name a dump's target: a path, ``<stdout>`` or the file object's name."""
    if target == "-":
        return "<stdout>"
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    return getattr(target, "name", None) or "<file object>"


def provenance(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """``attrs`` plus the schema, creation time and versions, unless ``attrs`` gives them."""
    from co3cli.dump.dims import DESCRIPTION

    root = dict(attrs or {})
    root.setdefault("schema", SCHEMA)
    root.setdefault("description", DESCRIPTION)
    root.setdefault("created", created_timestamp())
    root.setdefault("co3cli_version", __version__)
    if "torch" in sys.modules and "torch_version" not in root:
        root["torch_version"] = str(sys.modules["torch"].__version__)
    return root

