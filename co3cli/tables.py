"""Model -> integer table: the one place where a fitted model becomes a coding table.

::

    values (steps, numel) --scale_and_quantize--> scales, symbols, counts
    scaled sample + counts --TABLE_MODELS[model]--> fit --fit.pmf(grid)--> weights (float64, nsym)
    weights --coder.table_from_weights--> table (integers only: code lengths / frequencies)

Used by the file pipeline (``co3cli.codec``, ``co3cli.codebook``) and by the compressors
(``co3cli.compressors``) alike. A model is fitted to the *scaled* values ``y = x * scale`` (pooled
over a layer's steps, on a deterministic subsample of at most ``TABLE_FIT_SAMPLE`` = 2**16
entries: on the bundled dumps within ±0.02 % of the bytes of a 2**18 sample, at a quarter of
the fit's time); its
probability of every grid cell is > 0, so a table frozen from it codes any input. Only the integer
table crosses the encoder/decoder boundary; the fit rides along as report metadata
(:func:`compact_meta`, rebuilt by :func:`fit_from_meta`). A group of small layers gets one table,
fitted to their scaled values pooled (:func:`pooled_sample`) and their counts summed.

``TABLE_MODELS`` registers every model a table can be frozen from: the continuous families of
:mod:`co3cli.models` (``gennorm-zi`` first, the default), the GenNorm mixture ``gennorm2-zi``
(:mod:`co3cli.mixture`, fitted to the cell counts), ``empirical`` (the counts themselves) and
``auto`` (the file default: per layer the smaller of the counts' and the gennorm-zi table by
real bits, in step groups where the steps drifted, or stored symbols: :mod:`co3cli.segments`;
where one table is built without that choice, a group's or a codebook's, the counts').
Each entry is ``fit(sample, counts, grid) -> fit`` (``empirical``, ``auto``: None).

Reference: Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "DNN gradient lossless compression:
Can GenNorm be the answer?", ICC 2022, arXiv:2111.07599 (a Huffman code built from the fitted
GenNorm, not from counts).
"""

from __future__ import annotations

import numpy as np

from co3cli import mixture, models
from co3cli.registry import Registry
from co3cli.scales import compute_scale, fit_sample

TABLE_MODELS: Registry = Registry("model")


def _family(model: str):
    def fit(sample, counts, grid):
        kind = model
        if not np.any(sample) and not (kind.endswith("-zi") or kind == "dweibull"):
            kind = "gennorm-zi"  # a model without a zero mass cannot be fitted to all-zero data
        return models.fit(sample, kind)

    return fit


for _id in models.MODELS:
    if _id != "empirical":
        TABLE_MODELS.register(_family(_id), id=_id, doc=models.MODELS.doc(_id))
TABLE_MODELS.register(lambda sample, counts, grid: mixture.fit_cells(sample, counts, grid),
                      id=mixture.MODEL_ID, doc="GenNorm mixture fitted to the cells (closest to "
                      "the counts)")
TABLE_MODELS.register(lambda sample, counts, grid: None, id="empirical",
                      doc=models.MODELS.doc("empirical"))
AUTO = "auto"
TABLE_MODELS.register(lambda sample, counts, grid: None, id=AUTO,
                      doc="per layer the smallest by real bytes: the counts' or the gennorm-zi "
                      "table, in step groups where the steps drifted, or the symbols stored")


def check_model(model: str) -> str:
    return TABLE_MODELS.check(model)


def scale_and_quantize(data: np.ndarray, grid, scale_rule):
    """Per-step scales (float32) and symbols (uint16, same shape) of a (steps, numel) array, and
    the symbol counts over all steps (int64, nsym)."""
    from co3cli.quantize import quantize

    scales = np.array([compute_scale(row, grid, scale_rule) for row in data], dtype=np.float32)
    sym = np.empty(data.shape, dtype=np.uint16)
    counts = np.zeros(grid.nsym, dtype=np.int64)
    for t, row in enumerate(data):
        sym[t], c = quantize(row, grid, scales[t], with_counts=True)
        counts += c
    return scales, sym, counts


TABLE_FIT_SAMPLE = 1 << 16  # entries a layer's table fit sees (it was 2**18: the same rate)


