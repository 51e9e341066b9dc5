"""Entropy coders: round trips, optimality, information bounds and corruption handling."""

import doctest
import heapq
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from co3cli import detmath
import co3cli.coding
import co3cli.coding.ans
import co3cli.coding.huffman
from co3cli.coding import coder_from_config, get_coder
from co3cli.coding.ans import AnsTable, quantize_freqs, uvarints_from_bytes, uvarints_to_bytes
from co3cli.coding.huffman import HuffmanTable, huffman_lengths
from co3cli.errors import CorruptDataError, InputError

CODER_CONFIGS = [
    {"id": "huffman", "max_len": 16},
    {"id": "huffman", "max_len": 12},
    {"id": "ans", "precision": 16},
    {"id": "ans", "precision": 24},
    {"id": "ans", "precision": 12},
]


def config_id(config):
    return "-".join(str(v) for v in config.values())


def sample(weights, n, rng):
    """n symbols drawn from the pmf proportional to weights, as uint16."""
    p = np.asarray(weights, dtype=float)
    return rng.choice(p.size, size=n, p=p / p.sum()).astype(np.uint16)


def round_trip(table, sym):
    """Encode/decode through the common API; check the input is untouched."""
    before = sym.copy()
    blob = table.encode(sym)
    np.testing.assert_array_equal(sym, before)
    out = table.decode(blob, sym.size)
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, before)
    return blob


def plain_huffman_cost(weights):
    """Expected length (sum w * l) of an unlimited Huffman code: the sum of all merges."""
    heap = [float(w) for w in weights if w > 0]
    if len(heap) == 1:
        return heap[0]
    heapq.heapify(heap)
    cost = 0.0
    while len(heap) > 1:
        merged = heapq.heappop(heap) + heapq.heappop(heap)
        cost += merged
        heapq.heappush(heap, merged)
    return cost


def naive_package_merge(weights, max_len):
    """Textbook package-merge with explicit symbol multisets (small inputs only)."""
    leaves = sorted((w, (i,)) for i, w in enumerate(weights) if w > 0)
    items = list(leaves)
    for _ in range(max_len - 1):
        packages = [(items[k][0] + items[k + 1][0], items[k][1] + items[k + 1][1])
                    for k in range(0, len(items) - 1, 2)]
        items = sorted(leaves + packages, key=lambda item: item[0])
    lengths = np.zeros(len(weights), dtype=int)
    for _, syms in items[: 2 * len(leaves) - 2]:
        for s in syms:
            lengths[s] += 1
    return lengths


# --------------------------------------------------------------------------------------
# Docs


@pytest.mark.parametrize("module", [co3cli.coding, co3cli.coding.ans, co3cli.coding.huffman])
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# --------------------------------------------------------------------------------------
# Round trips


CASES = ["one", "two", "skewed", "gennorm", "full4095", "with_zeros", "empty"]


@pytest.mark.parametrize("config", CODER_CONFIGS, ids=config_id)
@pytest.mark.parametrize("case", CASES)
def test_round_trip_fixed_seeds(config, case):
    rng = np.random.default_rng(len(case) * 1000 + ord(case[0]))
    weights = {
        "one": np.array([0.0, 0.0, 3.0]),
        "two": np.array([1.0, 3.0]),
        "skewed": np.r_[9999.0, np.full(9, 1 / 9)],  # one symbol at 99.99%
        "gennorm": np.exp(-np.abs(np.linspace(-4, 4, 253)) ** 0.8 * 3),
        "full4095": rng.random(4095) + 1e-3,
        "with_zeros": np.where(rng.random(300) < 0.5, 0.0, rng.random(300)),
        "empty": np.array([1.0, 2.0]),
    }[case]
    coder = coder_from_config(config)
    table = coder.table_from_weights(weights)
    n = 0 if case == "empty" else 20_000
    sym = sample(weights, n, rng)
    if case == "skewed":
        sym[:5] = np.arange(5, 10)  # make sure the rare symbols occur
    round_trip(table, sym)
    again = coder.table_from_bytes(table.to_bytes(), weights.size)
    np.testing.assert_array_equal(again.decode(table.encode(sym), n), sym)


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(st.floats(0, 1e6), min_size=1, max_size=300).filter(lambda w: max(w) > 0),
    n=st.integers(0, 3000),
    seed=st.integers(0, 2**32 - 1),
    config=st.sampled_from(CODER_CONFIGS),
)
def test_round_trip_property(weights, n, seed, config):
    weights = np.array(weights)
    table = coder_from_config(config).table_from_weights(weights)
    round_trip(table, sample(weights, n, np.random.default_rng(seed)))


