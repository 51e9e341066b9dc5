"""Codebooks: integer coding tables frozen from a fitted model (or from counts).

Each layer's model is fitted and frozen by :mod:`co3cli.tables` (every symbol > 0, so any input
stays codable); the coder turns that pmf into integers: Huffman code lengths or ANS frequencies.
Only those integers are used by encoder and decoder; the fitted floats ride along as metadata.

Codebook file (``co3.codebook/1``, JSON)::

    {"schema": "co3.codebook/1", "co3cli_version": ..., "created": ...,
     "format": {grid config}, "coder": {"id": "huffman", "max_len": 16},
     "model": "gennorm-zi", "scale_rule": "absmax", "source": {...},
     "layers": {"fc1.weight": {"table": [ints], "meta": {fit}}, ..., "*": {pooled, optional}},
     "checksum": crc32 of the canonical JSON of everything else}

``table`` is the list of code lengths (huffman) or frequencies (ans, which also records its
``precision`` in ``coder``). A layer missing from ``layers`` uses ``"*"`` when present.

``load`` is the one gate for every reader (``co3 compress --codebook``, ``co3 codebook show``):
it refuses a file over ``MAX_BYTES`` (64 MiB) or nested deeper than ``MAX_DEPTH`` (64; counted
before parsing), then checks the schema, the checksum and the whole structure: format (a known
grid, config as the grid states it), coder (through the coder registry), scale rule, model, and
every layer an object with an integer ``table`` of the grid's size and an object ``meta``.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass

import numpy as np

from co3cli import __version__
from co3cli.coding import coder_from_config
from co3cli.errors import Co3Error, InputError
from co3cli.scales import FIT_SAMPLE
from co3cli.tables import (
    check_model, fit_table_model, model_weights, scale_and_quantize, scaled_sample,
    weights_from_fit,
)

SCHEMA = "co3.codebook/1"
POOLED = "*"


@dataclass
class Codebook:
    doc: dict

    @property
    def coder(self):
        return coder_from_config(self.doc["coder"])

    @property
    def source(self) -> dict:
        return self.doc.get("source", {})

    @property
    def checksum(self) -> int:
        return self.doc["checksum"]

    @property
    def format_id(self) -> str:
        return self.doc["format"]["id"]

    def check_compatible(self, grid) -> None:
        if self.doc["format"] != grid.config():
            raise InputError(f"the codebook was built for format {self.format_id!r}, not {grid.id!r}")

    def table_for(self, name: str):
        layers = self.doc["layers"]
        entry = layers.get(name, layers.get(POOLED))
        if entry is None:
            have = ", ".join(sorted(layers)[:6]) + (" ..." if len(layers) > 6 else "")
            raise InputError(f"the codebook has no table for layer {name!r} (it has: {have}) and no "
                             "pooled '*' table; build one that covers every layer with: "
                             f"{self.pooled_command()}")
        return self.coder.table_from_ints(entry["table"])

    def pooled_command(self, dump: str = "DUMP", output: str = "book.json") -> str:
        """The ``co3 codebook build`` line that makes a pooled (``*``) book of this one's kind."""
        coder = self.doc["coder"]
        parts = ["co3 codebook build", dump, "--pooled", "--format", self.format_id,
                 "--coder", coder["id"], "--model", self.doc["model"]]
        if self.doc["scale_rule"] not in ("absmax", "clip"):
            parts += ["--scale", self.doc["scale_rule"]]
        for key, flag in (("max_len", "--max-len"), ("precision", "--precision")):
            if key in coder:
                parts += [flag, str(coder[key])]
        return " ".join(parts + ["-o", output])

    def save(self, f) -> None:
        f.write(json.dumps(self.doc, indent=1, sort_keys=True).encode() + b"\n")


def _checksum(doc: dict) -> int:
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


MAX_BYTES = 64 << 20
"""Largest codebook file ``load`` reads (64 MiB: a 65536-symbol table for ~300 layers)."""
MAX_DEPTH = 64
"""Deepest JSON nesting ``load`` parses (a codebook written by ``build`` has 5 or 6 levels)."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_OPEN, _CLOSE = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


def _depth(data: bytes) -> int:
    """Deepest bracket nesting of a JSON text, counted outside strings (vectorized)."""
    bare = np.frombuffer(_STRING.sub(b'""', data), np.uint8)
    opens, closes = np.isin(bare, _OPEN), np.isin(bare, _CLOSE)
    steps = opens[opens | closes].astype(np.int32) * 2 - 1
    depth, deepest = 0, 0
    for i in range(0, steps.size, 1 << 22):  # chunks bound the cumsum's memory
        run = depth + np.cumsum(steps[i:i + (1 << 22)], dtype=np.int64)
        deepest, depth = max(deepest, int(run.max())), int(run[-1])
    return deepest


def _read(path, where: str) -> dict:
    """The codebook's JSON document, read within the size and nesting limits."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise InputError(f"cannot read codebook {str(path)!r}: {e.strerror}") from None
    if len(data) > MAX_BYTES:
        raise InputError(f"{where} is larger than the {MAX_BYTES >> 20} MiB limit")
    if _depth(data) > MAX_DEPTH:
        raise InputError(f"{where} nests deeper than {MAX_DEPTH} levels (not a codebook)")
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        from co3cli.fileio import misplaced

        raise InputError(misplaced(path, where, "codebook") or f"{where} is not valid JSON") from None


