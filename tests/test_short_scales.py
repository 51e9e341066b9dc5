"""Short scales: a file stores, for a small layer's step, a float32 scale of few mantissa bits
that quantizes it to the same symbols with no larger squared error
(``co3cli.scales.short_scales``), in the short form of a ``GRC`` block's scales section
(``co3cli.container.gcompact``): exact round trips, the smaller form chosen, every cut or lie
refused in one line."""

import json
from pathlib import Path

import numpy as np
import pytest

from co3cli.codec import compress, decompress
from co3cli.container import open_co3
from co3cli.container.gcompact import SHORT, pack_scales, read_scales
from co3cli.dump import Dump, write_dump
from co3cli.errors import CorruptDataError
from co3cli.formats import get_grid
from co3cli.quantize import dequantize, quantize, quantize_rows
from co3cli.scales import compute_scale, short_scale, short_scales

GRIDS = ["fp8-e5m2", "fp8-e4m3", "fp4-co3", "uniform4"]


def _mantissa_bits(s) -> int:
    m = int(np.array(s, dtype=np.float32).view(np.uint32)) & ((1 << 23) - 1)
    return 0 if m == 0 else 23 - ((m & -m).bit_length() - 1)


def _sse(x, sym, grid, s) -> float:
    return float(((x.astype(np.float64) - dequantize(sym, grid, s)) ** 2).sum())


def _tensors(seed: int, count: int = 12):
    rng = np.random.default_rng(seed)
    for k in range(count):
        n = int(rng.integers(1, 3000))
        yield (rng.laplace(size=n) * 10.0 ** rng.uniform(-6, 1)).astype(np.float32)


@pytest.mark.parametrize("fmt", GRIDS)
def test_the_short_scale_keeps_the_symbols_and_never_adds_error(fmt):
    grid = get_grid(fmt)
    saved = 0
    for x in _tensors(GRIDS.index(fmt)):
        s = compute_scale(x, grid)
        sym = quantize(x, grid, s)
        c = short_scale(x, grid, s, sym)
        assert c.dtype == np.float32 and c > 0
        assert np.array_equal(quantize(x, grid, c), sym)
        assert _sse(x, sym, grid, c) <= _sse(x, sym, grid, s)
        assert _mantissa_bits(c) <= _mantissa_bits(s)
        saved += _mantissa_bits(s) - _mantissa_bits(c)
    assert saved >= 12 * 4  # tensors of at most a few thousand entries: several bits each


def test_the_bisection_keeps_about_as_few_bits_as_a_scan_of_every_count():
    # a scan of k = 0..23 finds the fewest; the bisection may settle on more where the float32
    # rounding of the reconstruction makes a longer k fail (rare: a few scales in a hundred)
    grid = get_grid("fp8-e5m2")
    scan_bits = found_bits = 0
    for x in _tensors(7, 40):
        s = compute_scale(x, grid)
        sym = quantize(x, grid, s)
        bits = int(np.array(s, dtype=np.float32).view(np.uint32))
        limit = _sse(x, sym, grid, s)
        cands = [((bits >> (23 - k)) << (23 - k), ((bits >> (23 - k)) + 1) << (23 - k))
                 for k in range(24)]
        fewest = next(k for k in range(24) if any(
            np.array_equal(quantize(x, grid, c), sym) and _sse(x, sym, grid, c) <= limit
            for c in (np.array(b, dtype=np.uint32).view(np.float32)[()] for b in cands[k])))
        got = _mantissa_bits(short_scale(x, grid, s, sym))
        assert min(fewest, _mantissa_bits(s)) <= got <= _mantissa_bits(s)
        scan_bits, found_bits = scan_bits + min(fewest, _mantissa_bits(s)), found_bits + got
    assert found_bits <= 1.15 * scan_bits