def test_readonly_strided_input():
    table = get_coder("ans").table_from_weights(np.ones(10))
    sym = np.arange(40, dtype=np.uint16) % 10
    view = sym[::2]
    view.flags.writeable = False
    np.testing.assert_array_equal(table.decode(table.encode(view), view.size), sym[::2])


# --------------------------------------------------------------------------------------
# Huffman code lengths


@settings(max_examples=80, deadline=None)
@given(weights=st.lists(st.floats(1e-3, 1e6), min_size=2, max_size=200))
def test_huffman_optimal_when_limit_not_binding(weights):
    lengths = huffman_lengths(np.array(weights), max_len=20)
    cost = float(np.dot(weights, lengths))
    assert cost == pytest.approx(plain_huffman_cost(weights), rel=1e-9)
    # A complete code: Kraft sum exactly 1.
    assert sum(1 << (20 - int(length)) for length in lengths) == 1 << 20


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(st.floats(0, 1e6), min_size=2, max_size=12).filter(
        lambda w: sum(x > 0 for x in w) >= 2),
    max_len=st.integers(1, 6),
)
def test_huffman_limited_matches_naive_package_merge(weights, max_len):
    npos = sum(x > 0 for x in weights)
    if npos > 1 << max_len:
        with pytest.raises(InputError, match="max_len"):
            huffman_lengths(np.array(weights), max_len)
        return
    lengths = huffman_lengths(np.array(weights), max_len)
    assert lengths.max() <= max_len
    assert np.all((lengths == 0) == (np.array(weights) == 0))
    expected = naive_package_merge(weights, max_len)
    assert np.dot(weights, lengths) == pytest.approx(np.dot(weights, expected), rel=1e-12)


def test_huffman_limit_binding_on_fibonacci_weights():
    fib = [1.0, 1.0]
    while len(fib) < 40:
        fib.append(fib[-1] + fib[-2])
    free = huffman_lengths(np.array(fib), max_len=20)
    assert free.max() == 20  # would be 39 without a limit...
    for max_len in (6, 8, 12):
        lengths = huffman_lengths(np.array(fib), max_len)
        assert lengths.max() == max_len
        assert sum(2.0 ** -int(x) for x in lengths) == 1.0


def test_huffman_lengths_edge_cases():
    np.testing.assert_array_equal(huffman_lengths(np.array([0.0, 5.0, 0.0])), [0, 1, 0])
    np.testing.assert_array_equal(huffman_lengths(np.array([1.0, 1.0]), max_len=1), [1, 1])
    with pytest.raises(InputError, match="weights"):
        huffman_lengths(np.zeros(4))
    with pytest.raises(InputError, match="max_len"):
        huffman_lengths(np.ones(5), max_len=2)
    with pytest.raises(InputError, match="max_len"):
        huffman_lengths(np.ones(5), max_len=21)
    with pytest.raises(InputError, match="weights"):
        huffman_lengths(np.array([1.0, np.nan]))
    with pytest.raises(InputError, match="weights"):
        huffman_lengths(np.array([1.0, -1.0]))
    with pytest.raises(InputError, match="weights"):
        huffman_lengths(np.ones(4096))
    lengths = huffman_lengths(np.ones(4095), max_len=12)
    assert set(lengths.tolist()) == {11, 12}


def test_canonical_codes():
    table = HuffmanTable(np.array([2, 1, 3, 3, 0]))
    assert table.codes()[:4].tolist() == [0b10, 0b0, 0b110, 0b111]


def test_huffman_expected_bits_equals_nbits():
    rng = np.random.default_rng(1)
    weights = np.exp(-np.abs(np.linspace(-3, 3, 101)) * 2)
    table = HuffmanTable(huffman_lengths(weights))
    sym = sample(weights, 50_000, rng)
    payload, nbits = table.encode(sym)
    assert nbits == table.expected_bits(np.bincount(sym, minlength=101))
    assert len(payload) == math.ceil(nbits / 8)
    entropy = -np.sum(weights / weights.sum() * np.log2(weights / weights.sum()))
    assert entropy * sym.size * 0.99 <= nbits <= (entropy + 1) * sym.size


