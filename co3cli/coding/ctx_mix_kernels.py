"""Version 7's mixers (``co3cli.coding.ctx_match_kernels``, whose ``_run_v2`` inlines them;
model: ``co3cli/coding/ctx.py``): each decision's probability mixed with a second estimate in
the logistic domain, weights learnt online.  Integers only; part of version 7's bitstream:
frozen (pinned by ``tests/test_ctx_mixed.py``).  A change here would not invalidate the numba
cache of the kernels that inline it, one more reason never to change it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from co3cli.coding.ctx_kernels import NCONF, PMIN, PROB_ONE
from co3cli.coding.textcm_kernels import STRETCH

MX_DEPTH = 16
"""Magnitude weight sets: the decision's depth on the path (capped) times the confidence."""
MX_CNT = 8
"""Zero-flag and sign weight sets: the context's count, in eighths (capped)."""
MX_NSET = MX_DEPTH * NCONF + 2 * MX_CNT
MX_W = (32768, 19661, 39322, 26214)
"""Initial weights (16.16) of (context, order-0) for magnitudes and (context, parent) for
zero flags and signs; the bias weights start at 0."""
MX_SHIFT = (15, 15)
"""Learning rates: ``2**-shift`` of (error x input) for the magnitude and the other mixers."""
MX_LIMIT = 255
"""Adaptation count limit of the order-0 magnitude tree (which restarts with each segment)."""
WCAP = 1 << 24
"""Mixer weights stay in ``[-WCAP, WCAP]``."""


def _squash16() -> np.ndarray:
    """``2**16 / (1 + exp(-x / 256))`` for x in [-2048, 2047], rounded and kept within
    ``[PMIN, 2**16 - PMIN]`` (``co3cli.detmath``'s exp: the same table on every CPU)."""
    from co3cli import detmath

    x = np.arange(-2048, 2048, dtype=np.float64)
    return np.clip(np.rint(PROB_ONE / (1.0 + detmath.exp(-x / 256.0))), PMIN,
                   PROB_ONE - PMIN).astype(np.int64)


SQ16 = _squash16()
"""Version 7's squash: a mixer's output (stretch units, 1/256) to a 16-bit probability."""


@njit(cache=True, nogil=True, inline="always")
def _mix(w0, w1, w2, p0, p1):  # pragma: no cover - compiled
    """Version 7: the 16-bit probability of two 16-bit ones (inputs ``STRETCH`` of their
    top 12 bits) mixed with weights ``w0, w1`` and the bias weight ``w2``; returns it and the
    two inputs (for the update)."""
    x0 = STRETCH[p0 >> 4]
    x1 = STRETCH[p1 >> 4]
    dot = min(max((w0 * x0 + w1 * x1 + (w2 << 8)) >> 16, -2047), 2047)
    return SQ16[dot + 2048], x0, x1


@njit(cache=True, nogil=True, inline="always")
def _learn(w0, w1, w2, x0, x1, err, shift):  # pragma: no cover - compiled
    """A mixer's three weights after coding (``err``: the bit less the mixed probability,
    16-bit): each moved by its input times ``err / 2**shift``, within +-WCAP."""
    return (min(max(w0 + ((x0 * err) >> shift), -WCAP), WCAP),
            min(max(w1 + ((x1 * err) >> shift), -WCAP), WCAP),
            min(max(w2 + ((256 * err) >> shift), -WCAP), WCAP))
