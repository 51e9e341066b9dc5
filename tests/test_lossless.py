"""Lossless float mode (``--format f32-lossless | bf16-lossless | f16-lossless``): every bit back.

Round trips over every coder path (raw; rANS at each k, 1 or 16 contexts, both precisions)
with the awkward words (NaN payloads, signalling NaNs, -0.0, Inf, subnormals), whole dumps
through compress/decompress in each stored type, exact consumption (every truncation, an
extra byte, any flipped byte: one CorruptDataError line), a fuzz over payload and table bytes,
and the golden fixtures in tests/golden (made by tests/golden/make_golden_lossless.py).
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from co3cli.coding.lossless import (LAYOUTS, MODE_RAW, LosslessCoder, LosslessTable, candidates,
                                    fit_table)
from co3cli.container import MINOR
from co3cli.errors import CorruptDataError, InputError
from co3cli.formats import LOSSLESS

SPECIAL = {  # sign | exponent | mantissa words that must survive
    "float32": [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FC00001,
                0xFFA5A5A5, 0x7F800001, 0x00000001, 0x807FFFFF, 0x00400000, 0x7F7FFFFF,
                0x3F800000, 0xBF800001],
    "bfloat16": [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7FC1, 0xFFA5, 0x7F81, 0x0001,
                 0x807F, 0x0040, 0x7F7F, 0x3F80, 0xBF81],
    "float16": [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7E01, 0xFEA5, 0x7C01, 0x0001, 0x83FF,
                0x0200, 0x7BFF, 0x3C00, 0xBC01],
}


def gradient_words(dtype: str, steps: int, numel: int, seed: int = 0) -> np.ndarray:
    """Gradient-like words: Laplace values over a few binades, 30 % exact zeros, rows of
    dead inputs, and the special words sprinkled in."""
    rng = np.random.default_rng(seed)
    x = rng.laplace(scale=1e-3, size=(steps, numel)).astype(np.float32)
    x[rng.random((steps, numel)) < 0.3] = 0.0
    x[:, ::7] = 0.0
    if dtype == "float32":
        w = x.view(np.uint32).copy()
    elif dtype == "bfloat16":
        w = (x.view(np.uint32) >> 16).astype(np.uint16)
    else:
        w = x.astype(np.float16).view(np.uint16).copy()
    sp = np.tile(np.array(SPECIAL[dtype], dtype=w.dtype), 3)[:w.size]
    w.reshape(-1)[rng.choice(w.size, sp.size, replace=False)] = sp
    return w


def test_layouts_match_the_formats():
    for fmt in map(LOSSLESS.get, LOSSLESS.ids()):
        lay = LAYOUTS[fmt.dtype]
        assert (lay.exp_bits, lay.man_bits, lay.bits) == (fmt.exp_bits, fmt.man_bits, fmt.bits)


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_every_candidate_round_trips_bit_exactly(dtype):
    layout = LAYOUTS[dtype]
    words = gradient_words(dtype, 2, 2400)  # >= MIN_CONTEXT_ENTRIES: every candidate weighed
    before = words.copy()
    seen = set()
    tables = [t for _, t in candidates(words, layout, cols=40)]
    tables.append(LosslessTable(layout, MODE_RAW))
    for table in tables:
        table = LosslessTable.from_bytes(table.to_bytes(), layout)  # what a reader gets
        seen.add((table.mode, table.k if table.mode else -1, table.contexts if table.mode else 0))
        for row in words:
            body = table.encode(row, cols=40)
            back = table.decode(body, row.size, cols=40)
            assert back.dtype == layout.word_dtype and np.array_equal(back, row)
    assert np.array_equal(words, before)  # the encoder never writes into its input
    assert len(seen) == 2 * (layout.max_k + 1) + 1  # every k, 1 and 16 contexts, raw


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_only_special_words_and_trailing_zero_bits(dtype):
    layout = LAYOUTS[dtype]
    sp = np.array(SPECIAL[dtype] * 5, dtype=layout.word_dtype)[None, :]
    table = fit_table(sp, layout)
    assert np.array_equal(table.decode(table.encode(sp[0]), sp.size), sp[0])
    if dtype == "float32":  # values that came from bfloat16: 16 low bits never coded
        words = gradient_words(dtype, 1, 4000) & np.uint32(0xFFFF0000)
        table = fit_table(words, layout)
        assert table.t >= 16
        body = table.encode(words[0])
        assert len(body) < 4000 * 2 and np.array_equal(table.decode(body, 4000), words[0])


def test_the_fit_beats_order0_where_context_helps_and_stores_tiny_layers_raw():
    layout = LAYOUTS["bfloat16"]
    words = gradient_words("bfloat16", 4, 1 << 15)
    words.reshape(4, -1, 64)[:, :, :32] = 0  # dead inputs: zero columns
    table = fit_table(words, layout, cols=64)
    assert table.contexts == 16
    order0 = min(size for size, t in candidates(words, layout, 64) if t.contexts == 1)
    assert sum(len(table.encode(r, cols=64)) for r in words) + len(table.to_bytes()) < 0.99 * order0
    assert fit_table(words[:, :3], layout).mode == MODE_RAW


def _body(dtype="bfloat16", n=300):
    layout = LAYOUTS[dtype]
    words = gradient_words(dtype, 1, n, seed=3)
    table = fit_table(words, layout, cols=30)
    return table, table.encode(words[0], cols=30), words[0]


def test_exact_consumption_every_truncation_and_extension():
    table, body, row = _body()
    assert table.mode != MODE_RAW
    for cut in range(len(body)):
        with pytest.raises(CorruptDataError):
            table.decode(body[:cut], row.size, cols=30)
    for extra in (b"\0", b"\1", b"\0\0\0\0"):
        with pytest.raises(CorruptDataError):
            table.decode(body + extra, row.size, cols=30)
    with pytest.raises(CorruptDataError):
        table.decode(body, row.size + 1, cols=30)
    raw = LosslessTable(table.layout, MODE_RAW)
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
            out = table.decode(bytes(b), row.size, cols=30)
            assert out.shape == row.shape
        except CorruptDataError:
            caught += 1
    assert caught > 0
    for _ in range(300):
        junk = rng.integers(0, 256, int(rng.integers(0, 80)), dtype=np.uint8).tobytes()
        try:
            table.decode(junk, row.size, cols=30)
        except CorruptDataError:
            pass
    tb = table.to_bytes()
    coder = LosslessCoder("bfloat16", 1)  # version 1 tables
    for cut in range(len(tb)):
        with pytest.raises(InputError):
            coder.table_from_bytes(tb[:cut])
    for _ in range(300):
        b = bytearray(tb)
        b[int(rng.integers(len(b)))] ^= int(rng.integers(1, 256))
        try:
            coder.table_from_bytes(bytes(b))
        except InputError:
            pass


def test_table_values_out_of_range_are_refused():
    from co3cli.varint import uvarints_to_bytes

    head = bytes([1, 1, 1, 0, 0, 12, 1, 0, 0])  # bfloat16, rANS, k=0, t=0, 2**12, 1 context
    ok = LosslessTable.from_bytes(head + uvarints_to_bytes([1]) + uvarints_to_bytes([5, 4095]))
    assert ok.freqs[0, 5] == 4096 and ok.freqs.sum() == 4096
    for gap, f in ((2**63, 4095), (0, 2**62), (2000, 4095), (5, 4094)):
        with pytest.raises(CorruptDataError):
            LosslessTable.from_bytes(head + uvarints_to_bytes([1]) + uvarints_to_bytes([gap, f]))
    with pytest.raises(CorruptDataError):  # a context with more symbols than the alphabet
        LosslessTable.from_bytes(head + uvarints_to_bytes([2**40]))


def write_source(path, layers: dict, steps: int) -> None:
    """A dump of (words, stored type, shape) layers, written with h5py alone."""
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = "co3.gradients/1"
        f.attrs["layers"] = json.dumps(list(layers))
        for name, (words, stored, shape) in layers.items():
            data = words.view(np.float32) if stored == "float32" else \
                words.view(np.float16) if stored == "float16" else words
            ds = f.create_dataset(f"grads/{name}", data=data)
            ds.attrs["shape"] = np.asarray(shape, dtype=np.int64)
            if stored != "float32":
                ds.attrs["dtype"] = stored
        f.create_dataset("steps", data=np.arange(steps, dtype=np.int64))


def read_back(path) -> dict:
    with h5py.File(path, "r") as f:
        return {n: (f["grads"][n][()].view(np.uint32 if f["grads"][n].dtype == np.float32
                                              else np.uint16),
                    str(f["grads"][n].attrs.get("dtype", "float32")))
                for n in json.loads(f.attrs["layers"])}


def mixed_layers(steps: int = 2) -> dict:
    return {"fc.weight": (gradient_words("float32", steps, 1200), "float32", (30, 40)),
            "emb.weight": (gradient_words("bfloat16", steps, 640, 1), "bfloat16", (10, 64)),
            "head.weight": (gradient_words("float16", steps, 320, 2), "float16", (8, 40)),
            "bias": (gradient_words("float32", steps, 5, 4), "float32", (5,))}


def test_dump_round_trip_keeps_every_stored_bit(tmp_path):
    from co3cli.codec import compress, decompress
    from co3cli.inspection import inspect_co3, report_file

    layers = mixed_layers()
    write_source(tmp_path / "src.h5", layers, 2)
    res = compress(tmp_path / "src.h5", tmp_path / "g.co3", format="f32-lossless")
    assert res.entries == 2 * (1200 + 640 + 320 + 5) and res.nbytes == (tmp_path / "g.co3").stat().st_size
    info = inspect_co3(tmp_path / "g.co3", decode=True)
    assert info.header["format"]["id"] == "f32-lossless" and info.version == f"1.{MINOR}"
    rep = report_file(tmp_path / "g.co3")
    assert rep["total"]["bpe"] == pytest.approx(8 * res.nbytes / res.entries)
    decompress(tmp_path / "g.co3", tmp_path / "back.h5")
    back = read_back(tmp_path / "back.h5")
    assert list(back) == list(layers)
    for name, (words, stored, _) in layers.items():
        assert back[name][1] == stored and np.array_equal(back[name][0], words), name


def test_narrow_formats_take_exact_layers_and_refuse_the_rest(tmp_path):
    from co3cli.codec import compress, decompress

    bf = gradient_words("bfloat16", 2, 640, 1)
    f32_of_bf = bf.astype(np.uint32) << 16
    write_source(tmp_path / "bf.h5", {"a": (bf, "bfloat16", (640,)),
                                      "b": (f32_of_bf, "float32", (10, 64))}, 2)
    compress(tmp_path / "bf.h5", tmp_path / "bf.co3", format="bf16-lossless")
    decompress(tmp_path / "bf.co3", tmp_path / "back.h5")
    back = read_back(tmp_path / "back.h5")
    assert np.array_equal(back["a"][0], bf) and np.array_equal(back["b"][0], f32_of_bf)
    assert back["b"][1] == "float32"
    write_source(tmp_path / "f32.h5", {"a": (gradient_words("float32", 2, 50), "float32", (50,))}, 2)
    with pytest.raises(InputError, match="not every value is exactly a bfloat16.*f32-lossless"):
        compress(tmp_path / "f32.h5", tmp_path / "x.co3", format="bf16-lossless")
    with pytest.raises(InputError, match="do not apply"):
        compress(tmp_path / "f32.h5", tmp_path / "x.co3", format="f32-lossless", coder="ans")


def test_cli_compress_inspect_report_decompress(tmp_path, capsys):
    from conftest import run_cli

    write_source(tmp_path / "src.h5", mixed_layers(1), 1)
    code, out, err = run_cli("compress", tmp_path / "src.h5", "-o", tmp_path / "g.co3",
                             "--format", "f32-lossless", "-q", capsys=capsys)
    assert code == 0, err
    code, out, err = run_cli("inspect", tmp_path / "g.co3", "--decode", capsys=capsys)
    assert code == 0 and "format f32-lossless" in out, err
    code, out, err = run_cli("report", tmp_path / "g.co3", "-q", capsys=capsys)
    assert code == 0 and "TOTAL" in out, err
    code, out, err = run_cli("decompress", tmp_path / "g.co3", "-o", tmp_path / "b.h5", "-q",
                             capsys=capsys)
    assert code == 0, err
    blob = bytearray((tmp_path / "g.co3").read_bytes())
    blob[len(blob) // 2] ^= 0x10
    (tmp_path / "bad.co3").write_bytes(bytes(blob))
    code, out, err = run_cli("decompress", tmp_path / "bad.co3", "-o", tmp_path / "c.h5",
                             capsys=capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_corrupt_chunk_inside_a_valid_file_is_one_line(tmp_path):
    """A damaged chunk whose file checksums were recomputed reaches the decoder: it names the
    layer and step."""
    from co3cli.codec import compress, decompress
    from co3cli.container import Co3Writer, open_co3

    write_source(tmp_path / "src.h5", {"w": (gradient_words("bfloat16", 2, 900), "bfloat16",
                                              (30, 30))}, 2)
    compress(tmp_path / "src.h5", tmp_path / "g.co3", format="bf16-lossless")
    with open(tmp_path / "g.co3", "rb") as f:
        co3 = open_co3(f)
        block = co3.read_layer(0)
        header = co3.header
    with open(tmp_path / "bad.co3", "wb") as f:
        w = Co3Writer(f, header)
        w.write_layer(block.meta, block.table, [(1.0, block.bodies[0]), (1.0, block.bodies[1][:-3])])
        w.close()
    with pytest.raises(CorruptDataError, match="layer w step 1"):
        decompress(tmp_path / "bad.co3", tmp_path / "out.h5")


GOLDEN_CASES = ("lossless-f32", "lossless-bf16", "lossless-f16",  # version 1 (level max)
                "lossless2-f32", "lossless2-bf16", "lossless2-f16",  # version 2 (read only)
                "lossless3-f32", "lossless3-bf16", "lossless3-f16",  # version 3 (the default)
                "lossless3-big-f32", "lossless3-big-bf16", "lossless3-big-f16")


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_golden_lossless_decodes_to_its_source_and_re_encodes_to_its_bytes(case, tmp_path,
                                                                           monkeypatch):
    from pathlib import Path

    from co3cli.codec import decompress
    from co3cli.container import open_co3
    from co3cli.lossless import compress_lossless

    here = Path(__file__).resolve().parent / "golden"
    name = case if "big" in case else case.replace("lossless2", "lossless").replace("lossless3",
                                                                                    "lossless")
    src = here / f"{name}-source.h5"
    decompress(here / f"{case}.co3", tmp_path / "back.h5")
    back, orig = read_back(tmp_path / "back.h5"), read_back(src)
    assert list(back) == list(orig)
    for name in orig:
        assert back[name][1] == orig[name][1] and np.array_equal(back[name][0], orig[name][0])
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    version = {"lossless-": 1, "lossless2": 2, "lossless3": 3}[case[:9]]
    compress_lossless(src, tmp_path / "again.co3", format=case.split("-")[-1] + "-lossless",
                      level="max" if version == 1 else "fast", _version=version)
    new, old = (tmp_path / "again.co3").read_bytes(), (here / f"{case}.co3").read_bytes()
    with open(tmp_path / "again.co3", "rb") as f, open(here / f"{case}.co3", "rb") as g:
        a, b = open_co3(f), open_co3(g)
        assert [(x.table, x.bodies) for x in a.layers()] == [(x.table, x.bodies) for x in b.layers()]
        strip = ("co3cli_version", "created")
        assert {k: v for k, v in a.header.items() if k not in strip} == \
            {k: v for k, v in b.header.items() if k not in strip}
        if a.header["co3cli_version"] == b.header["co3cli_version"]:
            assert new == old
