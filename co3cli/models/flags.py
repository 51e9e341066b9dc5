"""Flags on fits that must not pass silently: a fit pinned at its search bound, a degenerate
scale, a degenerate layer, a failed goodness of fit (``co3 fit`` shows them; its JSON has a
``flags`` list per layer and per model).

::

    layer x --layer_flags--> all-zero | constant | few-entries
    (Fit, gof) --model_flags--> beta-at-lower-bound, c-at-upper-bound, ... | scale-degenerate
                                | gof-failed
    primary model flagged and another one best --switch_note--> {"from", "to", "because"}

A shape at its bound (:data:`BETA_BOUNDS`) means the likelihood wanted a value outside the
search interval: the model cannot describe the layer (beta -> 0 on a layer whose magnitudes
spread over many decades, beta -> infinity on a flat-topped one), and AIC then picks a rival
for that reason, not because the rival describes gradients better. The goodness-of-fit test
is the Kolmogorov-Smirnov distance already computed by :func:`co3cli.models.gof`: failed when
it exceeds both :data:`KS_FAIL` and the 1 % critical value ``1.63 / sqrt(m)`` of its sample.
"""

from __future__ import annotations

import math

import numpy as np

from co3cli.models.families import BETA_BOUNDS

MIN_ENTRIES = 50
"""Fewer non-zero entries than this: the fitted parameters are unreliable (``few-entries``)."""
KS_FAIL = 0.1
"""A KS distance above this (and above the 1 % critical value) fails the fit (``gof-failed``)."""
KS_COEF = 1.63  # Kolmogorov's 1 % critical value: sqrt(-ln(0.01 / 2) / 2) = 1.628
SCALE_RANGE = 1e-12
"""A scale below ``SCALE_RANGE * max|x|`` or above ``max|x| / SCALE_RANGE`` is degenerate."""
_BOUND_RTOL = 1e-6
_SHAPES = ("beta", "c")
_SCALES = ("scale", "sigma", "b")

FLAGS = {
    "all-zero": "every entry is 0 (no continuous part to fit)",
    "constant": "every non-zero entry has the same magnitude (shape and scale not identifiable)",
    "few-entries": f"fewer than {MIN_ENTRIES} non-zero entries (parameters unreliable)",
    "beta-at-lower-bound": f"GenNorm beta at its search bound {BETA_BOUNDS[0]}",
    "beta-at-upper-bound": f"GenNorm beta at its search bound {BETA_BOUNDS[1]}",
    "c-at-lower-bound": f"double Weibull c at its search bound {BETA_BOUNDS[0]}",
    "c-at-upper-bound": f"double Weibull c at its search bound {BETA_BOUNDS[1]}",
    "scale-degenerate": f"scale outside {SCALE_RANGE:g}..{1 / SCALE_RANGE:g} x max|x|",
    "gof-failed": f"KS distance above {KS_FAIL} and the 1 % critical value",
    "best-flagged": "the best model (AIC) is itself flagged",
}
"""Every flag -> what it means (the legend ``co3 fit`` prints under its table)."""


def layer_flags(x: np.ndarray) -> list[str]:
    """``all-zero``, ``constant`` (one non-zero magnitude), ``few-entries`` for a 1-D layer."""
    nz = np.abs(x[x != 0])
    if nz.size == 0:
        return ["all-zero"]
    flags = ["constant"] if nz.min() == nz.max() else []
    if nz.size < MIN_ENTRIES:
        flags.append("few-entries")
    return flags


def model_flags(params: dict, gof: dict, amax: float) -> list[str]:
    """The flags of one model's fit (``params`` of a :class:`~co3cli.models.Fit`, its
    :func:`~co3cli.models.gof` dict) on a layer whose largest magnitude is ``amax``."""
    flags = []
    for name in _SHAPES:
        v = params.get(name)
        if v is None:
            continue
        if v <= BETA_BOUNDS[0] * (1 + _BOUND_RTOL):
            flags.append(f"{name}-at-lower-bound")
        elif v >= BETA_BOUNDS[1] * (1 - _BOUND_RTOL):
            flags.append(f"{name}-at-upper-bound")
    if amax > 0:
        for name in _SCALES:
            v = params.get(name)
            if v is not None and (not math.isfinite(v) or not
                                  SCALE_RANGE * amax <= v <= amax / SCALE_RANGE):
                flags.append("scale-degenerate")
                break
    ks, m = gof.get("ks"), gof.get("sample")
    if ks is not None and m and gof.get("n_nonzero"):
        if not math.isfinite(ks) or ks > max(KS_FAIL, KS_COEF / math.sqrt(m)):
            flags.append("gof-failed")
    return flags


def switch_note(primary: str, best: str | None, flags: dict[str, list[str]]) -> dict | None:
    """``{"from": primary, "to": best, "because": [...]}`` when the primary model (the first
    asked for) is flagged and AIC chose another one, else None."""
    because = flags.get(primary) or []
    if best is None or best == primary or primary not in flags or not because:
        return None
    return {"from": primary, "to": best, "because": list(because)}