@pytest.mark.parametrize("fmt", ["fp8.2-b127-ieee", "fp8-e5m2"])
def test_a_candidate_whose_products_overflow_is_passed_over(fmt, tmp_path):
    # a grid whose top is near float32's largest: a scale above the rule's overflows x * scale
    from test_codec import check_lossless

    grid = get_grid(fmt)
    x = (np.arange(1, 9, dtype=np.float32) / 2)[None, :].repeat(3, axis=0)
    s = np.array([compute_scale(r, grid) for r in x], dtype=np.float32)
    c = short_scales(x, grid, s, quantize_rows(x, grid, s))
    assert np.array_equal(quantize_rows(x, grid, c), quantize_rows(x, grid, s))
    layers = {f"l{k}.bias": (x * (k + 1), (8,)) for k in range(4)}
    write_dump(tmp_path / "d.h5", layers, steps=np.arange(3))
    compress(tmp_path / "d.h5", tmp_path / "d.co3", format=fmt, threads=1)
    decompress(tmp_path / "d.co3", tmp_path / "back.h5")
    check_lossless(tmp_path / "d.h5", tmp_path / "d.co3", tmp_path / "back.h5", fmt, None)


def test_a_subnormal_scale_is_kept_or_shortened_never_refused():
    grid = get_grid("fp8-e5m2")
    x = np.float32([1e-40, -3e-40, 2e-40])
    s = np.float32(1e-40)
    sym = quantize(x, grid, s)
    c = short_scale(x, grid, s, sym)
    assert c > 0 and np.array_equal(quantize(x, grid, c), sym)


def test_a_layers_steps_at_once_are_each_steps_own():
    grid = get_grid("fp4-co3")
    rng = np.random.default_rng(5)
    x2 = (rng.laplace(size=(9, 300)) * rng.uniform(0.1, 10, (9, 1))).astype(np.float32)
    s = np.array([compute_scale(x, grid) for x in x2], dtype=np.float32)
    sym = quantize_rows(x2, grid, s)
    assert all(np.array_equal(sym[t], quantize(x2[t], grid, s[t])) for t in range(9))
    got = short_scales(x2, grid, s, sym)
    assert got.dtype == np.float32 and got.tolist() == [
        short_scale(x2[t], grid, s[t], sym[t]) for t in range(9)]


def test_an_all_zero_tensor_keeps_its_scale():
    grid = get_grid("fp8-e5m2")
    x = np.zeros(50, dtype=np.float32)
    s = compute_scale(x, grid)
    assert short_scale(x, grid, s, quantize(x, grid, s)) == s == 1.0


# ---------------------------------------------------------------------------- the short form


