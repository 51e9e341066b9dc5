"""Compress/decompress: bit-exact round trips, codebooks, the container's integrity checks."""

import io
import struct

import numpy as np
import pytest

from co3cli import codebook as cb
from co3cli.codec import compress, decompress
from co3cli.coding import get_coder
from co3cli.container import open_co3
from co3cli.dump import Dump, write_dump
from co3cli.errors import CorruptDataError, InputError
from co3cli.formats import get_grid
from co3cli.quantize import dequantize, quantize
from co3cli.scales import compute_scale, short_scale
from co3cli.report import report_co3


def read_all(path):
    with Dump.open(path) as d:
        return {n: d.read_layer(n) for n in d.layers}, d.steps.copy(), d.loss


def check_lossless(src, co3, dec, format, scale_rule):
    """decoded == dequantize(quantize(x)) bit for bit, with independently recomputed scales
    (a group block's: the shortest scale of the same symbols, ``co3cli.scales.short_scale``)."""
    grid = get_grid(format)
    layers, steps, loss = read_all(src)
    out, steps2, loss2 = read_all(dec)
    assert list(out) == list(layers)
    np.testing.assert_array_equal(steps, steps2)
    np.testing.assert_array_equal(loss, loss2)
    with Dump.open(dec) as d:
        for name, x in layers.items():
            scales = d.h5[f"co3/scales/{name}"][...]
            for t in range(x.shape[0]):
                s = compute_scale(x[t], grid, scale_rule)
                sym = quantize(x[t], grid, s)
                assert scales[t] in (s, short_scale(x[t], grid, s, sym))
                want = dequantize(sym, grid, scales[t])
                np.testing.assert_array_equal(want.view(np.uint32), out[name][t].view(np.uint32))
            assert tuple(d.shape(name)) == tuple(d.shape(name))


@pytest.mark.parametrize("format,coder,scale", [
    ("fp8-e5m2", "huffman", None), ("fp8-e5m2", "ans", None), ("fp8-e4m3", "ans", "gennorm-mse"),
    ("fp4-co3", "ans", "co3-poly"), ("fp4-co3", "huffman", "gennorm-mse"), ("uniform8", "ans", None),
    ("uniform4-c3", "huffman", None), ("fp4-e2m1", "ans", None), ("fp8-143-b10", "huffman", None),
])
def test_roundtrip_is_bit_exact(dump_path, tmp_path, format, coder, scale):
    before = read_all(dump_path)[0]
    co3, dec = tmp_path / "g.co3", tmp_path / "q.h5"
    res = compress(dump_path, co3, format=format, coder=coder, scale=scale)
    assert res.nbytes == co3.stat().st_size and res.entries == sum(x.size for x in before.values())
    decompress(co3, dec)
    after = read_all(dump_path)[0]
    for n in before:  # the input was not touched
        np.testing.assert_array_equal(before[n], after[n])
    check_lossless(dump_path, co3, dec, format, scale)


@pytest.mark.parametrize("model", ["gennorm-zi", "gennorm2-zi", "gennorm", "normal", "laplace-zi", "dweibull",
                                   "empirical"])
def test_every_model_codes_losslessly(dump_path, tmp_path, model):
    co3, dec = tmp_path / "g.co3", tmp_path / "q.h5"
    compress(dump_path, co3, format="fp8-e4m3", coder="huffman", model=model)
    decompress(co3, dec)
    check_lossless(dump_path, co3, dec, "fp8-e4m3", None)


def test_codebook_reuse_and_staleness(dump_path, tmp_path):
    with Dump.open(dump_path) as d:
        book = cb.build(d, get_grid("fp8-e5m2"), get_coder("huffman", max_len=14), steps=[0])
    path = tmp_path / "book.json"
    with open(path, "wb") as f:
        book.save(f)
    loaded = cb.load(path)
    assert loaded.doc == book.doc and loaded.source["steps"] == [0]
    co3, dec = tmp_path / "g.co3", tmp_path / "q.h5"
    compress(dump_path, co3, format="fp8-e5m2", codebook=path)
    decompress(co3, dec)
    check_lossless(dump_path, co3, dec, "fp8-e5m2", None)
    with open(co3, "rb") as f:
        assert open_co3(f).header["coder"] == {"id": "huffman", "max_len": 14}
    with pytest.raises(InputError, match="format 'fp8-e4m3' conflicts"):
        compress(dump_path, tmp_path / "x.co3", format="fp8-e4m3", codebook=path)
    assert not (tmp_path / "x.co3").exists()