# --------------------------------------------------------------------------------------
# rANS frequencies and size


def test_quantize_freqs_basic_properties():
    rng = np.random.default_rng(2)
    for precision in (8, 12, 16, 24):
        weights = np.where(rng.random(250) < 0.2, 0.0, rng.random(250) ** 8)
        freqs = quantize_freqs(weights, precision)
        assert freqs.dtype == np.uint32 and int(freqs.sum()) == 1 << precision
        assert np.all((freqs > 0) == (weights > 0))
    assert quantize_freqs(np.array([0.0, 1.0]), 8).tolist() == [0, 256]
    assert quantize_freqs(np.ones(256), 8).tolist() == [1] * 256
    with pytest.raises(InputError, match="precision"):
        quantize_freqs(np.ones(257), 8)
    for bad in (7, 25, 16.0):
        with pytest.raises(InputError, match="precision"):
            quantize_freqs(np.ones(3), bad)


@settings(max_examples=40, deadline=None)
@given(weights=st.lists(st.floats(1e-6, 1.0), min_size=3, max_size=3))
def test_quantize_freqs_is_optimal_by_brute_force(weights):
    p = np.array(weights) / sum(weights)
    M = 256
    best = min(
        -(p[0] * math.log2(a) + p[1] * math.log2(b) + p[2] * math.log2(M - a - b))
        for a in range(1, M - 1) for b in range(1, M - a)
    )
    f = quantize_freqs(np.array(weights), 8)
    assert -np.dot(p, np.log2(f)) <= best + 1e-9


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 200),
    skew=st.floats(1, 30),
    precision=st.integers(8, 12),
)
def test_quantize_freqs_no_unit_move_improves(seed, n, skew, precision):
    """The cost is separable and convex in each frequency, so the optimum is exactly the
    point where moving one unit from any symbol to any other does not help."""
    w = np.random.default_rng(seed).random(n) ** skew
    if np.count_nonzero(w) > 1 << precision:
        return
    f = quantize_freqs(w, precision).astype(float)
    p = w / w.sum()
    used = f > 0
    gain = p[used] * np.log2((f[used] + 1) / f[used])
    loss = np.where(f[used] > 1, p[used] * np.log2(f[used] / np.maximum(f[used] - 1, 1)), np.inf)
    improvement = gain[None, :] - loss[:, None] * (1 + 1e-9)  # move one unit i -> j
    np.fill_diagonal(improvement, -np.inf)
    assert improvement.max() <= 0


def _quantize_freqs_recomputing(w, precision):
    """quantize_freqs as it was before its swap phase updated only the two changed symbols:
    every swap recomputes every gain and loss (the reference for the incremental version)."""
    M = 1 << precision
    pos = np.flatnonzero(w > 0)
    p = w[pos] / detmath.fsum(w[pos])
    f = np.maximum(1, np.floor(p * M)).astype(np.int64)

    def gain(f):
        return p * detmath.log2((f + 1) / f)

    def loss(f):
        return np.where(f > 1, p * detmath.log2(f / np.maximum(f - 1, 1)), np.inf)

    while (gap := M - int(f.sum())) != 0:
        if gap > 0:
            k = min(gap, f.size)
            f[np.argsort(-gain(f), kind="stable")[:k]] += 1
        else:
            k = min(-gap, int(np.count_nonzero(f > 1)))
            f[np.argsort(loss(f), kind="stable")[:k]] -= 1
    swaps = 0
    while True:
        g, c = gain(f), loss(f)
        j, i = int(np.argmax(g)), int(np.argmin(c))
        if i == j or not g[j] > c[i] * (1 + 1e-12):
            break
        f[j] += 1
        f[i] -= 1
        swaps += 1
    out = np.zeros(w.size, dtype=np.uint32)
    out[pos] = f
    return out, swaps


