"""Version 4's start of a magnitude context (``co3cli.coding.ctx_match_kernels``, whose
``_run_v2`` calls these): the prior given that the magnitude is near the context's
prediction.  Part of version 4's bitstream (and of versions 5 and 6, built on it): frozen.
A change here would not invalidate the numba cache of the kernels that inline it, which is
one more reason never to change it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from co3cli.coding.ctx_kernels import FP, NCONF, PMIN, PROB_ONE


@njit(cache=True, nogil=True)
def _posterior_tables(child, nint, mmax, mpar):  # pragma: no cover - compiled
    """Leaf ranges ``lo..hi`` of every tree node (its left subtree ends at ``mid``) and the
    distance weights ``G[conf, d]`` (``2**16`` at distance 0 in predictor units, times
    ``mpar[conf] / 2**16`` per unit, never below ``mpar[4]``): integers only."""
    nlo = np.ones(nint, dtype=np.int64)
    nmid = np.ones(nint, dtype=np.int64)
    nhi = np.ones(nint, dtype=np.int64)
    if mmax >= 2:
        for node in range(nint - 1, -1, -1):   # nodes are numbered parents first
            c0 = child[2 * node]
            c1 = child[2 * node + 1]
            nlo[node] = -c0 if c0 < 0 else nlo[c0]
            nmid[node] = -c0 if c0 < 0 else nhi[c0]
            nhi[node] = -c1 if c1 < 0 else nhi[c1]
    gl = (mmax + 2) << FP
    G = np.zeros((NCONF, gl), dtype=np.int64)
    for cf in range(NCONF):
        g = np.int64(PROB_ONE)
        for x in range(gl):
            G[cf, x] = g
            g = max((g * mpar[cf]) >> 16, mpar[4])
    return nlo, nmid, nhi, G


@njit(cache=True, nogil=True, inline="always")
def _posterior_init(PR, mb, mc, nint, mmax, pscale, nbk, mzm, wm, G, cum, nlo, nmid,
                    nhi, count):  # pragma: no cover - compiled
    """Version 4: magnitude context ``mc`` (bucket ``mc // NCONF`` of the prediction,
    confidence ``mc % NCONF``) starts at the tree's split ratios of the prior weights
    ``wm`` times ``G[conf, |16 m - centre|]`` (the bucket's centre): the prior given
    that the magnitude is near the prediction; ``count`` its initial count."""
    cf = (mc // mzm) % NCONF
    cb = ((2 * (mc // (mzm * NCONF)) + 1) * pscale) // (2 * nbk)
    for k in range(1, mmax + 1):
        cum[k] = cum[k - 1] + ((wm[k - 1] * G[cf, abs((k << FP) - cb)]) >> 8) + 1
    for k in range(nint):
        tot = cum[nhi[k]] - cum[nlo[k] - 1]
        wr = cum[nhi[k]] - cum[nmid[k]]
        pk = min(max((2 * wr * PROB_ONE + tot) // (2 * tot), PMIN), PROB_ONE - PMIN)
        PR[mb + k] = (pk << 8) | count