def test_codebook_fixes_format_scale_rule_and_coder(dump_path, tmp_path):
    with Dump.open(dump_path) as d:
        book = cb.build(d, get_grid("fp4-co3"), get_coder("ans"), scale_rule="gennorm-mse")
    path = tmp_path / "book.json"
    with open(path, "wb") as f:
        book.save(f)
    co3, dec = tmp_path / "g.co3", tmp_path / "q.h5"
    compress(dump_path, co3, codebook=path)  # no format, scale or coder given: the book's
    with open(co3, "rb") as f:
        h = open_co3(f).header
    assert (h["format"]["id"], h["scale_rule"], h["coder"]["id"]) == ("fp4-co3", "gennorm-mse", "ans")
    decompress(co3, dec)
    check_lossless(dump_path, co3, dec, "fp4-co3", "gennorm-mse")
    for kwargs, needle in (({"scale": "absmax"}, "scale rule"), ({"coder": "huffman"}, "coder"),
                           ({"model": "normal"}, "model")):
        with pytest.raises(InputError, match=needle):
            compress(dump_path, tmp_path / "x.co3", codebook=path, **kwargs)
    assert not (tmp_path / "x.co3").exists()


def test_fit_sample_sees_every_column():
    """A strided sample whose stride divides the row length would only see some columns."""
    from co3cli.tables import scaled_sample

    rows = np.ones((64, 28 * 28), np.float32)
    rows[:, ::28] = 0  # every 28th column is always zero (like MNIST's border pixels)
    data = np.tile(rows.reshape(1, -1), (72, 1))
    sample = scaled_sample(data, np.ones(72, np.float32))
    assert abs(float(np.mean(sample == 0)) - 1 / 28) < 0.01
    assert np.array_equal(sample, scaled_sample(data, np.ones(72, np.float32)))  # deterministic


def test_outputs_have_normal_permissions(dump_path, tmp_path):
    import os

    compress(dump_path, tmp_path / "g.co3")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "g.co3").stat().st_mode & 0o777 == 0o666 & ~umask


def test_pooled_and_empirical_codebooks(dump_path, tmp_path):
    for model in ("gennorm-zi", "empirical"):
        with Dump.open(dump_path) as d:
            book = cb.build(d, get_grid("fp4-co3"), get_coder("ans"), model=model, pooled=True)
        assert list(book.doc["layers"]) == ["*"]
        path = tmp_path / f"{model}.json"
        with open(path, "wb") as f:
            book.save(f)
        compress(dump_path, tmp_path / "g.co3", format="fp4-co3", codebook=path)
        decompress(tmp_path / "g.co3", tmp_path / "q.h5")
        check_lossless(dump_path, tmp_path / "g.co3", tmp_path / "q.h5", "fp4-co3", None)


def test_codebook_file_checks(dump_path, tmp_path):
    with Dump.open(dump_path) as d:
        book = cb.build(d, get_grid("fp8-e5m2"), get_coder("ans"))
    path = tmp_path / "book.json"
    with open(path, "wb") as f:
        book.save(f)
    text = path.read_text()
    path.write_text(text.replace('"co3.codebook/1"', '"co3.codebook/2"'))
    with pytest.raises(InputError, match="schema"):
        cb.load(path)
    doc = book.doc.copy()
    doc["model"] = "normal"  # edited without updating the checksum
    path.write_text(__import__("json").dumps(doc))
    with pytest.raises(InputError, match="checksum"):
        cb.load(path)
    path.write_text("{not json")
    with pytest.raises(InputError, match="JSON"):
        cb.load(path)


def test_one_step_one_entry_dump(tmp_path):
    src = tmp_path / "tiny.h5"
    write_dump(src, {"w": (np.float32([[0.25]]), (1,))}, steps=np.array([7]))
    for coder in ("huffman", "ans"):
        compress(src, tmp_path / "t.co3", format="fp8-e5m2", coder=coder)
        decompress(tmp_path / "t.co3", tmp_path / "t.h5")
        check_lossless(src, tmp_path / "t.co3", tmp_path / "t.h5", "fp8-e5m2", None)


def test_nonfinite_policy(tmp_path):
    src = tmp_path / "nan.h5"
    x = np.ones((2, 5), np.float32)
    x[1, 3] = np.nan
    write_dump(src, {"w": (x, (5,))}, steps=np.array([0, 1]))
    with pytest.raises(InputError, match="w"):
        compress(src, tmp_path / "n.co3")
    assert not (tmp_path / "n.co3").exists()
    compress(src, tmp_path / "n.co3", nonfinite="zero")
    decompress(tmp_path / "n.co3", tmp_path / "n.h5")
    out = read_all(tmp_path / "n.h5")[0]["w"]
    assert out[1, 3] == 0 and np.isfinite(out).all()


def small_co3(tmp_path, coder="ans"):
    src = tmp_path / "s.h5"
    rng = np.random.default_rng(3)
    x = (rng.laplace(size=(2, 300)) * (rng.random((2, 300)) > 0.2)).astype(np.float32)
    write_dump(src, {"a": (x, (300,)), "b": (x[:, :7].copy(), (7,))}, steps=np.array([0, 1]))
    compress(src, tmp_path / "s.co3", format="fp8-e4m3", coder=coder)
    return (tmp_path / "s.co3").read_bytes()


