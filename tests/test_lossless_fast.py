"""The fast lossless coder of table version 2 (the default of ``--format *-lossless`` before
version 3; its files still decode, ``compress_lossless(..., _version=2)`` writes it).

Round trips at every k, raw, every step length modulo the 4 lanes, the awkward words (NaN
payloads, -0.0, Inf, subnormals), float32 values that came from bfloat16 (trailing bits);
the reciprocal encoder against exact division for every frequency; exact consumption (every
truncation and extension refused), a fuzz over payload and table bytes, out-of-range tables,
the coder version in the header against the tables, and level ``max`` still writing version 1.
"""

from __future__ import annotations

import numpy as np
import pytest

from co3cli.coding import lossless_kernels as K
from co3cli.coding.lossless import LAYOUTS, LosslessCoder
from co3cli.coding.lossless_fast import MODE_RANS, MODE_RAW, FastTable, fit_fast, normalize
from co3cli.errors import CorruptDataError, InputError
from test_lossless import SPECIAL, gradient_words, read_back, write_source


def _table_at(words, layout, k):
    """A version-2 table at ``k`` for ``words`` (any k, not only the fit's choice)."""
    E, M = layout.exp_bits, layout.man_bits
    flat = words.ravel().astype(np.uint64)
    mag = flat & np.uint64((1 << (layout.bits - 1)) - 1)
    sym = np.where(mag == 0, (1 << (1 + E + k)) + (flat >> np.uint64(layout.bits - 1)),
                   flat >> np.uint64(M - k)).astype(np.int64)
    counts = np.bincount(sym, minlength=(1 << (1 + E + k)) + 2)
    return FastTable(layout, MODE_RANS, k, 0, 12, normalize(counts, 12))


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_every_k_and_raw_round_trip_bit_exactly(dtype):
    layout = LAYOUTS[dtype]
    words = gradient_words(dtype, 3, 1203)
    before = words.copy()
    tables = [_table_at(words, layout, k) for k in range(layout.max_k + 1)]
    tables += [fit_fast(words, layout), FastTable(layout, MODE_RAW)]
    for table in tables:
        table = FastTable.from_bytes(table.to_bytes(), layout)  # what a reader gets
        bodies = table.encode_steps(words)
        assert np.array_equal(table.decode_steps(bodies, words.shape[1]), words)
        for row, body in zip(words, bodies):
            assert table.encode(row) == body
            back = table.decode(body, row.size)
            assert back.dtype == layout.word_dtype and np.array_equal(back, row)
    assert np.array_equal(words, before)  # the encoder never writes into its input


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_every_length_modulo_the_lanes_and_special_words(dtype):
    layout = LAYOUTS[dtype]
    for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 33):
        words = gradient_words(dtype, 2, n, seed=n)
        table = fit_fast(words, layout)
        assert np.array_equal(table.decode_steps(table.encode_steps(words), n), words)
        table = _table_at(words, layout, 0)
        assert np.array_equal(table.decode_steps(table.encode_steps(words), n), words)
    sp = np.array(SPECIAL[dtype] * 5, dtype=layout.word_dtype)[None, :]
    table = _table_at(sp, layout, layout.max_k)
    assert np.array_equal(table.decode(table.encode(sp[0]), sp.size), sp[0])
    zeros = np.zeros((2, 200), dtype=layout.word_dtype)
    zeros[1, ::3] = 1 << (layout.bits - 1)  # -0.0
    table = fit_fast(zeros, layout)
    body = table.encode(zeros[1])
    assert table.mode == MODE_RANS and len(body) < 60 and \
        np.array_equal(table.decode(body, 200), zeros[1])


def test_float32_from_bfloat16_stores_no_trailing_bits():
    layout = LAYOUTS["float32"]
    words = gradient_words("float32", 2, 4000) & np.uint32(0xFFFF0000)
    table = fit_fast(words, layout)
    assert table.t >= 16
    body = table.encode(words[0])
    assert len(body) < 4000 * 2 and np.array_equal(table.decode(body, 4000), words[0])


def test_tiny_layers_are_stored_raw():
    from co3cli.coding.lossless_fast import MIN_CODED

    layout = LAYOUTS["bfloat16"]
    assert fit_fast(gradient_words("bfloat16", 2, 3), layout).mode == MODE_RAW
    assert fit_fast(gradient_words("bfloat16", 1, MIN_CODED - 1), layout).mode == MODE_RAW
    assert fit_fast(gradient_words("bfloat16", 1, 4 * MIN_CODED), layout).mode == MODE_RANS


