"""Grids and rounding: exhaustive over codes, midpoints and the neighbours of every tie."""

import numpy as np
import pytest

from co3cli.errors import InputError
from co3cli.formats import FORMATS, get_grid
from co3cli.quantize import dequantize, quantize, quantize_reference
from co3cli.scales import compute_scale

GRIDS = list(FORMATS) + ["fp3.2-b3", "fp5.1-b20-fn", "fp2.3-full", "uniform8", "uniform3", "uniform4-c3",
                       "fp3.1-b140-full"]


def test_named_grids_known_values():
    assert get_grid("fp8-e5m2").max_value == 57344 and get_grid("fp8-e5m2").magnitudes[1] == 2.0**-16
    assert get_grid("fp8-e5m2").nsym == 247
    e4 = get_grid("fp8-e4m3")
    assert e4.max_value == 448 and e4.magnitudes[1] == 2.0**-9 and e4.K == 126
    assert get_grid("fp8-143-b10").max_value == 30
    assert get_grid("fp4-co3").magnitudes.tolist() == [0, 0.5, 1, 1.5, 2, 3]
    assert get_grid("fp4-e2m1").magnitudes.tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert get_grid("uniform4").magnitudes.tolist() == list(range(8))
    assert get_grid("uniform4-c3").clip_sigma == 3.0
    g = get_grid("fp4-co3")
    assert g.values.tolist() == [-3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3]


@pytest.mark.parametrize("name,dtype", [("fp8-e5m2", "float8_e5m2"), ("fp8-e4m3", "float8_e4m3fn")])
def test_fp8_grids_match_torch_codes(name, dtype):
    torch = pytest.importorskip("torch")
    vals = torch.arange(256, dtype=torch.uint8).view(getattr(torch, dtype)).float().numpy()
    finite = np.unique(np.abs(vals[np.isfinite(vals)]))
    np.testing.assert_array_equal(finite, get_grid(name).magnitudes)


@pytest.mark.parametrize("spec", ["fp8", "fp0.3", "fp9.2", "fp4.0", "fp1.2", "fp5.11", "uniform1",
                                  "uniform13", "uniform4-c0", "fp4.3-b400", "int8", "", "fp4.3-bx"])
def test_bad_grid_specs(spec):
    with pytest.raises(InputError):
        get_grid(spec)


def probe_points(grid) -> np.ndarray:
    """Every grid value, every midpoint, the float32 neighbours of each, beyond max, signed."""
    m = grid.magnitudes.astype(np.float32)
    mid = grid.edges.astype(np.float32)
    assert np.array_equal(mid.astype(np.float64), grid.edges), "midpoints must be exact in float32"
    pts = np.concatenate([m, mid, np.nextafter(mid, np.float32(np.inf)),
                          np.nextafter(mid, np.float32(0)), np.nextafter(m, np.float32(np.inf)),
                          np.nextafter(m[1:], np.float32(0)),
                          np.float32([grid.max_value * 1.5, grid.max_value * 2, 3e38, 1e-45, 0.0])])
    return np.concatenate([pts, -pts]).astype(np.float32)


@pytest.mark.parametrize("name", GRIDS)
def test_paths_agree_on_every_code_midpoint_and_tie(name):
    grid = get_grid(name)
    x = probe_points(grid)
    ref = quantize_reference(x, grid, 1.0)
    got, counts = quantize(x, grid, 1.0, with_counts=True)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(counts, np.bincount(ref, minlength=grid.nsym))
    if name in ("fp8-e5m2", "fp8-e4m3"):
        np.testing.assert_array_equal(quantize(x, grid, 1.0, path="torch"), ref)


