"""The pair coder (table version 3, the default of ``--format *-lossless``).

Round trips over every split (top mantissa bit or not, the sign in the symbol or raw, +-0
apart or not) at every precision, every step length around the lanes and the 32-value
blocks of the raw bits, the awkward words (NaN payloads, -0.0, Inf, subnormals), float32
values that came from bfloat16, empty and one-entry steps; the fit (raw when smaller,
compact mode from the +-0 words, wide exponent ranges); exact consumption (every truncation
and extension refused), a fuzz over payload, table and word bytes, out-of-range tables, the
rounding and the reciprocal encoder against exact arithmetic. The golden files are in
tests/test_lossless.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from co3cli.coding import lossless_pair_fit as F
from co3cli.coding import lossless_pair_kernels as K
from co3cli.coding.lossless import LAYOUTS, LosslessCoder
from co3cli.coding.lossless_pairs import (MIN_CODED, MODE_PAIRS, MODE_RAW, PairTable, fit_encode,
                                          fit_pairs)
from co3cli.errors import CorruptDataError, InputError
from co3cli.varint import uvarints_to_bytes
from test_lossless import SPECIAL, gradient_words


def ref_split(words, layout, k, s, compact, t=0):
    """(symbols, raw values, has raw bits) of every word, in numpy (the module docstring's
    split, written again)."""
    bits, E = layout.bits, layout.exp_bits
    w = words.astype(np.uint64)
    wb = bits - t
    v = w >> np.uint64(t)
    if not s:  # the sign raw, rotated to bit 0
        v = ((v << np.uint64(1)) | (v >> np.uint64(wb - 1))) & np.uint64((1 << wb) - 1)
    S = E + k + s
    R = bits - t - S
    sym, raw = v >> np.uint64(R), v & np.uint64((1 << R) - 1)
    nz = np.ones(w.shape, dtype=bool)
    if compact:
        nz = (w & np.uint64((1 << (bits - 1)) - 1)) != 0
        sym = np.where(nz, sym, np.uint64(1 << S) + (w >> np.uint64(bits - 1)))
    return sym.astype(np.int64), raw, nz


def table_at(words, layout, k, s, compact, precision=12, t=0):
    """A version-3 table of any split of ``words`` (not only the fit's choice)."""
    sym, _, _ = ref_split(words, layout, k, s, compact, t)
    syms = np.unique(sym)
    idx = np.searchsorted(syms, sym)
    n = words.shape[1]
    b = idx[:, np.minimum(np.arange(1, n + 1, 2), n - 1)]  # an odd step's last word twice
    pairs = idx[:, 0::2] * syms.size + b
    counts = np.bincount(pairs.ravel(), minlength=syms.size ** 2)
    freqs = np.zeros_like(counts)
    assert F.normalize3(counts, precision, freqs) > 0
    return PairTable(layout, MODE_PAIRS, 1 - s, compact, t, layout.bits - t - layout.exp_bits - k - s,
                     precision, syms, freqs)


def round_trip(table, words):
    table = PairTable.from_bytes(table.to_bytes(), table.layout)  # what a reader gets
    bodies = table.encode_steps(words)
    back = table.decode_steps(bodies, words.shape[1])
    assert back.dtype == table.layout.word_dtype and np.array_equal(back, words)
    return table, bodies


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_every_split_and_precision_round_trips_bit_exactly(dtype):
    layout = LAYOUTS[dtype]
    words = gradient_words(dtype, 3, 1203)
    before = words.copy()
    for k in (0, 1):
        for s in (0, 1):
            for compact in (0, 1):
                for precision in (10, 12, 13, 15):
                    table, bodies = round_trip(table_at(words, layout, k, s, compact, precision),
                                               words)
                    for row, body in zip(words, bodies):
                        assert table.encode(row) == body
                        assert np.array_equal(table.decode(body, row.size), row)
    assert np.array_equal(words, before)  # the encoder never writes into its input


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_every_step_length_around_the_lanes_and_blocks(dtype):
    layout = LAYOUTS[dtype]
    for n in (1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97, 257):
        for steps in (1, 2):
            words = gradient_words(dtype, steps, n, seed=n)
            for compact in (0, 1):
                round_trip(table_at(words, layout, 0, 1, compact), words)
                round_trip(table_at(words, layout, 1, 0, compact), words)


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_special_words_zeros_and_empty_steps(dtype):
    layout = LAYOUTS[dtype]
    sp = np.array(SPECIAL[dtype] * 9, dtype=layout.word_dtype).reshape(3, -1)
    for compact in (0, 1):
        round_trip(table_at(sp, layout, 0, 0, compact), sp)
        round_trip(table_at(sp, layout, 1, 1, compact), sp)
    zeros = np.zeros((2, 300), dtype=layout.word_dtype)
    zeros[1, ::3] = 1 << (layout.bits - 1)  # -0.0
    table, bodies = round_trip(table_at(zeros, layout, 0, 1, 1), zeros)
    assert sum(map(len, bodies)) < 150  # the zeros carry no raw bits
    table = table_at(sp, layout, 0, 1, 1)
    empty = np.zeros((2, 0), dtype=layout.word_dtype)
    assert table.decode_steps(table.encode_steps(empty), 0).shape == (2, 0)
    for words in (empty, sp[:, :1]):  # the fit stores tiny layers raw
        t, bodies = fit_encode(words, layout)
        assert t.mode == MODE_RAW and np.array_equal(t.decode_steps(bodies, words.shape[1]), words)


def test_float32_from_bfloat16_drops_its_trailing_bits():
    layout = LAYOUTS["float32"]
    words = gradient_words("float32", 2, 4000) & np.uint32(0xFFFF0000)
    table, bodies = fit_encode(words, layout)
    assert table.mode == MODE_PAIRS and table.t >= 16
    assert sum(map(len, bodies)) < words.size * 1.2
    assert np.array_equal(table.decode_steps(bodies, 4000), words)
    with pytest.raises(InputError, match="fitted to other data"):  # a dropped bit set
        table.encode_steps(words | np.uint32(1))


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_the_fit_codes_what_it_splits_and_the_general_path_agrees(dtype):
    layout = LAYOUTS[dtype]
    for words in (gradient_words(dtype, 3, 5000), gradient_words(dtype, 2, 40000, seed=1)):
        table, bodies = fit_encode(words, layout)
        assert table.mode == MODE_PAIRS and table.compact  # 30 % exact zeros
        assert table.encode_steps(words) == bodies  # split again through the table's lut
        assert fit_pairs(words, layout).to_bytes() == table.to_bytes()
        assert np.array_equal(table.decode_steps(bodies, words.shape[1]), words)
    dense = gradient_words(dtype, 2, 5000, seed=2)
    dense[(dense & np.array(1 << (layout.bits - 1), dense.dtype)) == dense] |= 1  # no +-0
    table, bodies = fit_encode(dense, layout)
    assert table.mode == MODE_PAIRS and not table.compact
    assert np.array_equal(table.decode_steps(bodies, 5000), dense)


def test_the_fit_stores_raw_what_coding_cannot_shrink_and_small_layers():
    layout = LAYOUTS["bfloat16"]
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 1 << 16, (2, 5000)).astype(np.uint16)  # every exponent, uniform
    assert fit_pairs(noise, layout).mode == MODE_RAW
    assert fit_pairs(gradient_words("bfloat16", 1, MIN_CODED - 1), layout).mode == MODE_RAW
    assert fit_pairs(gradient_words("bfloat16", 1, MIN_CODED), layout).mode == MODE_PAIRS