@pytest.mark.parametrize("beta", [0.3, 0.5, 0.9, 1.5])
@pytest.mark.parametrize("zeros", [0.0, 0.15, 0.5])
@pytest.mark.parametrize("precision", [12, 16])
def test_quantize_freqs_incremental_swaps_match_recomputing(beta, zeros, precision):
    """GenNorm-like fp8 tables (255 symbols, a zero spike), where the swap phase runs for tens
    of swaps: the same frequencies as recomputing everything at every swap."""
    w = np.exp(-np.abs(np.linspace(-12, 12, 255)) ** beta)
    w[127] += zeros * w.sum()
    want, _ = _quantize_freqs_recomputing(w, precision)
    assert np.array_equal(quantize_freqs(w, precision), want)


def test_quantize_freqs_swap_phase_is_exercised():
    w = np.exp(-np.abs(np.linspace(-12, 12, 255)) ** 0.9)
    w[127] += 0.5 * w.sum()
    assert _quantize_freqs_recomputing(w, 12)[1] >= 20  # the case above really swaps


def test_ans_size_close_to_ideal():
    rng = np.random.default_rng(3)
    weights = np.exp(-np.abs(np.linspace(-4, 4, 253)) ** 0.9 * 2.5)
    table = AnsTable(quantize_freqs(weights))
    sym = sample(weights, 1_000_000, rng)
    ideal_bits = table.expected_bits(np.bincount(sym, minlength=253))
    size = len(table.encode(sym))
    assert ideal_bits / 8 - 1 <= size <= ideal_bits / 8 * 1.001 + 12


def test_ans_single_symbol_costs_only_the_state():
    table = AnsTable(np.array([0, 1 << 16, 0]))
    sym = np.ones(100_000, dtype=np.uint16)
    assert len(round_trip(table, sym)) == 8


# --------------------------------------------------------------------------------------
# Bad input to the encoders


@pytest.mark.parametrize("config", CODER_CONFIGS[::2], ids=lambda c: c["id"])
def test_encode_rejects_uncodable_symbols(config):
    table = coder_from_config(config).table_from_weights(np.array([1.0, 0.0, 2.0]))
    for bad in ([0, 1, 2], [0, 3], [4000]):
        sym = np.array(bad, dtype=np.uint16)
        before = sym.copy()
        with pytest.raises(InputError, match="sym"):
            table.encode(sym)
        np.testing.assert_array_equal(sym, before)
    for bad in (np.array([0, 2], dtype=np.int64), [0, 2], np.zeros((2, 2), dtype=np.uint16)):
        with pytest.raises(InputError, match="uint16"):
            table.encode(bad)


def test_table_constructors_validate():
    with pytest.raises(InputError, match="Kraft"):
        HuffmanTable(np.array([1, 1, 1]))
    with pytest.raises(InputError, match="lengths"):
        HuffmanTable(np.array([0, 0]))
    with pytest.raises(InputError, match="lengths"):
        HuffmanTable(np.array([1, 17]), max_len=16)
    with pytest.raises(InputError, match="sum"):
        AnsTable(np.array([1, 2, 3]), 8)
    with pytest.raises(InputError, match="freqs"):
        AnsTable(np.array([-1, 257]), 8)
    with pytest.raises(InputError, match="precision"):
        AnsTable(np.array([1 << 25]), 25)


def test_registry_errors_and_configs():
    with pytest.raises(InputError, match=r"unknown coder 'arith'; allowed: ans, huffman, ctx"):
        get_coder("arith")
    with pytest.raises(InputError, match=r"allowed: max_len"):
        get_coder("huffman", precision=16)
    with pytest.raises(InputError, match=r"allowed: precision"):
        get_coder("ans", max_len=16)
    with pytest.raises(InputError, match="id"):
        coder_from_config({"precision": 16})
    for config in CODER_CONFIGS:
        assert coder_from_config(config).config() == config
    table = get_coder("huffman", max_len=12).table_from_weights(np.ones(5))
    with pytest.raises(CorruptDataError, match="max_len"):
        get_coder("huffman", max_len=16).table_from_bytes(table.to_bytes(), 5)
    table = get_coder("ans", precision=12).table_from_weights(np.ones(5))
    with pytest.raises(CorruptDataError, match="precision"):
        get_coder("ans").table_from_bytes(table.to_bytes(), 5)


# --------------------------------------------------------------------------------------
# Corrupted payloads


