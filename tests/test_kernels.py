"""The fast kernels against the kernels they replace (kept as references): same bytes, same
symbols, same error statuses, on random and adversarial inputs."""

import numpy as np
import pytest

from co3cli.coding import ans, ans_kernels, huffman
from co3cli.formats import get_grid
from co3cli.quantize import _get_fp_kernel, _get_kernel, abs_max


def _ans_table(rng, nsym, precision, shape="random"):
    if shape == "one":  # a single symbol owns every slot
        w = np.zeros(nsym)
        w[rng.integers(nsym)] = 1.0
    elif shape == "spiky":  # many frequency-1 symbols next to a huge one
        w = np.full(nsym, 1e-9)
        w[0] = 1.0
    else:
        w = rng.random(nsym) ** 4 + 1e-6
    return ans.AnsTable(ans.quantize_freqs(w, precision), precision)


def _symbols(rng, table, n):
    p = table.freqs / table.freqs.sum()
    return rng.choice(table.nsym, size=n, p=p).astype(np.uint16)


def _old_encode(table, sym):
    out = np.empty(sym.size + 2, dtype=np.uint32)
    start = ans_kernels._encode_kernel(sym, table.freqs, table._cum, table.precision, out)
    return out[start:].tobytes() if start >= 0 else start


def _old_decode(table, words, n):
    out = np.empty(n, dtype=np.uint16)
    st = ans_kernels._decode_kernel(words, table._slot_table(), table.freqs, table._cum,
                            table.precision, out)
    return st, out


def _new_decode(table, words, n):
    out = np.empty(n, dtype=np.uint16)
    coarse, cshift, packed = table._coarse_tables()
    st = ans_kernels._decode_coarse_kernel(words, coarse, cshift, table._slot_table(), packed,
                                   table.precision, out)
    return st, out


@pytest.mark.parametrize("precision", [8, 11, 12, 13, 16, 20, 24])
@pytest.mark.parametrize("shape", ["random", "one", "spiky"])
@pytest.mark.parametrize("n", [0, 1, 7, 4099])
def test_ans_kernels_match_reference(precision, shape, n):
    rng = np.random.default_rng(precision * 1000 + n)
    nsym = 3 if precision == 8 and shape == "spiky" else 255
    table = _ans_table(rng, min(nsym, 1 << precision), precision, shape)
    sym = _symbols(rng, table, n)
    payload = table.encode(sym)
    assert payload == _old_encode(table, sym)
    words = np.frombuffer(payload, dtype="<u4").astype(np.uint32)
    st, out = _new_decode(table, words, n)
    assert (st, out.tolist()) == (0, sym.tolist())
    assert table.decode(payload, n).tolist() == sym.tolist()


def test_ans_encode_reports_the_same_bad_symbol():
    table = ans.AnsTable([0, 128, 128], 8)
    sym = np.array([1, 2, 0, 1, 5], dtype=np.uint16)
    out = np.empty(sym.size + 2, dtype=np.uint32)
    new = ans_kernels._encode_rcp_kernel(sym, table.freqs, *ans_kernels.encoder_reciprocals(
        table.freqs, table._cum, 8), 8, out)
    assert new == _old_encode(table, sym) == -1 - 4  # backwards: the last bad one first


def test_ans_decode_statuses_match_on_damaged_payloads():
    rng = np.random.default_rng(5)
    table = _ans_table(rng, 255, 16)
    sym = _symbols(rng, table, 3000)
    words = np.frombuffer(table.encode(sym), dtype="<u4").astype(np.uint32)
    cases = [words[:-1], words[:2], np.concatenate([words, words[-1:]])]
    for _ in range(60):
        w = words.copy()
        w[rng.integers(w.size)] ^= np.uint32(1 << int(rng.integers(32)))
        cases.append(w)
    for w in cases:
        for n in (sym.size, sym.size - 1, sym.size + 5):
            st_old, out_old = _old_decode(table, w, n)
            st_new, out_new = _new_decode(table, w, n)
            assert st_new == st_old
            if st_old == 0:
                assert out_new.tolist() == out_old.tolist()