def test_a_wide_range_of_few_exponents_is_counted_exactly():
    """Exponents far apart (2**-100 .. 2**60): their range would give the fine split more
    than FSTRIDE symbols, so the fit histograms the ones present."""
    layout = LAYOUTS["float32"]
    rng = np.random.default_rng(3)
    x = rng.choice(np.float32([2.0 ** -100, -2.0 ** -50, 1.5, 2.0 ** 60]), (2, 6000))
    x *= 1 + rng.random(x.shape).astype(np.float32)
    words = x.view(np.uint32)
    table, bodies = fit_encode(words, layout)
    assert table.mode == MODE_PAIRS and table.m <= 16
    assert np.array_equal(table.decode_steps(bodies, 6000), words)


def test_fit_estimate_is_close_to_the_bytes():
    layout = LAYOUTS["bfloat16"]
    words = gradient_words("bfloat16", 3, 20000)
    table, bodies = fit_encode(words, layout)
    prm, _, _, _, _, est = F.fit_layer(words, layout.exp_bits, layout.man_bits, 0,
                                       np.array([12, 13]), 1e-3, 8 + 3 * 36)
    actual = sum(map(len, bodies)) + len(table.to_bytes())
    assert abs(est / actual - 1) < 0.02


def _body(compact=1, n=3000):
    layout = LAYOUTS["bfloat16"]
    words = gradient_words("bfloat16", 1, n, seed=3)
    if not compact:
        words[(words & np.uint16(0x7FFF)) == 0] = 1
    table = table_at(words, layout, 0, 1, compact)
    return table, table.encode(words[0]), words[0]