@pytest.mark.parametrize("precision", [10, 12, 15])
def test_reciprocal_encoder_divides_exactly_for_every_frequency(precision):
    M = 1 << precision
    freqs = np.arange(1, M + 1, dtype=np.uint32)  # every frequency (not a table: only per f)
    cum = np.zeros_like(freqs)
    tabs = [np.empty(M, dtype=np.uint64) for _ in range(5)]
    K.enc_tables2(freqs, cum, precision, *tabs)
    xmax, rcp, rsh, bias, cmpl = tabs
    f = freqs.astype(np.uint64)
    cum = np.uint64(7) * (f < M)  # any start a symbol of that frequency can have
    rng = np.random.default_rng(0)
    low = np.uint64(K.LOW2)
    for x in (np.full(M, low), xmax - np.uint64(1), (xmax >> np.uint64(16)) << np.uint64(16) - 1,
              low + (rng.random(M) * (xmax - low).astype(np.float64)).astype(np.uint64)):
        x = np.maximum(np.minimum(x, xmax - np.uint64(1)), low)  # the encoder's states
        q = ((x * rcp) >> np.uint64(32)) >> rsh
        got = x + bias + cum + q * cmpl  # the encoder's update (tables built at start 0)
        assert np.array_equal(got, (x // f) * np.uint64(M) + x % f + cum)


def _body(n=300):
    layout = LAYOUTS["bfloat16"]
    words = gradient_words("bfloat16", 1, n, seed=3)
    table = fit_fast(words, layout)
    assert table.mode == MODE_RANS
    return table, table.encode(words[0]), words[0]


def test_exact_consumption_every_truncation_and_extension():
    table, body, row = _body()
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
    raw = FastTable(table.layout, MODE_RAW)
    with pytest.raises(CorruptDataError):
        raw.decode(raw.encode(row)[:-1], row.size)


def test_fuzz_payload_and_table_bytes():
    """Flipped bytes and random bodies: a CorruptDataError or (by chance) some words, never
    another exception; flips in the rANS part are caught (its state check)."""
    rng = np.random.default_rng(7)
    table, body, row = _body()
    caught = 0
    for _ in range(300):
        b = bytearray(body)
        i = int(rng.integers(len(b)))
        b[i] ^= int(rng.integers(1, 256))
        try:
            out = table.decode(bytes(b), row.size)
            assert out.shape == row.shape
        except CorruptDataError:
            caught += 1
    assert caught > 0
    for _ in range(300):
        junk = rng.integers(0, 256, int(rng.integers(0, 80)), dtype=np.uint8).tobytes()
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


def test_table_values_out_of_range_are_refused():
    from co3cli.varint import uvarints_to_bytes

    layout = LAYOUTS["bfloat16"]
    head = bytes([2, 1, 1, 0, 0, 12])  # version 2, bfloat16, rANS, k=0, t=0, 2**12
    ok = FastTable.from_bytes(head + uvarints_to_bytes([1, 5, 4095]), layout)
    assert ok.freqs[5] == 4096 and ok.freqs.sum() == 4096
    for gap, f in ((2**63, 4095), (0, 2**62), (2000, 4095), (5, 4094)):
        with pytest.raises(CorruptDataError):
            FastTable.from_bytes(head + uvarints_to_bytes([1, gap, f]), layout)
    for bad_head in (bytes([2, 1, 1, 3, 0, 12]), bytes([2, 1, 1, 0, 8, 12]),
                     bytes([2, 1, 1, 0, 0, 16]), bytes([2, 1, 1, 0, 0, 9]), bytes([2, 1, 2]),
                     bytes([2, 0, 1, 0, 0, 12]), bytes([2, 1, 0, 0])):
        with pytest.raises(CorruptDataError):
            FastTable.from_bytes(bad_head + uvarints_to_bytes([1, 5, 4095]), layout)
    with pytest.raises(CorruptDataError):  # more symbols than the alphabet
        FastTable.from_bytes(head + uvarints_to_bytes([2**40]), layout)
    with pytest.raises(InputError, match="version"):  # a version-1 table in a version-2 file
        LosslessCoder("bfloat16").table_from_bytes(bytes([1, 1, 0]))
    with pytest.raises(InputError, match="version"):
        LosslessCoder("bfloat16", 1).table_from_bytes(bytes([2, 1, 0]))


def test_default_writes_version_3_level_max_version_1_and_version_2_still_reads(tmp_path):
    from co3cli.codec import compress, decompress
    from co3cli.container import open_co3
    from co3cli.lossless import compress_lossless

    layers = {"w": (gradient_words("bfloat16", 2, 2500), "bfloat16", (50, 50)),
              "v": (gradient_words("float32", 2, 300, 1), "float32", (300,))}
    write_source(tmp_path / "src.h5", layers, 2)
    compress(tmp_path / "src.h5", tmp_path / "fast.co3", format="f32-lossless")
    compress_lossless(tmp_path / "src.h5", tmp_path / "max.co3", format="f32-lossless",
                      level="max")
    compress_lossless(tmp_path / "src.h5", tmp_path / "v2.co3", format="f32-lossless",
                      _version=2)
    for name, version in (("fast", 3), ("max", 1), ("v2", 2)):
        with open(tmp_path / f"{name}.co3", "rb") as f:
            co3 = open_co3(f)
            assert co3.header["coder"] == {"id": "lossless-rans", "version": version}
            assert all(b.table[0] == version for b in co3.layers())
        decompress(tmp_path / f"{name}.co3", tmp_path / f"{name}.h5")
        back = read_back(tmp_path / f"{name}.h5")
        for n, (w, stored, _) in layers.items():
            assert back[n][1] == stored and np.array_equal(back[n][0], w)
    with pytest.raises(InputError, match="level"):
        compress_lossless(tmp_path / "src.h5", tmp_path / "x.co3", format="f32-lossless",
                          level="fastest")


def test_header_coder_version_must_match_its_tables(tmp_path):
    from co3cli.codec import decompress
    from co3cli.container import Co3Writer, open_co3
    from co3cli.lossless import compress_lossless

    write_source(tmp_path / "src.h5", {"w": (gradient_words("bfloat16", 2, 900), "bfloat16",
                                              (30, 30))}, 2)
    compress_lossless(tmp_path / "src.h5", tmp_path / "g.co3", format="bf16-lossless",
                      _version=2)
    with open(tmp_path / "g.co3", "rb") as f:
        co3 = open_co3(f)
        block = co3.read_layer(0)
        header = co3.header
    for coder in ({"id": "lossless-rans", "version": 1}, {"id": "lossless-rans", "version": 3},
                  {"id": "lossless-rans", "version": 2, "x": 1}):
        with open(tmp_path / "bad.co3", "wb") as f:
            w = Co3Writer(f, {**header, "coder": coder})
            w.write_layer(block.meta, block.table, [(1.0, b) for b in block.bodies])
            w.close()
        with pytest.raises(CorruptDataError):
            decompress(tmp_path / "bad.co3", tmp_path / "out.h5")


def test_cli_level_picks_the_table_version(tmp_path, capsys):
    from co3cli.container import open_co3
    from co3cli.data import SAMPLE_DATA_DIR
    from conftest import run_cli

    src = SAMPLE_DATA_DIR / "digits-mlp.h5"
    for level, version in (("max", 1), ("fast", 3), (None, 3)):
        out = tmp_path / f"{level}.co3"
        code, _, err = run_cli("compress", src, "-o", out, "--format", "f32-lossless", "-q",
                               *(["--level", level] if level else []), capsys=capsys)
        assert code == 0, err
        with open(out, "rb") as f:
            assert open_co3(f).header["coder"]["version"] == version
    for args, msg in ((["--format", "f32-lossless", "--level", "best"], "lossless level 'best'"),
                      (["--format", "fp8-e5m2", "--level", "max"], "for the lossless formats")):
        code, _, err = run_cli("compress", src, "-o", tmp_path / "x.co3", *args, capsys=capsys)
        assert code != 0 and msg in err and err.count("\n") == 1, err
        assert not (tmp_path / "x.co3").exists()


@pytest.mark.parametrize("version", [2.0, True, "2"])
def test_a_lossless_header_version_that_is_no_integer_is_refused(version, tmp_path, capsys):
    """JSON 2.0 equals 2 but is no table version (it gave a TypeError); true is no version."""
    import json
    from pathlib import Path

    from co3cli.container import Co3Writer, open_co3
    from conftest import run_cli

    golden = Path(__file__).resolve().parent / "golden" / "lossless2-f32.co3"
    with open(golden, "rb") as f:
        c = open_co3(f)
        blocks, h = list(c.layers()), json.loads(json.dumps(c.header))
    h["coder"]["version"] = version
    with open(tmp_path / "v.co3", "wb") as f:
        w = Co3Writer(f, h)
        for b in blocks:
            w.write_layer(b.meta, b.table, list(zip(b.scales.tolist(), b.bodies)))
        w.close()
    code, _, err = run_cli("decompress", tmp_path / "v.co3", "-o", tmp_path / "v.h5", capsys=capsys)
    assert code == 1 and err.startswith("co3: error:") and err.count("\n") == 1, err
    assert "not one this co3cli reads" in err and not (tmp_path / "v.h5").exists()


# -- the per-layer kernels (fit choice, rounding, tables, framing) keep the bytes ---------------
def _fit_reference(words, layout):
    """The fit as numpy computed it before its kernels (the k loop over adjacent bins)."""
    from co3cli.coding.lossless_fast import PER_CHUNK

    E, M, mag = layout.exp_bits, layout.man_bits, layout.bits - 1
    flat = words.ravel().astype(np.uint64)
    hist = np.bincount((flat >> np.uint64(mag - E - layout.max_k)).astype(np.int64),
                       minlength=1 << (1 + E + layout.max_k))
    zp, zn = int((flat == 0).sum()), int((flat == np.uint64(1 << mag)).sum())
    hist[0] -= zp
    hist[hist.size // 2] -= zn
    man = int(np.bitwise_or.reduce(flat)) & ((1 << M) - 1)
    t0 = M if man == 0 else (man & -man).bit_length() - 1
    best = (words.size * layout.bits / 8 + 3, None)
    for k in range(layout.max_k, -1, -1):
        if k < layout.max_k:
            hist = hist[0::2] + hist[1::2]
        counts = np.concatenate([hist, [zp, zn]])
        c = counts[counts > 0]
        bits = float(c.sum() * np.log2(c.sum()) - (c * np.log2(c)).sum())
        t = min(t0, M - k)
        size = (bits + (words.size - zp - zn) * (M - k - t)) / 8 + 8 + 3 * c.size + \
            words.shape[0] * PER_CHUNK
        if size < best[0]:
            best = (size, (k, t, counts, c.size))
    if best[1] is None:
        return None
    k, t, counts, present = best[1]
    return k, t, counts


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_fit_kernels_choose_what_the_numpy_fit_chose(dtype):
    """k, t, the counts and the rounded frequencies of the kernels are the numpy fit's (the
    bytes of version 2 do not change), with and without zeros in the bins that hold them."""
    layout = LAYOUTS[dtype]
    rng = np.random.default_rng(5)
    cases = [gradient_words(dtype, 3, 1500, seed=s) for s in range(3)]
    dense = gradient_words(dtype, 2, 3000, seed=9)
    dense[dense == 0] = 1  # no zeros: the zero bins are empty (a subnormal in bin 0)
    cases += [dense, dense.copy()]
    cases[-1][0, :5] = 1 << (layout.bits - 1)  # -0.0 only
    cases.append(np.full((2, 400), 1 << (layout.bits - 2), dtype=layout.word_dtype))
    cases.append(rng.integers(0, 1 << layout.bits, (2, 3000)).astype(layout.word_dtype))
    for words in cases:
        got, ref = fit_fast(words, layout), _fit_reference(words, layout)
        if ref is None:
            assert got.mode == MODE_RAW
            continue
        k, t, counts = ref
        assert got.mode == MODE_RANS and (got.k, got.t) == (k, t)
        prec = 12 if np.count_nonzero(counts) <= 1 << 11 else 14
        assert np.array_equal(got.freqs, _normalize_reference(counts, prec))


def _normalize_reference(counts, precision):
    """The rounding as numpy computed it before its kernel (the bytes depend on its ties)."""
    M = 1 << precision
    pos = np.flatnonzero(counts)
    x = counts[pos] * (M / counts[pos].sum())
    f = np.maximum(1, np.floor(x)).astype(np.int64)
    gap = M - int(f.sum())
    if gap > 0:
        f[np.argpartition(f - x, gap - 1)[:gap]] += 1
    while gap < 0:
        room = f - 1
        take = min(-gap, int(np.count_nonzero(room)))
        f[np.argpartition(-room, take - 1)[:take]] -= 1
        gap += take
    out = np.zeros(counts.size, dtype=np.uint32)
    out[pos] = f
    return out


def test_rounding_is_numpys_with_its_ties():
    """Random counts, many equal (ties at the boundary), and the floor of 1 overshooting
    (more rare symbols than slack): the same frequencies as the numpy rounding."""
    rng = np.random.default_rng(11)
    over = 0
    for trial in range(100):
        prec = (10, 12)[trial % 2]
        m = int(rng.integers(1, 1 << prec if trial % 7 == 0 else 300))
        counts = np.zeros(m + int(rng.integers(0, 50)), dtype=np.int64)
        spread = [1, 2, 5, 1000, 10**6][trial % 5]
        counts[rng.choice(counts.size, m, replace=False)] = rng.integers(1, spread + 1, m)
        if trial % 7 == 0:
            counts[int(rng.integers(counts.size))] = 10**7  # one huge, many at the floor
        got = normalize(counts, prec)
        assert got.sum() == 1 << prec and np.array_equal(got, _normalize_reference(counts, prec))
        over += int(np.count_nonzero(counts) > (1 << prec) // 2)
    assert over > 5
    with pytest.raises(InputError, match="cannot hold"):
        normalize(np.ones(1025, dtype=np.int64), 10)


def test_slot_tables_are_the_frequencies_ranges():
    layout = LAYOUTS["float16"]
    words = gradient_words("float16", 2, 3000, seed=4)
    table = fit_fast(words, layout)
    tfb, th = table.slot_tables
    sym = np.repeat(np.arange(table.nsym), table.freqs.astype(np.int64))
    assert np.array_equal(tfb & 0xFFFF, table.freqs[sym])
    assert np.array_equal(tfb >> 16, np.arange(1 << table.precision) - table.cum[sym])
    zero = sym >= table.zbase
    assert np.array_equal(th[zero], (sym[zero] - table.zbase).astype(np.uint32) << 15)
    assert np.array_equal(th[~zero], (sym[~zero].astype(np.uint32) << (15 - table.ek)) |
                          np.uint32(table.width))


def test_framing_refuses_bad_length_varints_and_raw_lengths():
    table, body, row = _body()
    n = row.size
    for bad in (b"", b"\x80", b"\x80\x00" + body[1:], b"\xff" * 9 + body[1:], b"\xff" * 12):
        with pytest.raises(CorruptDataError, match="step 0"):
            table.decode(bad, n)
    with pytest.raises(CorruptDataError, match="step 2: lossless chunk"):
        table.decode_steps([body, body, body + b"\0"], n)
    bodies = table.encode_steps(np.stack([row, row[::-1]]))
    assert bodies[0] == body and np.array_equal(table.decode_steps(bodies, n)[1], row[::-1])
    raw = FastTable(table.layout, MODE_RAW)
    steps = np.stack([row, row[::-1], row])
    good = raw.encode_steps(steps)
    assert np.array_equal(raw.decode_steps(good, n), steps)
    for r in range(3):
        bad = list(good)
        bad[r] = bad[r][:-1]
        with pytest.raises(CorruptDataError, match=f"step {r}: lossless raw chunk"):
            raw.decode_steps(bad, n)
    assert raw.decode_steps([], n).shape == (0, n)


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_kernel_and_numpy_copies_of_chunk_parts_agree(dtype, monkeypatch):
    """Steps from MEMCPY_FROM entries have their parts joined and split by numpy, shorter ones
    by kernels: the same bodies and words either way, and the same refusals."""
    import co3cli.coding.lossless_fast as F

    layout = LAYOUTS[dtype]
    words = gradient_words(dtype, 3, 1001, seed=2)
    table = fit_fast(words, layout)
    got = {}
    for cut, batch in ((1, 1), (1, 10**9), (10**9, 1)):  # every step by numpy (one step or
        # every step copied at a time), every step by kernels
        monkeypatch.setattr(F, "MEMCPY_FROM", cut)
        monkeypatch.setattr(F, "COPY_BATCH", batch)
        bodies = table.encode_steps(words)
        assert np.array_equal(table.decode_steps(bodies, words.shape[1]), words)
        for bad in ([bodies[0], bodies[1][:-1], bodies[2]], [bodies[0] + b"\0"] + bodies[1:],
                    [bodies[0], bodies[1], bodies[2][:20]]):
            with pytest.raises(CorruptDataError, match="step"):
                table.decode_steps(bad, words.shape[1])
        flipped = bytearray(bodies[1])
        flipped[30] ^= 0x55
        try:
            back = table.decode_steps([bodies[0], bytes(flipped), bodies[2]], words.shape[1])
            assert not np.array_equal(back, words)
        except CorruptDataError:
            pass
        got[cut, batch] = bodies
    assert got[1, 1] == got[1, 10**9] == got[10**9, 1]