def test_reciprocals_are_exact_divisions():
    rng = np.random.default_rng(9)
    for precision in (8, 16, 24):
        M = 1 << precision
        f = np.unique(np.concatenate([[1, 2, 3, M - 1, M], rng.integers(1, M + 1, 200)]))
        cum = rng.integers(0, M, f.size) % (M - f + 1)
        rcp, rshift, bias, cmpl = ans_kernels.encoder_reciprocals(f, cum, precision)
        for i in range(f.size):
            fi, ci = int(f[i]), int(cum[i])
            xs = [ans.STATE_LOW, (fi << (63 - precision)) - 1, fi, fi - 1 + ans.STATE_LOW]
            xs += [int(v) for v in rng.integers(ans.STATE_LOW, fi << (63 - precision), 20,
                                                dtype=np.uint64)]
            for x in xs:
                q = (x * int(rcp[i])) >> 64 >> int(rshift[i])
                assert x + int(bias[i]) + q * int(cmpl[i]) == (x // fi) * M + x % fi + ci


def _huff_case(rng, kind):
    if kind == "maxlen":  # a geometric pmf: codes of every length up to max_len 20
        w = 0.5 ** np.arange(40.0)
        return huffman.HuffmanTable(huffman.huffman_lengths(w, 20), 20)
    if kind == "one":
        return huffman.HuffmanTable(np.array([0, 1, 0]), 16)
    if kind == "incomplete":  # Kraft sum < 1: unused patterns
        return huffman.HuffmanTable(np.array([2, 2, 3, 12, 13]), 16)
    return huffman.HuffmanTable(huffman.huffman_lengths(rng.random(255) ** 6 + 1e-7, 16), 16)


def _huff_both(table, words, n):
    a = np.empty(n, np.uint16)
    ua = huffman._decode_kernel(words, table._decode_table(), table._width, a)
    fast, fbits = table._fast_table()
    c = np.empty(n + 1, np.uint16)
    uc = huffman._decode_pair_kernel(words, table._pair_table(), fbits, fast, table._decode_table(),
                                     table._width, c)
    return (ua, a), (uc, c[:n])


@pytest.mark.parametrize("kind", ["random", "maxlen", "one", "incomplete"])
@pytest.mark.parametrize("n", [0, 1, 33, 5000])
def test_huffman_fast_decoder_matches_reference(kind, n):
    rng = np.random.default_rng(n + 17)
    table = _huff_case(rng, kind)
    used = np.flatnonzero(table.lengths)
    p = np.exp2(-table.lengths[used].astype(float))
    sym = rng.choice(used, size=n, p=p / p.sum()).astype(np.uint16)
    payload, nbits = table.encode(sym)
    assert table.decode(payload, nbits, n).tolist() == sym.tolist()
    padded = payload + bytes(-len(payload) % 4)
    words = np.frombuffer(padded, dtype=">u4").astype(np.uint32)
    (ua, a), (ub, b) = _huff_both(table, words, n)
    assert ua == ub == nbits and a.tolist() == b.tolist()
    for _ in range(20):  # damaged words: the same bit count or the same "unused pattern"
        if words.size == 0:
            break
        w = words.copy()
        w[rng.integers(w.size)] ^= np.uint32(1 << int(rng.integers(32)))
        (ua, a), (ub, b) = _huff_both(table, w, n)
        assert ua == ub
        if ua >= 0:
            assert a.tolist() == b.tolist()


FP_GRIDS = ["fp8-e5m2", "fp8-e4m3", "fp8-143-b10", "fp4-co3", "fp4-e2m1"]


@pytest.mark.parametrize("fmt", FP_GRIDS)
def test_fp_quantizer_matches_reference_kernel(fmt):
    g = get_grid(fmt)
    rng = np.random.default_rng(3)
    mags = np.asarray(g.magnitudes, dtype=np.float64)
    edges = np.asarray(g.edges, dtype=np.float64)
    special = np.concatenate([mags, edges, np.nextafter(edges, 0), np.nextafter(edges, 9e9),
                              [0.0, 2.0 ** g.emin, 1e-45, 1e-39, 1.2e-38, g.max_value * 1.5,
                               3e38]]).astype(np.float32)
    x = np.concatenate([special, -special, rng.standard_normal(9001).astype(np.float32)
                        * np.float32(g.max_value / 3), np.float32([-0.0])])
    x = x[rng.permutation(x.size)]
    for scale in (np.float32(1.0), np.float32(0.37), np.float32(2.0 ** -20)):
        o1, o2 = np.empty(x.size, np.uint16), np.empty(x.size, np.uint16)
        c1, c2 = np.zeros(g.nsym, np.int64), np.zeros(g.nsym, np.int64)
        s = np.float32([scale])
        b1 = _get_kernel()(x[None], s, True, g.man_bits, g.emin, g.K, g.max_value, o1[None], c1)
        b2 = _get_fp_kernel()(x[None], s, g.man_bits, g.emin, g.K, o2[None], c2)
        assert b1 == b2 == 0
        assert o1.tolist() == o2.tolist() and c1.tolist() == c2.tolist()


def test_fp_quantizer_counts_nonfinite_like_the_reference():
    g = get_grid("fp8-e5m2")
    x = np.float32([1.0, np.nan, -np.inf, np.inf, 3e38, -2.0])
    s = np.float32([10.0])
    b = _get_fp_kernel()(x[None], s, g.man_bits, g.emin, g.K,
                         np.empty((1, x.size), np.uint16), np.zeros(g.nsym, np.int64))
    ref = _get_kernel()(x[None], s, True, g.man_bits, g.emin, g.K, g.max_value,
                        np.empty((1, x.size), np.uint16), np.zeros(g.nsym, np.int64))
    assert b == ref == 4


@pytest.mark.parametrize("values", [
    [0.0], [-0.0, -0.0], [-3.5, 2.0, 1e-45], [1.0, np.nan, 5.0], [-np.inf, 1.0],
    list(np.random.default_rng(1).standard_normal(1003)),
])
def test_abs_max_equals_numpy(values):
    x = np.asarray(values, dtype=np.float32)
    got, want = abs_max(x), float(np.max(np.abs(x)))
    assert (np.isnan(got) and np.isnan(want)) or got == want
    assert abs_max(x.astype(np.float64)) == want or np.isnan(want)


@pytest.mark.parametrize("kind", ["random", "maxlen", "one", "incomplete"])
@pytest.mark.parametrize("n", [0, 1, 31, 4097])
def test_huffman_fast_encoder_matches_reference(kind, n):
    rng = np.random.default_rng(n + 3)
    table = _huff_case(rng, kind)
    used = np.flatnonzero(table.lengths)
    sym = rng.choice(used, size=n).astype(np.uint16)
    size = n * table._width // 32 + 1
    ref_out = np.empty(size, np.uint32)
    ref = huffman._encode_kernel(sym, table._enc, ref_out)
    for swap in (False, True):
        out = np.empty(size, np.uint32)
        got = huffman._encode_fast_kernel(sym, table._enc, out, swap)
        assert tuple(int(v) for v in got) == tuple(int(v) for v in ref)
        words = out[: int(got[1])]
        assert (words.byteswap() if swap else words).tolist() == ref_out[: int(ref[1])].tolist()
    bad = np.concatenate([sym, np.array([table.nsym], np.uint16)])
    assert int(huffman._encode_fast_kernel(bad, table._enc, np.empty(size + 1, np.uint32),
                                           True)[0]) == n


# ---------------------------------------------------------------------------------------
# Interleaved rANS (layout 1): the fast 4-lane kernels against the references, and the
# references against a plain-Python model of the documented layout


def _spec_encode(freqs, precision, sym, lanes):
    """The interleaved layout written from the docstring alone, with Python integers."""
    M, L = 1 << precision, ans.STATE_LOW
    cum = [0] + np.cumsum(freqs, dtype=np.int64).tolist()
    xs, words = [L] * lanes, []  # words in the order the encoder emits them
    for i in range(len(sym) - 1, -1, -1):
        s, x = int(sym[i]), xs[i % lanes]
        f = int(freqs[s])
        if x >= f << (63 - precision):
            words.append(x & 0xFFFFFFFF)
            x >>= 32
        xs[i % lanes] = (x // f) * M + x % f + cum[s]
    head = [xs[0] & 0xFFFFFFFF, (xs[0] >> 32) | 1 << 31, lanes | 1 << 8]
    for x in xs[1:]:
        head += [x & 0xFFFFFFFF, x >> 32]
    return np.array(head + words[::-1], dtype="<u4").tobytes()


def _ref_encode(table, sym, lanes):
    out = np.empty(sym.size + 2 * lanes + 1, dtype=np.uint32)
    start = ans_kernels._encode_lanes_ref(sym, table.freqs, table._cum, table.precision, lanes, out)
    return out[start:].tobytes() if start >= 0 else start


def _ref_decode(table, words, n, lut=None):
    lut = table._identity() if lut is None else lut
    out = np.empty(n, dtype=lut.dtype)
    lanes = int(words[2]) & 0xFF
    xs = np.empty(lanes, dtype=np.uint64)
    if not ans_kernels._read_states(words, lanes, xs):
        return 3, out
    st = ans_kernels._decode_lanes_ref(words, 2 * lanes + 1, xs, 0, table._slot_table(), table.freqs,
                                       table._cum, table.precision, lut, out)
    return st, out


def _fast_decode(table, words, n, lut=None):
    lut = table._identity() if lut is None else lut
    out = np.empty(n, dtype=lut.dtype)
    coarse, cshift, packed = table._coarse_tables()
    st = ans_kernels._decode_lanes4(words, coarse, cshift, table._slot_table(), packed, table.freqs,
                                    table._cum, table.precision, lut, out)
    return st, out


@pytest.mark.parametrize("lanes", [2, 3, 4, 7])
@pytest.mark.parametrize("precision", [8, 16, 24])
def test_lane_reference_matches_the_documented_layout(lanes, precision):
    rng = np.random.default_rng(lanes * 100 + precision)
    table = _ans_table(rng, 40, precision)
    for n in (0, 1, lanes - 1, lanes, lanes + 1, 333):
        sym = _symbols(rng, table, n)
        want = _spec_encode(table.freqs, precision, sym, lanes)
        assert _ref_encode(table, sym, lanes) == want
        assert table.encode(sym, lanes=lanes) == want
        assert table.decode(want, n).tolist() == sym.tolist()


@pytest.mark.parametrize("precision", [8, 11, 12, 13, 16, 20, 24])
@pytest.mark.parametrize("shape", ["random", "one", "spiky"])
@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 7, 8, 9, 4099])
def test_four_lane_kernels_match_reference(precision, shape, n):
    rng = np.random.default_rng(precision * 1000 + n + 7)
    nsym = 3 if precision == 8 and shape == "spiky" else 255
    table = _ans_table(rng, min(nsym, 1 << precision), precision, shape)
    sym = _symbols(rng, table, n)
    payload = table.encode(sym, lanes=4)
    assert payload == _ref_encode(table, sym, 4)
    words = np.frombuffer(payload, dtype="<u4").astype(np.uint32)
    lut = rng.standard_normal(table.nsym).astype(np.float32)
    for got in (_fast_decode(table, words, n), _ref_decode(table, words, n)):
        assert got[0] == 0 and got[1].tolist() == sym.tolist()
    for got in (_fast_decode(table, words, n, lut), _ref_decode(table, words, n, lut)):
        assert got[0] == 0 and got[1].view(np.uint32).tolist() == lut[sym].view(np.uint32).tolist()