def _real_or_none(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _check_layer(name, entry, coder, nsym: int) -> None:
    """One ``layers`` entry: an object with an integer ``table`` of ``nsym`` and a ``meta``."""
    if not isinstance(entry, dict) or not isinstance(entry.get("meta"), dict):
        raise InputError(f"layer {name!r} is not an object with a 'table' and a 'meta' object")
    table = entry.get("table")
    ints = np.asarray(table) if isinstance(table, list) else None
    if ints is None or ints.ndim != 1 or ints.dtype.kind not in "iu" or ints.size != nsym:
        raise InputError(f"layer {name!r}: 'table' is not a list of {nsym} integers")
    if ints.min() < 0 or ints.max() >= 1 << 32 or not np.any(ints > 0):
        raise InputError(f"layer {name!r}: table entries must be in 0..2**32-1, some positive")
    meta = entry["meta"]
    params = meta.get("params", {})
    if not isinstance(params, dict) or not all(
            _real_or_none(v) for v in (params.get("beta"), meta.get("p0"))):
        raise InputError(f"layer {name!r}: 'meta' has a non-numeric params.beta or p0")
    if not isinstance(meta.get("model"), (str, type(None))):
        raise InputError(f"layer {name!r}: 'meta' model is not a string")
    coder.table_from_ints(table)


def _check_doc(doc: dict) -> None:
    """Everything ``compress`` and ``codebook show`` rely on, checked once at load."""
    from co3cli.formats import get_grid
    from co3cli.scales import SCALE_RULES
    from co3cli.tables import check_model

    for key, kind in (("format", dict), ("coder", dict), ("layers", dict), ("source", dict),
                      ("scale_rule", str), ("model", str), ("co3cli_version", str)):
        if not isinstance(doc.get(key, {} if key == "source" else None), kind):
            what = "a string" if kind is str else "an object"
            raise InputError(f"{key!r} is missing or not {what}")
    check_model(doc["model"])
    grid = get_grid(doc["format"].get("id"))
    if grid.clip_sigma is None:
        SCALE_RULES.check(doc["scale_rule"])
    elif doc["scale_rule"] != "clip":  # a uniformB-cX format fixes its scale
        raise InputError(f"scale rule {doc['scale_rule']!r} with format {grid.id!r} "
                         "(expected 'clip')")
    Codebook(doc).check_compatible(grid)
    coder = coder_from_config(doc["coder"])
    if not doc["layers"]:
        raise InputError("'layers' is empty")
    for name, entry in doc["layers"].items():
        _check_layer(name, entry, coder, grid.nsym)


def load(path) -> Codebook:
    """Read and verify a codebook file: at most ``MAX_BYTES``, nested at most ``MAX_DEPTH``
    deep, the schema, the checksum and the whole structure (format, coder, scale rule, model,
    every layer's table and meta), so that every reader of a loaded book may trust it."""
    where = f"codebook {str(path)!r}"
    doc = _read(path, where)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise InputError(f"{where} has schema {found!r}; expected {SCHEMA!r}")
    if doc.get("checksum") != _checksum(doc):
        raise InputError(f"{where} fails its checksum (edited or corrupted)")
    try:
        _check_doc(doc)
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as e:
        raise InputError(f"{where} is malformed ({e})") from None
    except Co3Error as e:
        raise InputError(f"{where}: {e}") from None
    return Codebook(doc)


def build(dump, grid, coder, *, model="gennorm-zi", scale_rule=None, pooled=False,
          steps=None, progress=False) -> Codebook:
    """Fit every layer of an open dump and freeze the fits into integer tables.

    ``steps`` (indices into the dump's steps) limits the data used, e.g. ``[0]`` for a
    codebook built on the first step only. ``pooled`` adds one table for all layers (``*``).
    """
    from co3cli.fileio import created_timestamp
    from co3cli.progress import progress_iter

    check_model(model)
    rows = None if steps is None else np.asarray(steps, dtype=np.int64)
    if rows is not None and (rows.size == 0 or rows.min() < 0 or rows.max() >= len(dump.steps)):
        raise InputError(f"steps must be indices in 0..{len(dump.steps) - 1}, got {steps}")
    layers, samples, total = {}, [], np.zeros(grid.nsym, dtype=np.int64)
    for name in progress_iter(dump.layers, progress, "codebook"):
        data = dump.read_layer(name)
        if rows is not None:
            data = data[rows]
        scales, _, counts = scale_and_quantize(data, grid, scale_rule)
        if pooled:
            share = dump.numel(name) / sum(dump.numel(n) for n in dump.layers)
            samples.append(scaled_sample(data, scales, max(1, round(FIT_SAMPLE * share))))
            total += counts
        if not pooled:
            weights, meta = model_weights(data, scales, counts, grid, model)
            if model == "empirical":  # a saved table must code symbols unseen so far
                weights = weights + 0.5
            layers[name] = {"table": coder.table_from_weights(weights).ints().tolist(),
                            "meta": meta}
    if pooled:
        fit = None if model == "empirical" else fit_table_model(np.concatenate(samples), total,
                                                                grid, model)
        weights, meta = weights_from_fit(fit, total, grid, model)
        if model == "empirical":  # a saved table must code symbols unseen so far
            weights = weights + 0.5
        layers = {POOLED: {"table": coder.table_from_weights(weights).ints().tolist(),
                           "meta": meta}}
    doc = {
        "schema": SCHEMA,
        "co3cli_version": __version__,
        "created": created_timestamp(),
        "format": grid.config(),
        "coder": coder.config(),
        "model": model,
        "scale_rule": scale_rule or ("clip" if grid.clip_sigma is not None else "absmax"),
        "source": {"attrs": {k: v for k, v in dump.attrs.items()
                             if isinstance(v, (str, int, float, bool))},
                   "steps": None if rows is None else [int(dump.steps[i]) for i in rows]},
        "layers": layers,
    }
    doc["checksum"] = _checksum(doc)
    return Codebook(doc)
