"""Baseline compressors (co3cli.compressors.baselines): round trips, sizes, error properties,
bad parameters and corrupt payloads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from co3cli.errors import CorruptDataError, InputError
from co3cli.compressors import get_compressor

CONFIGS = [
    ("qsgd", {}),
    ("qsgd", {"levels": 1}),
    ("qsgd", {"levels": 37}),
    ("topk", {}),
    ("topk", {"fraction": 0.3}),
    ("topk", {"fraction": 1.0}),
    ("signsgd", {}),
    ("sketch", {}),
    ("sketch", {"rows": 4, "cols": 64, "unsketch": "topk", "k_fraction": 0.1, "seed": 7}),
    ("tinyscript", {}),
    ("tinyscript", {"bits": 1}),
    ("tinyscript", {"bits": 3}),
    ("tinyscript", {"bits": 8}),
]
IDS = [f"{c}-{'-'.join(f'{k}={v}' for k, v in p.items()) or 'default'}" for c, p in CONFIGS]


def grad(n: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).laplace(size=n) * 1e-3).astype(np.float32)


def varint_len(x) -> int:
    return max(1, -(-int(x).bit_length() // 7))


def roundtrip(comp, v, seed=0, send=None, recv=None):
    send = {} if send is None else send
    recv = {} if recv is None else recv
    pk = comp.compress(v, send, np.random.default_rng(seed))
    out = comp.decompress(pk.payload, v.size, recv)
    assert out.dtype == np.float32 and out.shape == v.shape
    assert np.array_equal(out, pk.v_hat)
    assert np.array_equal(np.signbit(out), np.signbit(pk.v_hat))
    return pk


@pytest.mark.parametrize("cid,params", CONFIGS, ids=IDS)
@pytest.mark.parametrize("n", [1, 2, 7, 1000, 20001])
def test_roundtrip_bit_identical(cid, params, n):
    comp = get_compressor(cid, **params)
    pk = roundtrip(comp, grad(n, seed=n))
    assert isinstance(pk.payload, bytes)
    assert np.all(np.isfinite(pk.v_hat))


@pytest.mark.parametrize("cid,params", CONFIGS, ids=IDS)
def test_receiver_state_from_payloads_only_over_rounds(cid, params):
    comp = get_compressor(cid, **params)
    send, recv = {}, {}
    rng = np.random.default_rng(5)
    for r in range(4):  # sizes change between rounds too
        n = 300 if r < 3 else 123
        v = (rng.standard_normal(n) * 10.0 ** rng.integers(-4, 2)).astype(np.float32)
        pk = comp.compress(v, send, rng)
        assert np.array_equal(comp.decompress(pk.payload, n, recv), pk.v_hat)


@pytest.mark.parametrize("cid,params", CONFIGS, ids=IDS)
@pytest.mark.parametrize("n", [1, 9, 500])
def test_all_zero_input(cid, params, n):
    comp = get_compressor(cid, **params)
    pk = roundtrip(comp, np.zeros(n, np.float32))
    assert np.all(pk.v_hat == 0)


@pytest.mark.parametrize("cid,params", CONFIGS, ids=IDS)
def test_single_entry_and_constant(cid, params):
    comp = get_compressor(cid, **params)
    for v in (np.array([-2.5], np.float32), np.array([3e-7], np.float32),
              np.full(50, 0.25, np.float32)):
        roundtrip(comp, v)


@pytest.mark.parametrize("cid,params", CONFIGS, ids=IDS)
def test_deterministic_given_seed(cid, params):
    comp = get_compressor(cid, **params)
    v = grad(3000)
    a = comp.compress(v, {}, np.random.default_rng(11))
    b = comp.compress(v, {}, np.random.default_rng(11))
    assert a.payload == b.payload and np.array_equal(a.v_hat, b.v_hat)
    if not comp.stochastic:
        c = comp.compress(v, {}, np.random.default_rng(12))
        assert c.payload == a.payload


@pytest.mark.parametrize("cid,params", CONFIGS, ids=IDS)
def test_every_truncation_is_corrupt(cid, params):
    comp = get_compressor(cid, **params)
    v = grad(40, seed=3)
    pk = comp.compress(v, {}, np.random.default_rng(0))
    for cut in range(len(pk.payload)):
        with pytest.raises(CorruptDataError):
            comp.decompress(pk.payload[:cut], v.size, {})
    with pytest.raises(CorruptDataError):
        comp.decompress(pk.payload + b"\x00", v.size, {})


@pytest.mark.parametrize("cid,params", CONFIGS, ids=IDS)
def test_random_corruption_never_crashes(cid, params):
    """Flipped bytes either decode to something finite-shaped or raise CorruptDataError."""
    comp = get_compressor(cid, **params)
    v = grad(40, seed=4)
    pk = comp.compress(v, {}, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    for _ in range(60):
        bad = bytearray(pk.payload)
        for i in rng.integers(0, len(bad), size=int(rng.integers(1, 4))):
            bad[i] = int(rng.integers(0, 256))
        try:
            out = comp.decompress(bytes(bad), v.size, {})
        except CorruptDataError:
            continue
        assert out.shape == v.shape and out.dtype == np.float32


# ---------------------------------------------------------------------------------------
# Sizes

@pytest.mark.parametrize("n", [1, 8, 9, 1000])
def test_signsgd_size_and_values(n):
    comp = get_compressor("signsgd")
    v = grad(n, seed=n)
    v[0] = 0.0
    pk = roundtrip(comp, v)
    assert len(pk.payload) == 4 + math.ceil(n / 8)
    scale = np.float32(np.mean(np.abs(v.astype(np.float64))))
    assert np.array_equal(pk.v_hat, np.where(v < 0, -scale, scale).astype(np.float32))
    assert pk.v_hat[0] == scale  # sign(0) -> +1


@pytest.mark.parametrize("params,n,cols", [({}, 1000, 100), ({"width": 0.013}, 1000, 13),
                                           ({"rows": 3, "cols": 50}, 1000, 50),
                                           ({}, 3, 1)])
def test_sketch_size(params, n, cols):
    comp = get_compressor("sketch", **params)
    pk = roundtrip(comp, grad(n))
    assert comp.ncols(n) == cols
    assert len(pk.payload) == 4 * params.get("rows", 5) * cols


@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.5])
def test_topk_keeps_exactly_the_largest(fraction):
    comp = get_compressor("topk", fraction=fraction)
    n = 5000
    v = grad(n, seed=2)
    pk = roundtrip(comp, v)
    k = math.ceil(fraction * n)
    kept = np.flatnonzero(pk.v_hat)
    assert kept.size == k
    assert np.array_equal(pk.v_hat[kept], v[kept])
    assert np.abs(v[kept]).min() >= np.sort(np.abs(v))[::-1][k - 1]
    gaps = np.diff(kept, prepend=-1) - 1
    assert len(pk.payload) == varint_len(k) + sum(varint_len(g) for g in gaps) + 4 * k
    assert pk.entropy_bits is None


def test_qsgd_payload_smaller_than_levels_packed():
    comp = get_compressor("qsgd", levels=4)
    n = 20000
    pk = roundtrip(comp, grad(n))
    assert 8 * len(pk.payload) < n * math.log2(9)
    # within a few bytes of the empirical entropy (the counts header + rANS flush)
    assert 8 * len(pk.payload) <= pk.entropy_bits + 8 * (4 + 9 * 3 + 8) + 0.01 * n


def test_qsgd_zero_norm_payload():
    comp = get_compressor("qsgd")
    pk = roundtrip(comp, np.zeros(10, np.float32))
    assert pk.payload == b"\x00\x00\x00\x00" and pk.entropy_bits is None


def test_tinyscript_size_formula():
    for bits in (1, 2, 3, 5, 8):
        comp = get_compressor("tinyscript", bits=bits)
        n = 1001
        pk = roundtrip(comp, grad(n))
        packed = 1 + 4 * 2 ** (bits - 1) + math.ceil(n * bits / 8)
        if pk.payload[0] == 0:
            assert len(pk.payload) == packed
        else:
            assert pk.payload[0] == 1 and len(pk.payload) < packed


# ---------------------------------------------------------------------------------------
# Error properties

@pytest.mark.parametrize("levels", [1, 3])
def test_qsgd_unbiased(levels):
    comp = get_compressor("qsgd", levels=levels)
    n, draws = 64, 3000
    v = grad(n, seed=9)
    rng = np.random.default_rng(123)
    acc = np.zeros(n)
    acc2 = np.zeros(n)
    for _ in range(draws):
        pk = comp.compress(v, {}, rng)
        acc += pk.v_hat
        acc2 += pk.v_hat.astype(np.float64) ** 2
    mean = acc / draws
    var = acc2 / draws - mean ** 2
    norm = float(np.linalg.norm(v.astype(np.float64)))
    # each entry is a two-point variable, spacing norm / s: variance <= (norm / s)^2 / 4
    se = np.sqrt(np.maximum(var, 0) / draws) + 1e-6 * norm
    assert np.all(np.abs(mean - v) <= 5 * se + 1e-6 * norm)
    assert np.all(var <= (norm / levels) ** 2 / 4 * 1.1)
    # and each draw is on the grid: |v_hat| in {0, norm/s, ..., norm}
    lv = np.abs(pk.v_hat) / np.float32(norm) * levels
    assert np.allclose(lv, np.round(lv), atol=1e-4)
    assert np.all(np.sign(pk.v_hat) * np.sign(v) >= 0)


def test_sketch_median_exact_without_collisions():
    v = grad(10, seed=1)
    for unsketch in ("median", "topk"):
        comp = get_compressor("sketch", cols=1000, unsketch=unsketch, k_fraction=1.0)
        pk = roundtrip(comp, v)
        assert np.array_equal(pk.v_hat, v)


def test_sketch_topk_keeps_k_of_the_median_estimates():
    n = 2000
    v = grad(n, seed=6)
    med = get_compressor("sketch", width=0.5, seed=3)
    top = get_compressor("sketch", width=0.5, seed=3, unsketch="topk", k_fraction=0.05)
    a, b = roundtrip(med, v), roundtrip(top, v)
    assert a.payload == b.payload
    kept = np.flatnonzero(b.v_hat)
    assert kept.size == 100
    assert np.array_equal(b.v_hat[kept], a.v_hat[kept])
    assert np.abs(a.v_hat[kept]).min() >= np.sort(np.abs(a.v_hat))[::-1][99]


def test_sketch_seed_changes_hashes_and_error_shrinks_with_width():
    v = grad(4000, seed=8)
    a = get_compressor("sketch", seed=1).compress(v, {}, None)
    b = get_compressor("sketch", seed=2).compress(v, {}, None)
    assert a.payload != b.payload
    err = [np.mean((get_compressor("sketch", width=w).compress(v, {}, None).v_hat - v) ** 2)
           for w in (0.05, 0.5, 4.0)]
    assert err[0] > err[1] > err[2]


@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_tinyscript_symmetric_and_beats_uniform_on_laplace(bits):
    comp = get_compressor("tinyscript", bits=bits)
    n = 50000
    v = (np.random.default_rng(bits).laplace(size=n) * 0.01).astype(np.float32)
    pk = roundtrip(comp, v)
    lev = np.unique(pk.v_hat)
    assert lev.size == 2 ** bits
    assert np.array_equal(lev, -lev[::-1])
    mse = np.mean((pk.v_hat.astype(np.float64) - v) ** 2)
    # best uniform (mid-rise, symmetric) quantiser with the same number of levels
    L = 2 ** bits
    best = np.inf
    for step in np.abs(v).max() * np.geomspace(1e-3, 2.0, 200) / L:
        q = (np.clip(np.floor(v / step), -L // 2, L // 2 - 1) + 0.5) * step
        best = min(best, np.mean((q - v) ** 2))
    if bits == 1:
        assert mse <= best * 1.001  # one level per side: both are the centroid
    else:
        assert mse < best
    assert pk.entropy_bits is not None and pk.entropy_bits <= n * bits + 1e-6


def test_tinyscript_nearest_level():
    comp = get_compressor("tinyscript", bits=3)
    v = grad(5000, seed=12)
    pk = roundtrip(comp, v)
    lev = np.unique(pk.v_hat).astype(np.float64)
    d = np.abs(v[:, None].astype(np.float64) - lev[None, :])
    err = np.abs(pk.v_hat.astype(np.float64) - v.astype(np.float64))
    assert np.allclose(err, d.min(axis=1), rtol=0, atol=1e-12)


def zero_heavy(n: int, p0: float = 0.45, seed: int = 5) -> np.ndarray:
    """A ReLU-layer-like gradient: ``p0`` of the entries exactly zero."""
    rng = np.random.default_rng(seed)
    v = (rng.laplace(size=n) * 1e-3).astype(np.float32)
    v[rng.random(n) < p0] = 0
    v[:3] = [0.0, -0.0, 0.0][:n]
    return v


@pytest.mark.parametrize("bits", [1, 2, 3])
def test_tinyscript_sends_exact_zeros_as_zero(bits):
    comp = get_compressor("tinyscript", bits=bits)
    v = zero_heavy(20000)
    zero = v == 0
    pk = roundtrip(comp, v)
    assert pk.payload[0] in (2, 3)
    assert np.all(pk.v_hat[zero] == 0) and not np.signbit(pk.v_hat[zero]).any()  # no bias
    # the zeros add nothing: the MSE is that of the nonzero entries alone, which are quantized
    # exactly as a zero-free vector with the same levels would be
    err = (pk.v_hat.astype(np.float64) - v) ** 2
    assert err[zero].sum() == 0.0
    nz = roundtrip(comp, v[~zero])
    assert nz.payload[0] in (0, 1) and np.array_equal(pk.v_hat[~zero], nz.v_hat)
    # the old coding (zeros as the negative innermost level) has pos[0]^2 more per zero
    pos0 = float(np.min(np.abs(nz.v_hat)))
    assert err.mean() < (err.sum() + zero.sum() * pos0 ** 2) / v.size / 1.3


@pytest.mark.parametrize("bits,n", [(2, 20000), (8, 20), (1, 9), (3, 1)])
def test_tinyscript_zero_modes_round_trip(bits, n):
    comp = get_compressor("tinyscript", bits=bits)
    v = zero_heavy(n, p0=0.5, seed=n)
    if n == 1:
        v[:] = 0
    pk = roundtrip(comp, v)
    half = 2 ** (bits - 1)
    mode3 = 1 + 4 * half + -(-n // 8) + -(-int(np.count_nonzero(v)) * bits // 8)
    assert pk.payload[0] == 3 if len(pk.payload) == mode3 else pk.payload[0] == 2
    assert len(pk.payload) <= mode3


def test_tinyscript_zero_modes_refuse_bad_payloads():
    comp = get_compressor("tinyscript", bits=2)
    pk = comp.compress(zero_heavy(20, p0=0.5), {}, np.random.default_rng(0))
    p = bytearray(pk.payload)
    p[0] = 3
    body = 1 + 4 * 2
    with pytest.raises(CorruptDataError):  # mode 3 bitmap: padding bits set
        comp.decompress(bytes(p[:body]) + b"\x00\x00\xff" + bytes(8), 20, {})
    with pytest.raises(CorruptDataError):
        comp.decompress(bytes(p[:body]) + b"\x00", 20, {})  # bitmap truncated
    p[0] = 4
    with pytest.raises(CorruptDataError, match="mode"):
        comp.decompress(bytes(p), 20, {})


# ---------------------------------------------------------------------------------------
# Bad parameters

@pytest.mark.parametrize("cid,params,match", [
    ("qsgd", {"levels": 0}, "levels=0"),
    ("qsgd", {"levels": 2.5}, "levels"),
    ("qsgd", {"levels": True}, "levels"),
    ("qsgd", {"levels": 5000}, r"1\.\.2047"),
    ("topk", {"fraction": 0}, r"fraction=0 must be a number in \(0, 1\]"),
    ("topk", {"fraction": 1.5}, "fraction"),
    ("topk", {"fraction": "a"}, "fraction"),
    ("signsgd", {"scale": 1}, "unknown parameter"),
    ("sketch", {"rows": 0}, "rows"),
    ("sketch", {"cols": 0}, "cols"),
    ("sketch", {"width": -1}, "width"),
    ("sketch", {"unsketch": "mean"}, "unsketch='mean' must be one of median, topk"),
    ("sketch", {"k_fraction": 2}, "k_fraction"),
    ("sketch", {"seed": -1}, "seed"),
    ("tinyscript", {"bits": 0}, r"bits=0 must be an integer in 1\.\.8"),
    ("tinyscript", {"bits": 9}, "bits"),
    ("tinyscript", {"levels": 4}, "unknown parameter"),
])
def test_bad_params(cid, params, match):
    with pytest.raises(InputError, match=match):
        get_compressor(cid, **params)


def test_corrupt_specifics():
    with pytest.raises(CorruptDataError, match="norm"):
        get_compressor("qsgd").decompress(b"\x00\x00\xc0\x7f" + b"\x00" * 12, 4, {})
    with pytest.raises(CorruptDataError, match="trailing"):
        get_compressor("qsgd").decompress(b"\x00" * 5, 4, {})
    with pytest.raises(CorruptDataError, match="count"):
        get_compressor("topk").decompress(b"\x05\x00\x00\x00\x00\x00", 4, {})
    with pytest.raises(CorruptDataError, match="out of range"):
        get_compressor("topk").decompress(b"\x01\x09" + b"\x00" * 4, 4, {})
    with pytest.raises(CorruptDataError, match="padding"):
        get_compressor("signsgd").decompress(b"\x00\x00\x80\x3f\x01", 3, {})
    with pytest.raises(CorruptDataError, match="non-finite"):
        get_compressor("sketch", rows=1, cols=1).decompress(b"\x00\x00\x80\x7f", 3, {})
    with pytest.raises(CorruptDataError, match="mode"):
        get_compressor("tinyscript", bits=1).decompress(b"\x07" + b"\x00" * 5, 4, {})
    with pytest.raises(CorruptDataError, match="levels"):
        get_compressor("tinyscript", bits=1).decompress(b"\x00\x00\x00\x80\xbf\x00", 4, {})


def test_co3_fits_its_table_to_a_sample_of_fit_entries(monkeypatch):
    """The refit's model sees at most ``fit_entries`` entries; the table still codes them all."""
    import co3cli.tables

    seen = []
    real = co3cli.tables.model_weights

    def spy(data, *a, **k):
        seen.append(data.shape)
        return real(data, *a, **k)

    monkeypatch.setattr(co3cli.tables, "model_weights", spy)
    v = np.random.default_rng(0).laplace(size=50_000).astype(np.float32)
    c = get_compressor("co3", format="fp8-e5m2", fit_entries=4096)
    pkt = c.compress(v, {}, None)
    assert seen == [(1, 4096)]
    assert np.array_equal(c.decompress(pkt.payload, v.size, {}), pkt.v_hat)
    with pytest.raises(InputError, match="fit_entries"):
        get_compressor("co3", fit_entries=10)