@pytest.fixture(scope="module")
def message():
    rng = np.random.default_rng(4)
    weights = np.exp(-np.abs(np.linspace(-3, 3, 61)) * 1.5)
    return weights, sample(weights, 3000, rng)


def test_huffman_raw_structural_corruption_rejected(message):
    weights, sym = message
    table = HuffmanTable(huffman_lengths(weights))
    payload, nbits = table.encode(sym)
    n = sym.size
    cases = [
        (payload[:-1], nbits, n),  # truncated
        (payload + b"\0", nbits, n),  # extra byte
        (payload, nbits + 8, n),  # nbits says more
        (payload, nbits, n + 1),  # one symbol too many
        (payload, nbits, n - 1),  # one symbol too few
        (payload, -1, n),
    ]
    if nbits % 8:
        cases.append((payload[:-1] + bytes([payload[-1] | 1]), nbits, n))  # padding bit set
        cases.append((payload, nbits - 1, n))  # same byte count, one bit short
    for args in cases:
        with pytest.raises(CorruptDataError):
            table.decode(*args)


def test_huffman_unused_pattern_rejected():
    table = HuffmanTable(np.array([1, 2, 0]))  # codes 0, 10; pattern 11 unused
    assert table.decode(b"\x80", 2, 1).tolist() == [1]
    with pytest.raises(CorruptDataError, match="unused"):
        table.decode(b"\xc0", 2, 1)


@pytest.mark.parametrize("coder_id", ["huffman", "ans"])
def test_framed_truncation_and_trailing_bytes_rejected(coder_id, message):
    weights, sym = message
    table = get_coder(coder_id).table_from_weights(weights)
    blob = table.encode(sym)
    for cut in range(len(blob)):  # every truncation
        with pytest.raises(CorruptDataError):
            table.decode(blob[:cut], sym.size)
    for extra in (b"\0", b"\0" * 4, b"\x01\x02\x03\x04"):
        with pytest.raises(CorruptDataError):
            table.decode(blob + extra, sym.size)
    for n in (sym.size - 1, sym.size + 1):
        with pytest.raises(CorruptDataError):
            table.decode(blob, n)