@pytest.mark.parametrize("compact", [0, 1])
def test_exact_consumption_every_truncation_and_extension(compact):
    table, body, row = _body(compact)
    for cut in range(len(body)):
        with pytest.raises(CorruptDataError):
            table.decode(body[:cut], row.size)
    for extra in (b"\0", b"\1", b"\0\0\0\0"):
        with pytest.raises(CorruptDataError):
            table.decode(body + extra, row.size)
    for n in (row.size - 1, row.size + 1):
        with pytest.raises(CorruptDataError):
            table.decode(body, n)
    with pytest.raises(CorruptDataError, match="step 1"):
        table.decode_steps([body, body[:-1]], row.size)
    raw = PairTable(table.layout, MODE_RAW)
    with pytest.raises(CorruptDataError):
        raw.decode(raw.encode(row)[:-1], row.size)


def test_an_odd_step_pads_with_its_last_symbol():
    layout = LAYOUTS["bfloat16"]
    words = gradient_words("bfloat16", 1, 301)
    table = table_at(words, layout, 0, 1, 1)
    body = table.encode(words[0])
    assert np.array_equal(table.decode(body, 301), words[0])
    with pytest.raises(CorruptDataError):  # the same pairs read as 300 words and 1 more pair
        table.decode(body, 302)


def test_fuzz_payload_table_and_word_bytes():
    """Flipped bytes and random bodies: a CorruptDataError or (by chance) some words, never
    another exception; flips in the rANS part are caught (its state check); random words of
    any pattern round-trip through the fit."""
    rng = np.random.default_rng(7)
    for compact in (0, 1):
        table, body, row = _body(compact, 700)
        caught = 0
        for _ in range(300):
            b = bytearray(body)
            i = int(rng.integers(len(b)))
            b[i] ^= int(rng.integers(1, 256))
            try:
                assert table.decode(bytes(b), row.size).shape == row.shape
            except CorruptDataError:
                caught += 1
        assert caught > 0
        for _ in range(300):
            junk = rng.integers(0, 256, int(rng.integers(0, 120)), dtype=np.uint8).tobytes()
            try:
                table.decode(junk, row.size)
            except CorruptDataError:
                pass
    tb = table.to_bytes()
    coder = LosslessCoder("bfloat16")
    for cut in range(len(tb)):
        with pytest.raises(InputError):
            coder.table_from_bytes(tb[:cut])
    for _ in range(300):
        b = bytearray(tb)
        b[int(rng.integers(len(b)))] ^= int(rng.integers(1, 256))
        try:
            t = coder.table_from_bytes(bytes(b))
        except InputError:
            continue
        try:  # a table that parses decodes or refuses, never crashes
            t.decode(body, row.size)
        except CorruptDataError:
            pass
    for dtype, layout in LAYOUTS.items():
        for _ in range(20):
            steps, n = int(rng.integers(1, 4)), int(rng.integers(1, 3000))
            words = rng.integers(0, 1 << layout.bits, (steps, n), dtype=np.uint64)
            bits = rng.choice([0, 1, 2, 3])  # patterns: uniform, few exponents, zeros, specials
            if bits == 1:
                words &= np.uint64(((1 << layout.man_bits) - 1) | (3 << layout.man_bits))
            elif bits == 2:
                words[rng.random(words.shape) < 0.5] = 0
            elif bits == 3:
                flat = words.reshape(-1)
                flat[::7] = rng.choice(np.array(SPECIAL[dtype], dtype=np.uint64), flat[::7].size)
            words = words.astype(layout.word_dtype)
            table, bodies = fit_encode(words, layout)
            back = PairTable.from_bytes(table.to_bytes(), layout).decode_steps(bodies, n)
            assert np.array_equal(back, words)