def _short_scales(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bits = rng.lognormal(-8, 2, n).astype(np.float32).view(np.uint32)
    keep = rng.integers(0, 24, n)  # mantissa bits kept: 0..23
    drop = (23 - keep).astype(np.uint32)
    return ((bits >> drop) << drop).view(np.float32)


@pytest.mark.parametrize("n", [1, 2, 7, 60, 300])
def test_short_scales_round_trip_bit_for_bit_in_fewer_bytes(n, monkeypatch):
    from co3cli.container import gcompact

    s = _short_scales(n, n)
    b = pack_scales(s)
    assert b[0] & SHORT
    back, pos = read_scales(b + b"xyz", 0, len(b), n, "t")
    assert pos == len(b) and back.tobytes() == s.tobytes()
    monkeypatch.setattr(gcompact, "SCALE_ROWS", 8)  # in pieces: the same bytes and values
    assert pack_scales(s) == b
    back, pos = read_scales(b, 0, len(b), n, "t")
    assert pos == len(b) and back.tobytes() == s.tobytes()
    monkeypatch.undo()
    full = np.random.default_rng(n).lognormal(-8, 2, n).astype(np.float32)
    full = np.where(full.view(np.uint32) & 1, full, np.nextafter(full, np.float32(1)))
    assert not pack_scales(full)[0] & SHORT  # 23 bits each: the plain form is smaller


def test_the_short_form_costs_a_length_code_and_the_kept_bits():
    s = np.float32([0.5, 0.75, 1.0, 0.625])  # mantissa bits 0, 1, 0, 2
    b = pack_scales(s)
    # width 2 (exponent differences 0, 0, +1, -1: zigzag 0, 0, 2, 1), 4-bit codes, 3 bits kept
    assert b[0] == SHORT | 2 and len(b) == 3 + -(-(4 * (2 + 4) + 3) // 8)
    assert read_scales(b, 0, len(b), 4, "t")[0].tolist() == s.tolist()


def _edits():
    s = _short_scales(9, 3)
    b = pack_scales(s)
    out = {f"cut to {k}": b[:k] for k in range(len(b))}
    out["padding"] = b[:-1] + bytes([b[-1] | 1])  # (9 scales of these: 4 bits of padding)
    out["width"] = bytes([SHORT | 11]) + b[1:]
    longer = bytearray(b)
    longer[3 + (9 * (b[0] & 0x7F)) // 8] |= 0xFF  # length codes up: the mantissas overrun
    out["codes"] = bytes(longer)
    return s, b, out


@pytest.mark.parametrize("edit", sorted(_edits()[2]))
def test_a_cut_or_lying_short_section_is_refused_in_one_line(edit):
    s, _, out = _edits()
    with pytest.raises(CorruptDataError) as e:
        read_scales(out[edit], 0, len(out[edit]), len(s), "t")
    assert "\n" not in str(e.value) and str(e.value).startswith("t:")
    if edit == "padding":
        assert "padded" in str(e.value)


# ---------------------------------------------------------------------------- in files


def test_a_file_stores_short_scales_of_the_same_symbols(tmp_path):
    rng = np.random.default_rng(11)
    layers = {"a.weight": (rng.laplace(size=(3, 96)).astype(np.float32), (8, 12)),
              "a.bias": ((rng.laplace(size=(3, 8)) * 1e-3).astype(np.float32), (8,)),
              "b.weight": (rng.standard_t(3, size=(3, 40)).astype(np.float32), (4, 10))}
    src = tmp_path / "d.h5"
    write_dump(src, layers, steps=np.arange(3), loss=np.float32([2, 1.5, 1]),
               attrs={"task": "t", "layers": json.dumps(list(layers))})
    dst, out = tmp_path / "d.co3", tmp_path / "back.h5"
    compress(str(src), str(dst), threads=1)
    decompress(str(dst), str(out))
    grid = get_grid("fp8-e5m2")
    with open(dst, "rb") as f:
        co3 = open_co3(f)
        scales = {b.name: b.scales for b in co3.layers()}
        assert {b.group for b in co3.layers()} == {0}  # one group block
    saved = 0
    with Dump.open(out) as back:
        for name, (data, _) in layers.items():
            got = back.read_layer(name)
            for t, x in enumerate(data):
                s, c = compute_scale(x, grid), scales[name][t]
                sym = quantize(x, grid, s)
                assert np.array_equal(quantize(x, grid, c), sym)
                assert got[t].tobytes() == dequantize(sym, grid, c).tobytes()
                assert _sse(x, sym, grid, c) <= _sse(x, sym, grid, s)
                saved += _mantissa_bits(s) - _mantissa_bits(c)
    assert saved > 9 * 4


# ---------------------------------------------------------------------------- earlier files

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.mark.parametrize("path", sorted((GOLDEN / "v1.5").glob("*.co3")), ids=lambda p: p.stem)
def test_files_written_before_short_scales_decode_bit_exactly(path, tmp_path):
    """The fixtures as co3cli wrote them before short scales (``tests/golden/v1.5``: 1.5 files
    whose group blocks hold every scale's 23 mantissa bits) decode to what they did, and their
    rewrites (``tests/golden``) carry the same header and the same symbols."""
    from test_golden import _same_dump

    with open(path, "rb") as f:
        c = open_co3(f)
        assert c.version == (1, 5)
        old_header, old = c.header, {b.name: b for b in c.layers()}
    with open(GOLDEN / path.name, "rb") as f:
        c = open_co3(f)
        assert c.header == old_header
        new = {b.name: b for b in c.layers()}
    assert any(not np.array_equal(old[n].scales, new[n].scales) for n in old)
    out = tmp_path / "out.h5"
    decompress(path, out)
    _same_dump(out, path.with_suffix(".h5"))
    grid = get_grid(c.header["format"]["id"])
    with Dump.open(out) as a, Dump.open(GOLDEN / f"{path.stem}.h5") as b:
        for name in a.layers:
            for t, (x, y) in enumerate(zip(a.read_layer(name), b.read_layer(name))):
                assert np.array_equal(quantize(x, grid, old[name].scales[t]),
                                      quantize(y, grid, new[name].scales[t])), name