def test_four_lane_encoder_reports_the_same_bad_symbol():
    table = ans.AnsTable([0, 128, 128], 8)
    rng = np.random.default_rng(2)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        sym = rng.integers(1, 3, n).astype(np.uint16)
        bad = rng.integers(0, n, int(rng.integers(1, 4)))
        sym[bad] = rng.choice([0, 3, 4095, 65535], bad.size)
        got = ans_kernels._encode_lanes4(sym, table._encoder_rows(), np.empty(n + 9, np.uint32))
        assert got == _ref_encode(table, sym, 4) == -1 - int(bad.max())


def test_four_lane_decoder_statuses_match_on_damaged_payloads():
    rng = np.random.default_rng(6)
    table = _ans_table(rng, 255, 16)
    sym = _symbols(rng, table, 3001)
    words = np.frombuffer(table.encode(sym, lanes=4), dtype="<u4").astype(np.uint32)
    cases = [words[:-1], words[:9], words[:-5], np.concatenate([words, words[-1:]])]
    for _ in range(80):
        w = words.copy()
        w[rng.integers(w.size)] ^= np.uint32(1 << int(rng.integers(32)))
        cases.append(w)
    statuses = set()
    for w in cases:
        if (int(w[2]) != 0x104) or not int(w[1]) >> 31:
            continue  # a damaged header: the Python side rejects it (test_coding)
        for n in (sym.size, sym.size - 1, sym.size - 4, sym.size + 5):
            st_ref, out_ref = _ref_decode(table, w, n)
            st_new, out_new = _fast_decode(table, w, n)
            assert st_new == st_ref
            statuses.add(st_ref)
            if st_ref == 0:
                assert out_new.tolist() == out_ref.tolist()
    assert statuses >= {1, 2}