@pytest.mark.parametrize("name", GRIDS)
def test_rounding_rule(name):
    """Grid values are fixed points; midpoints go to the even index; neighbours to the nearest."""
    grid = get_grid(name)
    K = grid.K
    m = grid.magnitudes.astype(np.float32)
    np.testing.assert_array_equal(quantize(m, grid, 1.0), K + np.arange(K + 1))
    np.testing.assert_array_equal(quantize(-m, grid, 1.0), K - np.arange(K + 1))
    mid = grid.edges.astype(np.float32)
    k = np.arange(K)
    even = np.where(k % 2 == 0, k, k + 1)
    np.testing.assert_array_equal(quantize(mid, grid, 1.0), K + even)
    np.testing.assert_array_equal(quantize(np.nextafter(mid, np.float32(np.inf)), grid, 1.0), K + k + 1)
    np.testing.assert_array_equal(quantize(np.nextafter(mid, np.float32(0)), grid, 1.0), K + k)
    big = np.float32([grid.max_value * 4, -grid.max_value * 4, 3.4e38])
    assert quantize(big, grid, 1.0).tolist() == [2 * K, 0, 2 * K]  # saturation, no Inf


@pytest.mark.parametrize("name", ["fp8-e5m2", "fp8-e4m3", "fp4-co3", "uniform8", "fp3.2-b3"])
def test_paths_agree_on_random_data(name):
    grid = get_grid(name)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(200_000) * np.exp(rng.uniform(-30, 10, 200_000))).astype(np.float32)
    for scale in (1.0, compute_scale(x, grid), np.float32(3.7)):
        ref = quantize_reference(x, grid, scale)
        np.testing.assert_array_equal(quantize(x, grid, scale), ref)
        if name in ("fp8-e5m2", "fp8-e4m3"):
            np.testing.assert_array_equal(quantize(x, grid, scale, path="torch"), ref)


def test_signed_zero_is_one_symbol_and_dequantize():
    grid = get_grid("fp8-e4m3")
    x = np.float32([0.0, -0.0, -1e-30, 1e-30])
    assert set(quantize(x, grid, 1.0).tolist()) == {grid.K}
    m = grid.values
    np.testing.assert_array_equal(dequantize(np.arange(grid.nsym), grid, 2.0), m / np.float32(2))
    with pytest.raises(InputError):
        dequantize(np.array([grid.nsym]), grid, 1.0)


def test_input_is_not_mutated_and_nonfinite_rejected():
    grid = get_grid("fp8-e5m2")
    x = np.linspace(-3, 3, 1001, dtype=np.float32)
    before = x.copy()
    quantize(x, grid, 5.0)
    np.testing.assert_array_equal(x, before)
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(InputError, match="non-finite"):
            quantize(np.float32([1.0, bad]), grid, 1.0)
    with pytest.raises(InputError, match="non-finite"):  # overflow of x * scale
        quantize(np.float32([3e38]), grid, 1e10)
    for s in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(InputError, match="scale"):
            quantize(x, grid, s)


def test_scale_rules():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(50_000).astype(np.float32)
    g = get_grid("fp8-e4m3")
    s = compute_scale(x, g)
    assert s.dtype == np.float32
    assert quantize(x, g, s).max() == g.nsym - 1 or quantize(x, g, s).min() == 0
    assert abs(float(np.abs(x).max() * s) - 448) < 1e-3 * 448
    assert compute_scale(np.zeros(10, np.float32), g) == 1.0
    u = get_grid("uniform4-c3")
    s = compute_scale(x, u)
    assert abs(float(s) - 7 / (3 * np.sqrt(np.mean(x.astype(np.float64) ** 2)))) < 1e-5
    with pytest.raises(InputError, match="fixes its scale"):
        compute_scale(x, u, "absmax")
    with pytest.raises(InputError, match="unknown scale rule"):
        compute_scale(x, g, "maxabs")
    with pytest.raises(InputError):
        compute_scale(np.zeros(0, np.float32), g)
    tiny = np.float32([1e-45, -1e-45])  # absmax / scale at the edge of float32
    s = compute_scale(tiny, g)
    assert np.isfinite(s) and s > 0
