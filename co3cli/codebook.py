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
"""

from __future__ import annotations

import json
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
            raise InputError(f"the codebook has no table for layer {name!r} and no pooled '*' table")
        return self.coder.table_from_ints(entry["table"])

    def save(self, f) -> None:
        f.write(json.dumps(self.doc, indent=1, sort_keys=True).encode() + b"\n")


def _checksum(doc: dict) -> int:
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def load(path) -> Codebook:
    """Read and verify a codebook file (schema, checksum, tables)."""
    from co3cli.formats import get_grid

    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except OSError as e:
        raise InputError(f"cannot read codebook {str(path)!r}: {e.strerror}") from None
    except ValueError:
        raise InputError(f"codebook {str(path)!r} is not valid JSON") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise InputError(f"codebook {str(path)!r} has schema {found!r}; expected {SCHEMA!r}")
    if doc.get("checksum") != _checksum(doc):
        raise InputError(f"codebook {str(path)!r} fails its checksum (edited or corrupted)")
    try:
        book = Codebook(doc)
        grid = get_grid(book.format_id)
        book.check_compatible(grid)
        for name in doc["layers"]:
            t = book.table_for(name)
            if len(t.ints()) != grid.nsym:
                raise InputError(f"layer {name!r}: table size {len(t.ints())} != {grid.nsym}")
    except (KeyError, TypeError, AttributeError) as e:
        raise InputError(f"codebook {str(path)!r} is malformed ({e})") from None
    except Co3Error as e:
        raise InputError(f"codebook {str(path)!r}: {e}") from None
    return book


def build(dump, grid, coder, *, model="gennorm-zi", scale_rule=None, pooled=False,
          steps=None, progress=False) -> Codebook:
    """Fit every layer of an open dump and freeze the fits into integer tables.

    ``steps`` (indices into the dump's steps) limits the data used, e.g. ``[0]`` for a
    codebook built on the first step only. ``pooled`` adds one table for all layers (``*``).
    """
    from co3cli.fileio import created_timestamp, progress_iter

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