def test_table_values_out_of_range_are_refused():
    layout = LAYOUTS["bfloat16"]
    head = bytes([3, 1, 1, 1, 0, 8, 12])  # version 3, bfloat16, pairs, rot, t=0, R=8, 2**12
    syms = uvarints_to_bytes([2, 5, 0])  # symbols 5 and 6
    pairs = uvarints_to_bytes([2, 0, 4094, 2, 0])  # pairs 0 and 3 (5,5 and 6,6): 4095 + 1
    ok = PairTable.from_bytes(head + syms + pairs, layout)
    assert ok.m == 2 and ok.freqs.tolist() == [4095, 0, 0, 1]
    for bad in (head + syms + uvarints_to_bytes([2, 0, 4094, 2, 1]),  # sum 4097
                head + syms + uvarints_to_bytes([2, 0, 4094, 3, 0]),  # pair 4 of 2 * 2
                head + syms + uvarints_to_bytes([5, 0, 4094, 2, 0]),  # more pairs than 2 * 2
                head + syms + uvarints_to_bytes([2, 0, 4094, 2, 0]) + b"\0",  # trailing
                head + uvarints_to_bytes([2, 200, 300]) + pairs,  # a symbol past 2**8
                head + uvarints_to_bytes([0]) + pairs,  # no symbols
                head + uvarints_to_bytes([2 ** 40]) + pairs,
                head[:3] + bytes([1, 0, 4, 12]) + uvarints_to_bytes([129] + [0] * 129) + pairs,
                head + syms + uvarints_to_bytes([1, 0, 2 ** 62]),
                head[:3] + bytes([4, 0, 8, 12]) + syms + pairs,  # flags
                head[:3] + bytes([1, 0, 8, 16]) + syms + pairs,  # precision 16
                head[:3] + bytes([1, 0, 8, 9]) + syms + pairs,  # precision 9
                head[:3] + bytes([1, 8, 8, 12]) + syms + pairs,  # t past the mantissa
                head[:3] + bytes([1, 0, 16, 12]) + syms + pairs,  # no symbol bits
                head[:3] + bytes([1, 0, 2, 12]) + syms + pairs,  # 14 symbol bits
                head[:3] + bytes([1, 0, 0, 12]) + syms + pairs,  # rot without raw bits
                bytes([3, 0, 1]) + head[3:] + syms + pairs,  # another layout
                bytes([3, 1, 2]) + head[3:] + syms + pairs,  # unknown mode
                bytes([3, 1, 0, 0])):  # bytes after a raw table
        with pytest.raises(CorruptDataError):
            PairTable.from_bytes(bad, layout)
    with pytest.raises(InputError, match="version"):  # a version-2 table in a version-3 file
        LosslessCoder("bfloat16").table_from_bytes(bytes([2, 1, 0]))
    with pytest.raises(InputError, match="version"):
        LosslessCoder("bfloat16", 2).table_from_bytes(bytes([3, 1, 0]))