def scaled_sample(data: np.ndarray, scales: np.ndarray, limit: int = TABLE_FIT_SAMPLE) -> np.ndarray:
    """Deterministic subsample of the scaled values of a (steps, numel) layer."""
    per_step = max(1, limit // max(1, data.shape[0]))
    return np.concatenate([fit_sample(row, per_step) * s for row, s in zip(data, scales)])


GROUP_FIT_SAMPLE = 1 << 16  # entries a group's pooled fit sees (its cost is the group's, shared
# by its small layers; the FL refits found 2**14 within 0.01 % of the full fit's bytes)


def pooled_sample(datas, scaless, limit: int = GROUP_FIT_SAMPLE) -> np.ndarray:
    """Deterministic subsample of the scaled values of several (steps, numel_k) layers pooled
    (a group of small layers: one table for all)."""
    y = np.concatenate([(d * s.astype(np.float32)[:, None]).ravel() for d, s in zip(datas, scaless)])
    return fit_sample(y, limit)


def fit_table_model(sample, counts, grid, model: str):
    """Fit ``model`` to scaled values (``sample``) / their symbol ``counts``; returns the fit."""
    return TABLE_MODELS.get(model)(sample, counts, grid)


def fit_from_meta(meta: dict):
    """Rebuild a fit from its metadata (for reports); None for empirical/codebook tables."""
    if meta.get("model") == mixture.MODEL_ID:
        return mixture.Gennorm2Fit.from_dict(meta)
    if meta.get("model") in models.MODELS and meta.get("model") != "empirical":
        return models.Fit.from_dict(meta)
    return None


def compact_meta(fit) -> dict:
    """The fit as report metadata: model, p0 and parameters to 6 significant digits."""
    return {"model": fit.model, "p0": float(f"{fit.p0:.6g}"),
            "params": {k: float(f"{v:.6g}") for k, v in fit.params.items()}}


def entropy_bits(counts) -> float:
    """Empirical order-0 entropy (bits) of a symbol histogram, times its size: the reference
    every table and coder is measured against."""
    c = np.asarray(counts, dtype=np.float64)
    c = c[c > 0]
    n = c.sum()
    return float(-(c * np.log2(c / n)).sum()) if n else 0.0


def weights_from_fit(fit, counts, grid, model: str):
    """Symbol weights (float64, nsym) and metadata of a fit (``empirical``: the counts)."""
    if model in ("empirical", AUTO):  # auto: a single table (a group, a codebook) from counts
        return counts.astype(np.float64), {"model": "empirical"}
    return fit.pmf(grid, 1.0), compact_meta(fit)


def model_weights(data, scales, counts, grid, model: str, sample=None):
    """Symbol weights (float64, nsym) for a table of a (steps, numel) layer, and their metadata
    (``sample``: the scaled values to fit instead of the layer's, e.g. :func:`pooled_sample`)."""
    if model in ("empirical", AUTO):
        return weights_from_fit(None, counts, grid, model)
    fit = fit_table_model(scaled_sample(data, scales) if sample is None else sample, counts,
                          grid, model)
    return weights_from_fit(fit, counts, grid, model)


def octave_freqs(counts, precision: int) -> np.ndarray | None:
    """An adaptive coder's prior (``ctx``: where it starts, not what it codes with) from
    ``counts``: every used symbol's frequency rounded to a power of two (the nearest octave of
    ``count / total * 2**precision``), an unused one 0, the most frequent symbol taking what
    makes the sum ``2**precision``; None when nothing is counted or that would leave it none.
    Its integer table deflates to about half the exact counts' (on digits-resnet-tiny at fp8:
    90 bytes against 201, the ``ctx`` payload within 0.01 %), so a group of small layers can
    afford it where the exact counts cost more than they save."""
    from co3cli import detmath  # the same octaves on every CPU

    c = np.asarray(counts, dtype=np.float64)
    total = c.sum()
    if total <= 0:
        return None
    used = c > 0
    k = np.zeros(c.size, dtype=np.int64)
    k[used] = np.clip(np.rint(detmath.log2(c[used] * (2.0 ** precision / total))), 0,
                      precision - 1)
    freqs = np.where(used, np.left_shift(np.int64(1), k), 0)
    top = int(np.argmax(c))
    freqs[top] += (1 << precision) - int(freqs.sum())
    return freqs if freqs[top] > 0 else None


def flat_freqs(nsym: int, precision: int) -> np.ndarray:
    """The flat prior in integers: ``2**precision // nsym`` each, the first
    ``2**precision % nsym`` symbols one more (an adaptive coder's start where the counts
    cost more than they save; ``.co3`` 1.5 stores it as its size alone)."""
    base, extra = divmod(1 << precision, nsym)
    f = np.full(nsym, base, dtype=np.int64)
    f[:extra] += 1
    return f
