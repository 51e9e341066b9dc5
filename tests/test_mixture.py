"""gennorm2-zi: the cell-fitted GenNorm mixture with sign balance."""

import numpy as np
import pytest
from scipy import stats

from co3cli import mixture, models
from co3cli.tables import scale_and_quantize
from co3cli.coding.huffman import huffman_lengths
from co3cli.errors import InputError
from co3cli.formats import get_grid
from co3cli.tables import entropy_bits

TRUE = {"pi": 0.45, "w": 0.7, "beta1": 0.9, "scale1": 1.0, "beta2": 0.4, "scale2": 0.01}


def sample(n, rng, p0=0.2):
    comp = rng.random(n) < TRUE["w"]
    mag = np.where(comp, np.abs(stats.gennorm.rvs(TRUE["beta1"], scale=TRUE["scale1"], size=n, random_state=rng)),
                   np.abs(stats.gennorm.rvs(TRUE["beta2"], scale=TRUE["scale2"], size=n, random_state=rng)))
    sign = np.where(rng.random(n) < TRUE["pi"], 1.0, -1.0)
    x = (sign * mag).astype(np.float32)
    x[rng.random(n) < p0] = 0
    return x


def test_pmf_is_a_distribution_with_the_sign_balance():
    grid = get_grid("fp8-e4m3")
    fit = mixture.Gennorm2Fit(dict(TRUE), p0=0.2)
    p = fit.pmf(grid, 30.0)
    assert p.shape == (grid.nsym,) and np.all(p > 0) and p.sum() == pytest.approx(1.0)
    K = grid.K
    assert p[K + 1:].sum() / (p[K + 1:].sum() + p[:K].sum()) == pytest.approx(0.45, abs=1e-9)
    assert mixture.Gennorm2Fit.from_dict(fit.to_dict()) == fit


@pytest.mark.parametrize("fmt", ["fp8-e5m2", "fp4-co3"])
def test_fit_cells_beats_single_gennorm_and_matches_counts_huffman(fmt):
    rng = np.random.default_rng(5)
    x = sample(400_000, rng)[None, :]
    grid = get_grid(fmt)
    scales, sym, counts = scale_and_quantize(x, grid, None)
    y = x[0] * scales[0]
    fit2 = mixture.fit_cells(y, counts, grid)
    fit1 = models.fit(y, "gennorm-zi")
    n = counts.sum()
    xe = lambda p: -(counts * np.log2(p)).sum() / n  # noqa: E731
    H = entropy_bits(counts) / n
    assert xe(fit2.pmf(grid)) <= xe(fit1.pmf(grid, 1.0)) + 1e-9
    assert xe(fit2.pmf(grid)) - H < 0.01
    assert fit2.params["pi"] == pytest.approx(0.45, abs=0.01) and fit2.p0 == pytest.approx(0.2, abs=0.01)
    exact = huffman_lengths(np.where(counts > 0, counts, 0).astype(float), max_len=20)
    model = huffman_lengths(fit2.pmf(grid))
    assert ((counts * model).sum() - (counts * exact).sum()) / n <= 0.02


def test_bad_parameters_and_all_zero_data():
    with pytest.raises(InputError):
        mixture.Gennorm2Fit({**TRUE, "w": 1.5}, p0=0.1)
    with pytest.raises(InputError):
        mixture.Gennorm2Fit({"beta": 1.0}, p0=0.1)
    with pytest.raises(InputError):
        mixture.Gennorm2Fit.from_dict({"model": "gennorm2-zi"})
    grid = get_grid("fp4-co3")
    zeros = np.zeros((1, 100), np.float32)
    _, _, counts = scale_and_quantize(zeros, grid, None)
    fit = mixture.fit_cells(zeros[0], counts, grid)
    assert fit.p0 == 1.0 and np.all(fit.pmf(grid) > 0)