def test_ans_bit_flips_detected(message):
    """Every single-bit flip must raise (or, with probability ~2**-31 each, decode the
    original); we require that of >= 99% of 2000 random flips and in fact see 100%."""
    weights, sym = message
    table = AnsTable(quantize_freqs(weights))
    blob = bytearray(table.encode(sym))
    rng = np.random.default_rng(5)
    ok = 0
    for pos in rng.integers(0, 8 * len(blob), size=2000):
        blob[pos // 8] ^= 1 << (pos % 8)
        try:
            ok += np.array_equal(table.decode(bytes(blob), sym.size), sym)
        except CorruptDataError:
            ok += 1
        blob[pos // 8] ^= 1 << (pos % 8)
    assert ok >= 0.99 * 2000


def test_huffman_bit_flips_raise_only_corrupt_data_error(message):
    """A Huffman code has no redundancy: a flip can turn one codeword into another of the
    same length and decode to other valid data (the container's CRC32 catches that).
    Huffman codes also resynchronise quickly, so only flips that change the total bit
    count, hit padding or an unused pattern are caught (about 15% here).  We require that
    a flip never raises anything else or returns a malformed array."""
    weights, sym = message
    table = get_coder("huffman").table_from_weights(weights)
    blob = bytearray(table.encode(sym))
    rng = np.random.default_rng(6)
    caught = 0
    for pos in rng.integers(0, 8 * len(blob), size=1000):
        blob[pos // 8] ^= 1 << (pos % 8)
        try:
            out = table.decode(bytes(blob), sym.size)
            assert out.shape == sym.shape and out.max() < weights.size
        except CorruptDataError:
            caught += 1
        blob[pos // 8] ^= 1 << (pos % 8)
    assert caught >= 50


# --------------------------------------------------------------------------------------
# Table serialisation


@pytest.mark.parametrize("config", CODER_CONFIGS, ids=config_id)
def test_table_bytes_round_trip_and_truncation(config):
    rng = np.random.default_rng(7)
    weights = np.where(rng.random(253) < 0.1, 0.0, rng.random(253) ** 4)
    coder = coder_from_config(config)
    table = coder.table_from_weights(weights)
    data = table.to_bytes()
    again = coder.table_from_bytes(data, weights.size)
    assert again.to_bytes() == data
    sym = sample(weights, 1000, rng)
    assert again.encode(sym) == table.encode(sym)
    for cut in range(len(data)):
        with pytest.raises(CorruptDataError):
            coder.table_from_bytes(data[:cut], weights.size)
    for extra in (b"\0", b"\x05"):
        with pytest.raises(CorruptDataError):
            coder.table_from_bytes(data + extra, weights.size)
    with pytest.raises(CorruptDataError):
        coder.table_from_bytes(data, weights.size + 7)


def test_huffman_table_bytes_layout_and_bad_values():
    table = HuffmanTable(np.array([1, 2, 2]), max_len=15)
    assert table.to_bytes() == bytes([15, 0x12, 0x20])  # 4 bits each: 1, 2, 2, pad
    assert HuffmanTable.from_bytes(bytes([15, 0x12, 0x20]), 3).lengths.tolist() == [1, 2, 2]
    for bad in (
        bytes([15, 0x11, 0x10]),  # Kraft sum 3/2
        bytes([15, 0x00, 0x00]),  # nothing codable
        bytes([15, 0x12, 0x21]),  # padding bits set
        bytes([3, 0x1F, 0x00]),  # 2 bits each at max_len 3: lengths 0, 1, 3, 3, 3 > nsym
        bytes([0, 0x12, 0x20]),  # max_len 0
        bytes([21, 0x12, 0x20]),  # max_len above the limit
        bytes([8, 0x19, 0x20]),  # length 9 > max_len 8
    ):
        with pytest.raises(CorruptDataError):
            HuffmanTable.from_bytes(bad, 3)


def test_ans_table_every_bit_flip_rejected():
    table = AnsTable(quantize_freqs(np.exp(-np.arange(40) / 6.0), 14), 14)
    data = bytearray(table.to_bytes())
    for pos in range(8 * len(data)):
        data[pos // 8] ^= 1 << (pos % 8)
        with pytest.raises(CorruptDataError):
            AnsTable.from_bytes(bytes(data), 40)
        data[pos // 8] ^= 1 << (pos % 8)


def test_huffman_table_bit_flips_give_error_or_valid_table():
    table = HuffmanTable(huffman_lengths(np.exp(-np.arange(40) / 6.0)))
    data = bytearray(table.to_bytes())
    for pos in range(8 * len(data)):
        data[pos // 8] ^= 1 << (pos % 8)
        try:
            other = HuffmanTable.from_bytes(bytes(data), 40)
            assert sum(2.0 ** -int(x) for x in other.lengths if x) <= 1.0
        except CorruptDataError:
            pass
        data[pos // 8] ^= 1 << (pos % 8)


def test_ans_table_bad_values():
    good = AnsTable(np.array([100, 156]), 8).to_bytes()
    assert AnsTable.from_bytes(good, 2).freqs.tolist() == [100, 156]
    for bad in (
        bytes([8, 100, 155]),  # sum 255
        bytes([8, 0x80 | 100, 0, 0x80 | 28, 1]),  # over-long varint
        bytes([7, 100, 0x80 | 28, 1]),  # precision 7
        bytes([8, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0]),  # 10-byte varint
    ):
        with pytest.raises(CorruptDataError):
            AnsTable.from_bytes(bad, 2)


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.integers(0, 2**63 - 1), max_size=50))
def test_uvarints_round_trip(values):
    data = uvarints_to_bytes(np.array(values, dtype=np.uint64))
    decoded, used = uvarints_from_bytes(data + b"\x07", len(values))
    assert decoded.tolist() == values and used == len(data)
    if values:
        with pytest.raises(CorruptDataError):
            uvarints_from_bytes(data[:-1], len(values))


def test_tables_share_the_common_api():
    for coder_id in ("huffman", "ans"):
        table = get_coder(coder_id).table_from_weights(np.ones(3))
        for name in ("encode", "decode", "expected_bits", "to_bytes", "nsym"):
            assert hasattr(table, name)


# --------------------------------------------------------------------------------------
# Interleaved rANS (layout 1): chosen by size, old payloads still read, rate, corruption


LANES_AT = co3cli.coding.ans.LANE_THRESHOLDS[-1][0]  # the smallest size that gets 4 lanes


@pytest.fixture(scope="module")
def big_message():
    rng = np.random.default_rng(8)
    weights = np.exp(-np.abs(np.linspace(-6, 6, 251)) ** 0.7 * 3)
    table = AnsTable(quantize_freqs(weights))
    return table, sample(weights, LANES_AT + 3, rng)


def _single_state(table, sym):
    from co3cli.coding import ans_kernels

    out = np.empty(sym.size + 2, dtype=np.uint32)
    start = ans_kernels._encode_kernel(sym, table.freqs, table._cum, table.precision, out)
    return out[start:].tobytes()


def test_layout_is_chosen_by_size_alone(big_message):
    from co3cli.coding.ans import lanes_for

    table, sym = big_message
    small = sym[: LANES_AT - 1]
    assert lanes_for(small.size) == 1 and lanes_for(sym.size) == 4
    assert table.encode(small) == _single_state(table, small)  # small layers: today's bytes
    words = np.frombuffer(table.encode(sym), dtype="<u4")
    assert words[1] >> 31 == 1 and words[2] == 4 | 1 << 8
    assert table.encode(sym) == table.encode(sym.copy(), lanes=4)


def test_single_state_payloads_of_large_layers_still_decode(big_message):
    table, sym = big_message
    old = _single_state(table, sym)  # what co3cli wrote before the interleaved layout
    assert np.frombuffer(old, dtype="<u4")[1] >> 31 == 0
    assert table.decode(old, sym.size).tolist() == sym.tolist()
    lut = np.linspace(-1, 1, 251).astype(np.float32)
    assert table.decode_lookup(old, sym.size, lut).tolist() == lut[sym].tolist()


def test_interleaved_rate_costs_at_most_the_extra_states(big_message):
    table, sym = big_message
    single, four = len(_single_state(table, sym)), len(table.encode(sym))
    assert single <= four <= single + 28
    assert four <= single * 1.002
    ideal = table.expected_bits(np.bincount(sym, minlength=251)) / 8
    assert ideal - 1 <= four <= ideal * 1.001 + 36


def test_decode_lookup_equals_dequantize(big_message):
    from co3cli.formats import get_grid
    from co3cli.quantize import dequantize

    grid = get_grid("fp8-e5m2")
    table = AnsTable(quantize_freqs(np.ones(grid.nsym)))
    rng = np.random.default_rng(1)
    for n in (5, LANES_AT + 1):
        sym = rng.integers(0, grid.nsym, n).astype(np.uint16)
        blob, scale = table.encode(sym), np.float32(3.7e4)
        want = dequantize(sym, grid, scale).view(np.uint32)
        lut = (grid.values / scale).astype(np.float32)
        assert table.decode_lookup(blob, n, lut).view(np.uint32).tolist() == want.tolist()
        out = np.empty(n, np.float32)
        assert table.decode_lookup(blob, n, lut, out=out) is out
    with pytest.raises(InputError, match="lut: need one value per symbol"):
        table.decode_lookup(blob, n, lut[:-1])
    with pytest.raises(InputError, match="out: need a contiguous"):
        table.decode_lookup(blob, n, lut, out=np.empty(n, np.float64))


def test_interleaved_structural_corruption_rejected(big_message):
    table, full = big_message
    sym = full[:5000]
    blob = table.encode(sym, lanes=4)
    words = np.frombuffer(blob, dtype="<u4")

    def with_word(i, v):
        w = words.copy()
        w[i] = v
        return w.tobytes()

    cases = [blob[: 4 * k] for k in range(2, 12)] + [blob[:-4], blob + bytes(4), blob + b"\1\2\3\4"]
    cases += [with_word(2, v) for v in (0, 1, 4, 0x101, 0x100 | 33, 0x204, 0x10104, 0x80000104)]
    cases += [with_word(1, words[1] & 0x7FFFFFFF)]  # the flag off: read as one state
    for bad in cases:
        with pytest.raises(CorruptDataError):
            table.decode(bad, sym.size)
    for n in (sym.size - 1, sym.size + 1, 0):
        with pytest.raises(CorruptDataError):
            table.decode(blob, n)
    with pytest.raises(CorruptDataError, match="unknown layout word 0x00000204"):
        table.decode(with_word(2, 0x204), sym.size)
    short = np.frombuffer(table.encode(sym[:3], lanes=4), dtype="<u4").copy()
    short[2] = 0x100 | 32
    with pytest.raises(CorruptDataError, match="cannot hold 32 lane states"):
        table.decode(short.tobytes(), 3)


def test_interleaved_bit_flips_detected(big_message):
    """As test_ans_bit_flips_detected, on a 4-lane payload (header words included)."""
    table, full = big_message
    sym = full[:3000]
    blob = bytearray(table.encode(sym, lanes=4))
    rng = np.random.default_rng(6)
    ok = 0
    positions = np.concatenate([np.arange(8 * 36), rng.integers(0, 8 * len(blob), size=1500)])
    for pos in positions:
        blob[pos // 8] ^= 1 << (pos % 8)
        try:
            ok += np.array_equal(table.decode(bytes(blob), sym.size), sym)
        except CorruptDataError:
            ok += 1
        blob[pos // 8] ^= 1 << (pos % 8)
    assert ok >= 0.99 * positions.size


def test_random_interleaved_garbage_never_hangs_or_passes():
    """Random words behind a valid-looking header for every lane count: each is rejected
    (or, by a ~2**-31 accident, decodes), fast, with only ``n`` outputs allocated."""
    table = AnsTable(quantize_freqs(np.exp(-np.arange(30) / 4.0)))
    rng = np.random.default_rng(11)
    rejected = 0
    for lanes in (2, 3, 4, 5, 8, 32):
        for _ in range(20):
            w = rng.integers(0, 1 << 32, int(rng.integers(2 * lanes + 1, 400)), dtype=np.uint64)
            w = w.astype(np.uint32)
            w[1] |= np.uint32(1 << 31)
            w[2] = lanes | 1 << 8
            try:
                table.decode(w.astype("<u4").tobytes(), int(rng.integers(0, 3000)))
            except CorruptDataError:
                rejected += 1
    assert rejected >= 119


def test_codec_writes_the_interleaved_layout_identically_for_any_thread_count(tmp_path, monkeypatch):
    """A dump with a layer of >= 2**18 entries (and a small one): the same file for
    ``threads`` 1 and 2, its big payloads in layout 1, and a bit-exact round trip."""
    from co3cli.codec import compress, decode_block, decompress, read_co3_setup
    from co3cli.container import open_co3
    from co3cli.dump import Dump, write_dump
    from co3cli.quantize import dequantize, quantize

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # the one timestamp
    rng = np.random.default_rng(3)
    big = (rng.laplace(size=(2, LANES_AT + 5)) * 1e-3).astype(np.float32)
    layers = {"big.weight": (big, (LANES_AT + 5,)),
              "small.bias": (rng.standard_normal((2, 100)).astype(np.float32), (100,))}
    src = tmp_path / "d.h5"
    write_dump(src, layers, steps=np.array([0, 1]), loss=np.float32([1.0, 0.5]), attrs={})
    outs = []
    for threads in (1, 2):
        outs.append(tmp_path / f"t{threads}.co3")
        compress(src, outs[-1], coder="ans", model="gennorm-zi", threads=threads)
    assert outs[0].read_bytes() == outs[1].read_bytes()
    with open(outs[0], "rb") as f:
        blocks = {b.name: b for b in open_co3(f).layers()}
        heads = {name: [np.frombuffer(body[:12], "<u4")[1] >> 31 for body in b.bodies]
                 for name, b in blocks.items()}
        grid, coder = read_co3_setup(open_co3(f).header)
        got = decode_block(blocks["big.weight"], grid, coder, big.shape[1])
    want = [quantize(big[t], grid, blocks["big.weight"].scales[t]) for t in range(2)]
    assert np.array_equal(got, np.stack(want))
    assert heads == {"big.weight": [1, 1], "small.bias": [0]}  # small: its steps joined (1.3)
    decompress(outs[0], tmp_path / "back.h5")
    with Dump.open(tmp_path / "back.h5") as back:
        want = np.stack([dequantize(w, grid, blocks["big.weight"].scales[t]) for t, w in enumerate(want)])
        assert np.array_equal(back.read_layer("big.weight").view(np.uint32), want.view(np.uint32))
