"""Codebooks: integer coding tables frozen from a fitted model (or from counts).

A model is fitted to the *scaled* values ``y = x * scale`` of a layer (pooled over its steps,
on a deterministic subsample of at most ``FIT_SAMPLE`` entries), its probability of every
grid cell is computed (every symbol > 0, so any input stays codable), and the coder turns
that pmf into integers: Huffman code lengths or ANS frequencies. Only those integers are
used by encoder and decoder; the fitted floats ride along as metadata.

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
from co3cli.quantize import FIT_SAMPLE, fit_sample

SCHEMA = "co3.codebook/1"
POOLED = "*"


def scaled_sample(data: np.ndarray, scales: np.ndarray, limit: int = FIT_SAMPLE) -> np.ndarray:
    """Deterministic subsample of the scaled values of a (steps, numel) layer."""
    per_step = max(1, limit // max(1, data.shape[0]))
    return np.concatenate([fit_sample(row, per_step) * s for row, s in zip(data, scales)])


def table_models() -> tuple[str, ...]:
    """Model ids a table can be frozen from: ``co3cli.models``' plus ``gennorm2-zi``."""
    from co3cli import mixture, models

    return models.get_model_ids() + (mixture.MODEL_ID,)


def check_model(model: str) -> str:
    if model not in table_models():
        raise InputError(f"unknown model {model!r}; allowed: {', '.join(table_models())}")
    return model


def fit_table_model(sample, counts, grid, model: str):
    """Fit ``model`` to scaled values (``sample``) / their symbol ``counts``; returns the fit."""
    from co3cli import mixture, models

    if model == mixture.MODEL_ID:
        return mixture.fit_cells(sample, counts, grid)
    if not np.any(sample) and not (model.endswith("-zi") or model == "dweibull"):
        model = "gennorm-zi"  # a model without a zero mass cannot be fitted to all-zero data
    return models.fit(sample, model)


def fit_from_meta(meta: dict):
    """Rebuild a fit from its metadata (for reports); None for empirical/codebook tables."""
    from co3cli import mixture, models

    if meta.get("model") == mixture.MODEL_ID:
        return mixture.Gennorm2Fit.from_dict(meta)
    if meta.get("model") in models.get_model_ids() and meta.get("model") != "empirical":
        return models.Fit.from_dict(meta)
    return None


def model_weights(data, scales, counts, grid, model: str):
    """Symbol weights (float64, nsym) for a table, and the metadata describing them."""
    if model == "empirical":
        return counts.astype(np.float64), {"model": "empirical"}
    fit = fit_table_model(scaled_sample(data, scales), counts, grid, model)
    return fit.pmf(grid, 1.0), compact_meta(fit)


def compact_meta(fit) -> dict:
    """The fit as report metadata: model, p0 and parameters to 6 significant digits."""
    return {"model": fit.model, "p0": float(f"{fit.p0:.6g}"),
            "params": {k: float(f"{v:.6g}") for k, v in fit.params.items()}}


def table_ints(table) -> np.ndarray:
    """The integer table: Huffman code lengths or ANS frequencies."""
    return np.asarray(table.lengths if hasattr(table, "lengths") else table.freqs, dtype=np.int64)


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
            if len(table_ints(t)) != grid.nsym:
                raise InputError(f"layer {name!r}: table size {len(table_ints(t))} != {grid.nsym}")
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
    from co3cli.codec import _progress, scale_and_quantize
    from co3cli.fileio import created_timestamp

    check_model(model)
    rows = None if steps is None else np.asarray(steps, dtype=np.int64)
    if rows is not None and (rows.size == 0 or rows.min() < 0 or rows.max() >= len(dump.steps)):
        raise InputError(f"steps must be indices in 0..{len(dump.steps) - 1}, got {steps}")
    layers, samples, total = {}, [], np.zeros(grid.nsym, dtype=np.int64)
    for name in _progress(dump.layers, progress, "codebook"):
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
            layers[name] = {"table": table_ints(coder.table_from_weights(weights)).tolist(),
                            "meta": meta}
    if pooled:
        if model == "empirical":
            weights, meta = total + 0.5, {"model": "empirical"}
        else:
            fit = fit_table_model(np.concatenate(samples), total, grid, model)
            weights, meta = fit.pmf(grid, 1.0), compact_meta(fit)
        layers = {POOLED: {"table": table_ints(coder.table_from_weights(weights)).tolist(),
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
