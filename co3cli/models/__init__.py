"""Model: distributions of gradient entries, their fits, goodness of fit and symbol pmfs.

Where this sits in the pipeline::

    gradient x (1-D float) --fit()--> Fit --pmf(grid, scale)--> symbol probabilities
                             |                                    (-> integer code tables)
                             +--gof()--> loglik / AIC / KS / W2 / tail ratios (reports)
    (the scale rules built on these fits live in co3cli.scales; tables in co3cli.tables)

The hypothesis of Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "DNN gradient lossless compression: Can
GenNorm be the answer?", ICC 2022, arXiv:2111.07599,
is that per-layer gradients follow a generalised normal (GenNorm) law

    f(x) = beta / (2 alpha Gamma(1/beta)) * exp(-(|x| / alpha)**beta)

(beta = 2: normal, beta = 1: Laplace). ReLU networks put 10-25 % of entries at exactly 0,
on which a plain GenNorm MLE collapses (its likelihood grows without bound as beta -> 0), so
the default model ``gennorm-zi`` is *zero-inflated*: a point mass ``p0`` (the fraction of
exact zeros) plus a GenNorm fitted to the non-zero entries.

Models (stable ids, see :data:`MODELS`); the location is fixed at 0 for all of them, because
gradients are centred and every grid is sign-symmetric:

* ``gennorm-zi`` (default), ``normal-zi``, ``laplace-zi``: p0 = zero fraction, continuous
  component fitted by MLE to the non-zero entries;
* ``gennorm``, ``normal``, ``laplace``: fitted by MLE to all entries, p0 = 0;
* ``dweibull``: double Weibull (TinyScript's model). Its density is 0 or infinite at x = 0
  (unless c == 1), so it is always fitted to the non-zero entries with the zero fraction
  as point mass p0;
* ``empirical``: no parametric fit; its pmf is the (floored) histogram of the quantized data.

Fitting. For fixed beta the GenNorm MLE of the scale is closed form,
``alpha = (beta / n * sum |x|**beta)**(1/beta)``, so the MLE is a 1-D maximisation of the
profile log-likelihood over beta: start from the method-of-moments estimate (solve
``Gamma(1/b) Gamma(3/b) / Gamma(2/b)**2 = E[x^2] / E|x|^2``) or the best point of a 13-point
scan of [0.05, 20] if that is higher, polish with safeguarded Newton on a deterministic strided
65k subsample, then run Newton on all entries (typically three passes). Each pass needs
``S(b) = sum exp(b L)`` and its first two derivatives, with ``L = log(|x| / max|x|) <= 0``
precomputed once in float32 (so nothing overflows), computed in float64 in cache-sized
chunks and summed in a fixed order, with ``co3cli.detmath``'s ``log`` and ``exp`` (the same
bits on every CPU, so a file's tables are too). beta is searched in :data:`BETA_BOUNDS`.
The double Weibull uses the same trick (``lambda**c = mean |x|**c``; its profile is concave in c). Normal and Laplace
scales are closed form.

Symbol pmf (:meth:`Fit.pmf`): entry x becomes symbol ``K + sign(y) k`` with ``y = x * scale``
rounded to the nearest magnitude; cell k (``k >= 1``) is ``edges[k-1] < |y| <= edges[k]``,
the top cell extends to infinity (saturation), and the zero cell ``|y| <= edges[0]`` also gets
p0. Every symbol gets probability at least :data:`PMF_FLOOR` (then renormalised), so a
codebook built from the model can code any input.
"""

from co3cli.models.families import (
    BETA_BOUNDS, DEFAULT_MODEL, FIT_ALL_MODELS, MODELS, PMF_FLOOR, abs_cell_masses, gennorm_cells,
    get_model_ids, pmf_from_counts,
)
from co3cli.models.mle import Fit, fit
from co3cli.models.gof import TAIL_QUANTILES, best_model, fit_all, gof

__all__ = ["BETA_BOUNDS", "DEFAULT_MODEL", "FIT_ALL_MODELS", "MODELS", "PMF_FLOOR",
           "TAIL_QUANTILES", "Fit", "abs_cell_masses", "best_model", "fit", "fit_all",
           "gennorm_cells", "get_model_ids", "gof", "pmf_from_counts"]