def decode_everything(data: bytes):
    """Parse, verify and decode every chunk of an in-memory .co3 file."""
    from co3cli.codec import decode_block, read_co3_setup

    co3 = open_co3(io.BytesIO(data))
    grid, coder = read_co3_setup(co3.header)
    layers = co3.header["layers"]
    return [decode_block(b, grid, coder, layers[b.index]["numel"], layers[b.index]["shape"])
            for b in co3.layers()]


@pytest.mark.parametrize("coder", ["ans", "huffman"])
def test_every_single_byte_flip_is_refused(tmp_path, coder):
    data = small_co3(tmp_path, coder)
    decode_everything(data)  # the intact file decodes
    rng = np.random.default_rng(0)
    for pos in range(len(data)):  # every byte, a random non-zero flip
        bad = bytearray(data)
        bad[pos] ^= int(rng.integers(1, 256))
        with pytest.raises(CorruptDataError):
            decode_everything(bytes(bad))


def test_truncation_wrong_magic_future_version(tmp_path):
    data = small_co3(tmp_path)
    for n in sorted({0, 1, 7, 8, 15, 16, 40, len(data) // 2, len(data) - 12, len(data) - 1}):
        with pytest.raises(CorruptDataError):
            decode_everything(data[:n])
    with pytest.raises(CorruptDataError, match="trailer|truncated|checksum"):
        decode_everything(data + b"\0")
    with pytest.raises(CorruptDataError, match="magic"):
        decode_everything(b"XXXXXXXX" + data[8:])
    future = data[:8] + struct.pack("<H", 2) + data[10:]
    with pytest.raises(CorruptDataError, match="version 2"):
        decode_everything(future)
    with pytest.raises(CorruptDataError, match="magic"):
        decode_everything(b"\x89HDF\r\n\x1a\n" + bytes(100))


def test_report_information_bounds(dump_path, tmp_path):
    for coder in ("ans", "huffman"):
        compress(dump_path, tmp_path / "g.co3", format="fp8-e5m2", coder=coder, model="empirical")
        rep = report_co3(tmp_path / "g.co3")
        t = rep["total"]
        assert t["bpe"] * t["entries"] / 8 == pytest.approx(rep["bytes"])
        for lay in rep["layers"]:
            assert lay["bpe"] >= lay["payload_bpe"] >= 0
            assert lay["cross_entropy_bpe"] >= lay["entropy_bpe"] - 1e-12
            assert lay["huffman_counts_bpe"] >= lay["entropy_bpe"] - 1e-12
            assert lay["huffman_counts_bpe"] <= lay["entropy_bpe"] + 1
            if lay["entries"] >= 1000:
                assert lay["payload_bpe"] >= lay["entropy_bpe"]
                if coder == "huffman":
                    assert lay["payload_bpe"] >= lay["huffman_bpe"]
                    assert lay["payload_bpe"] <= lay["huffman_bpe"] + 3 * 40 / lay["entries"]  # 3 chunks: varint + padding
                else:
                    assert lay["payload_bpe"] <= lay["cross_entropy_bpe"] + 0.01
        assert t["bpe"] > t["payload_bpe"]


def test_co3_poly_fallback_recorded_per_layer_and_inspected(tmp_path):
    from co3cli.inspection import inspect_co3

    src = tmp_path / "poly.h5"
    rng = np.random.default_rng(0)
    write_dump(src, {"w": ((rng.laplace(size=(2, 400)) * 1e-3).astype(np.float32), (20, 20)),
                     "b": (np.tile(np.linspace(-1e-2, 1e-2, 10, dtype=np.float32), (2, 1)), (10,))},
               steps=np.array([0, 1]))
    compress(src, tmp_path / "p.co3", format="fp4-co3", scale="co3-poly")
    layers = {lay["name"]: lay for lay in inspect_co3(tmp_path / "p.co3").layers}
    assert layers["w"]["scale_fallbacks"] == 0 and layers["b"]["scale_fallbacks"] == 2
    decompress(tmp_path / "p.co3", tmp_path / "p_dec.h5")
    check_lossless(src, tmp_path / "p.co3", tmp_path / "p_dec.h5", "fp4-co3", "co3-poly")
    from co3cli.container import open_co3

    with open(tmp_path / "p.co3", "rb") as f:
        metas = {b.name: b.meta for b in open_co3(f, "p.co3").layers()}
    assert metas["b"]["scale_fallback"]["used"] == "gennorm-mse"
    assert metas["b"]["scale_fallback"]["steps"] == [0, 1]
    compress(src, tmp_path / "a.co3", format="fp4-co3")  # absmax: nothing recorded
    assert {lay["scale_fallbacks"] for lay in inspect_co3(tmp_path / "a.co3").layers} == {None}