def test_a_table_refuses_words_it_cannot_code():
    layout = LAYOUTS["bfloat16"]
    words = gradient_words("bfloat16", 2, 3000)
    table = fit_pairs(words, layout)
    other = words.copy()
    other[0, 0] = 0x7F7F  # the largest finite bfloat16: an exponent the layer never had
    with pytest.raises(InputError, match="fitted to other data"):
        table.encode_steps(other)


@pytest.mark.parametrize("precision", [10, 12, 15])
def test_rounding_sums_to_the_slots_and_keeps_every_count(precision):
    rng = np.random.default_rng(precision)
    M = 1 << precision
    for m in (1, 2, 7, 100, M // 2, M):
        counts = np.zeros(m + 50, dtype=np.int64)
        counts[rng.choice(counts.size, m, replace=False)] = rng.pareto(0.7, m).astype(np.int64) + 1
        freqs = np.zeros_like(counts)
        assert F.normalize3(counts, precision, freqs) == m
        assert freqs.sum() == M and np.all((freqs > 0) == (counts > 0))
        again = np.zeros_like(counts)
        F.normalize3(counts, precision, again)
        assert np.array_equal(freqs, again)
    too_many = np.ones(M + 1, dtype=np.int64)
    assert F.normalize3(too_many, precision, np.zeros_like(too_many)) == -1
    ties = np.array([3, 3, 3], dtype=np.int64)  # equal remainders: the lower index first
    f = np.zeros(3, dtype=np.int64)
    F.normalize3(ties, 2, f)
    assert f.tolist() == [2, 1, 1]


@pytest.mark.parametrize("precision", [10, 12, 15])
def test_reciprocal_encoder_divides_exactly_for_every_frequency(precision):
    M = 1 << precision
    enc = np.empty((M, 2), dtype=np.uint64)
    one = np.empty(2, dtype=np.uint64)
    for f in range(1, M + 1):  # every frequency, as the first pair of a table (start 0)
        K.enc_consts3(np.array([f]), precision, one)
        enc[f - 1] = one
    a, b = enc[:, 0], enc[:, 1]
    f = np.arange(1, M + 1, dtype=np.uint64)
    start = np.zeros(M, dtype=np.uint64)
    xmax = b & np.uint64(0xFFFFFFFF)
    assert np.array_equal(xmax, f << np.uint64(31 - precision))
    rng = np.random.default_rng(0)
    low = np.uint64(K.LOW)
    for x in (np.full(M, low), xmax - np.uint64(1),
              low + (rng.random(M) * (xmax - low).astype(np.float64)).astype(np.uint64)):
        x = np.maximum(np.minimum(x, xmax - np.uint64(1)), low)  # the encoder's states
        q = ((x * (a & np.uint64(0xFFFFFFFF))) >> np.uint64(32)) >> (b >> np.uint64(32))
        got = x + ((a >> np.uint64(32)) & np.uint64(0xFFFF)) + q * (a >> np.uint64(48))
        assert np.array_equal(got, (x // f) * np.uint64(M) + x % f + start)


def test_cli_report_and_inspect_of_coded_layers(tmp_path, capsys):
    """``co3 report`` / ``inspect --decode`` of a version-3 file whose layers are coded (the
    report's reference entropy uses the table's split)."""
    from conftest import run_cli
    from test_lossless import write_source

    layers = {"w": (gradient_words("bfloat16", 2, 5000), "bfloat16", (50, 100)),
              "v": (gradient_words("float16", 2, 70), "float16", (70,))}
    write_source(tmp_path / "src.h5", layers, 2)
    out = tmp_path / "g.co3"
    code, _, err = run_cli("compress", tmp_path / "src.h5", "-o", out, "--format", "f32-lossless",
                           "-q", capsys=capsys)
    assert code == 0, err
    for cmd in (("report",), ("inspect", "--decode")):
        code, o, err = run_cli(cmd[0], out, *cmd[1:], capsys=capsys)
        assert code == 0 and "Traceback" not in err, err