# ctx: the fast encode/decode kernels against the 0.1.0 reference kernel


def _ctx_cases():
    rng = np.random.default_rng(2024)
    for nsym in (1, 2, 3, 4, 11, 16, 247, 255, 4095):
        K = (nsym - 1) // 2
        x = np.arange(nsym) - K
        w = np.exp(-np.abs(x / max(K / 6, 0.5)) ** 0.7)
        for kind in ("prior", "uniform", "structured", "runs"):
            n = int(rng.integers(0, 3000))
            cols = int(rng.integers(1, 80))
            if kind == "prior":
                sym = rng.choice(nsym, n, p=w / w.sum())
            elif kind == "uniform":
                sym = rng.integers(0, nsym, n)
            elif kind == "structured":
                rows = max(n // cols, 1)
                mag = (rng.normal(0, 1, (rows, 1)) + rng.normal(0, 1, (1, cols)) * 2
                       + K / 3).clip(0, nsym - 1 - K).round().astype(np.int64)
                mag[rng.random(mag.shape) < 0.4] = 0
                sym = (K + np.where(rng.random(mag.shape) < 0.5, -1, 1) * mag).clip(0, nsym - 1)
            else:
                sym = np.repeat(rng.choice(nsym, max(n // 50, 1)), 50)
            sym = np.asarray(sym).ravel().astype(np.uint16)
            yield nsym, w, sym, cols, int(rng.integers(4, 256))


@pytest.mark.parametrize("case", list(_ctx_cases()),
                         ids=lambda c: f"nsym{c[0]}-n{c[2].size}-cols{c[3]}")
def test_ctx_fast_kernels_match_reference(case):
    from co3cli.coding.ans import quantize_freqs
    from co3cli.coding.ctx import CtxTable

    nsym, w, sym, cols, limit = case
    table = CtxTable(quantize_freqs(w, 14), 14, limit, model_version=1)
    blob = table.encode(sym, cols)
    assert blob == table._encode(sym, cols, reference=True)
    np.testing.assert_array_equal(table.decode(blob, sym.size, cols), sym)
    np.testing.assert_array_equal(table._decode(blob, sym.size, cols, reference=True), sym)


def test_ctx_fast_decoder_fails_like_the_reference():
    """Same outcome (the same symbols, or an error) on damaged payloads."""
    from co3cli.coding.ctx import CtxTable
    from co3cli.coding.ans import quantize_freqs
    from co3cli.errors import CorruptDataError

    rng = np.random.default_rng(7)
    table = CtxTable(quantize_freqs(np.exp(-np.abs(np.arange(247) - 123) / 15.0), 16), 16,
                     model_version=1)
    sym = rng.choice(247, 4000, p=table.pmf()).astype(np.uint16)
    blob = table.encode(sym, 50)
    for trial in range(400):
        bad = bytearray(blob)
        if trial % 4 == 0:
            bad = bad[:int(rng.integers(len(bad)))]
        else:
            bad[rng.integers(len(bad))] ^= int(rng.integers(1, 256))
        outs = []
        for ref in (False, True):
            try:
                outs.append(table._decode(bytes(bad), sym.size, 50, reference=ref))
            except CorruptDataError as err:
                outs.append(str(err))
        if isinstance(outs[0], str):
            assert outs[0] == outs[1]
        else:
            np.testing.assert_array_equal(outs[0], outs[1])
