"""The ``.co3`` 1.3 layout for small files: joined steps (``LYJ``/``GRJ``), the header deflated
with a preset dictionary, varint offsets; bit-exact round trips, fewer bytes, exact consumption,
hostile files, and every earlier golden file still decoding bit for bit."""

import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from co3cli.codec import compress, decompress
from co3cli.container import COMPACT_MINOR, MINOR, Co3Writer, Joined, open_co3, plan
from co3cli.container.hdict import DICTIONARIES, HEADER_DICT_V1, HEADER_DICT_V2, deflate
from co3cli.dump import write_dump
from co3cli.errors import CorruptDataError
from test_codec import check_lossless
from test_golden import _same_dump
from test_small_layers import bn_layers

GOLDEN_OLD = Path(__file__).resolve().parent / "golden" / "v1.2"
V14 = Path(__file__).resolve().parent / "golden" / "v1.4" / "fp8-ans.co3"  # a file of 1.3's
# header and trailer layout (1.5's: tests/test_container_v15.py)


def small_layers(rng, steps=5):
    """A tiny conv net's gradients: a few kernels and biases of 8-600 entries."""
    def g(n, scale):
        x = (rng.laplace(size=(steps, n)) * scale).astype(np.float32)
        x[rng.random(x.shape) < 0.1] = 0.0
        return x
    return {"conv1.weight": (g(72, 1e-2), (8, 1, 3, 3)), "conv1.bias": (g(8, 1e-2), (8,)),
            "conv2.weight": (g(576, 3e-3), (8, 8, 3, 3)), "conv2.bias": (g(8, 1e-2), (8,)),
            "fc.weight": (g(160, 1e-2), (10, 16)), "fc.bias": (g(10, 1e-2), (10,))}


@pytest.fixture
def tiny_dump(tmp_path):
    path = tmp_path / "tiny.h5"
    write_dump(path, small_layers(np.random.default_rng(3)), steps=np.arange(5),
               attrs={"task": "tiny", "model_repr": "Sequential(\n  (conv1): Conv2d(1, 8, "
                      "kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n)"})
    return path


def _tags(path) -> set:
    data = Path(path).read_bytes()
    return {t for t in (b"LYR\0", b"LYS\0", b"LYJ\0", b"GRP\0", b"GRJ\0", b"GRC\0") if t in data}


@pytest.mark.parametrize("coder", ["ans", "huffman", "ctx"])
def test_joined_layers_round_trip_and_cost_fewer_bytes(tiny_dump, tmp_path, coder, monkeypatch):
    co3, dec = tmp_path / "j.co3", tmp_path / "j.h5"
    res = compress(tiny_dump, co3, coder=coder, model="gennorm-zi", small_layers=False, threads=1)
    assert b"LYJ\0" in _tags(co3)
    decompress(co3, dec)
    check_lossless(tiny_dump, co3, dec, "fp8-e5m2", None)
    with open(co3, "rb") as f:
        c = open_co3(f)
        assert c.version == (1, MINOR) and c.header["joined_steps"] == plan.join_config()
        assert all(len(b.bodies) == 1 and b.scales.size == 5 for b in c.layers() if b.joined)
    monkeypatch.setattr(plan, "JOIN_ENTRIES", 0)  # the same file with every step a chunk
    apart = compress(tiny_dump, tmp_path / "a.co3", coder=coder, model="gennorm-zi",
                     small_layers=False, threads=1)
    assert b"LYJ\0" not in _tags(tmp_path / "a.co3")
    assert res.nbytes < apart.nbytes - 6 * 4  # at least a final state per step and layer less


@pytest.mark.parametrize("coder", ["ans", "ctx"])
def test_joined_group_round_trips(tmp_path, coder):
    src = tmp_path / "bn.h5"
    write_dump(src, bn_layers(np.random.default_rng(7), steps=3, blocks=9), steps=np.arange(3))
    co3, dec = tmp_path / "g.co3", tmp_path / "g.h5"
    compress(src, co3, coder=coder, model="gennorm-zi", threads=1)
    assert b"GRC\0" in _tags(co3)
    decompress(co3, dec)
    check_lossless(src, co3, dec, "fp8-e5m2", None)
    with open(co3, "rb") as f:  # members decode alone, in any order
        c = open_co3(f)
        for i in reversed(range(len(c.offsets))):
            b = c.read_layer(i)
            assert b.group is None or b.joined


def test_ctx_pools_every_small_layer_into_one_joined_group(tiny_dump, tmp_path):
    names = ["a.weight", "a.bias", "b.running_mean", "big.weight"]
    assert plan.plan_groups(names, [10, 5, 3, plan.JOIN_ENTRIES], 2, pool_all=True) == [[0, 1, 2]]
    assert plan.plan_groups(names[:1], [10], 2, pool_all=True) == []  # one layer: alone
    co3, dec = tmp_path / "c.co3", tmp_path / "c.h5"
    res = compress(tiny_dump, co3, threads=1)  # the default: ctx, auto
    kept = compress(tiny_dump, tmp_path / "k.co3", small_layers=False, threads=1)
    assert res.nbytes < kept.nbytes
    with open(co3, "rb") as f:
        c = open_co3(f)
        assert c.header["small_layers"] == plan.plan_config(pool_all=True)
        blocks = list(c.layers())
        assert {b.group for b in blocks} == {0} and all(b.joined for b in blocks)
        assert blocks[0].meta["model"] in ("empirical", "empirical-octaves", "uniform")
    decompress(co3, dec)
    check_lossless(tiny_dump, co3, dec, "fp8-e5m2", None)


def test_step_context_files_are_never_joined(tiny_dump, tmp_path):
    co3 = tmp_path / "s.co3"
    compress(tiny_dump, co3, coder="ctx-steps", threads=1)
    assert not {b"LYJ\0", b"GRJ\0", b"GRC\0"} & _tags(co3)
    decompress(co3, tmp_path / "s.h5")
    check_lossless(tiny_dump, co3, tmp_path / "s.h5", "fp8-e5m2", None)


def test_header_dictionary_shrinks_the_header_and_keeps_it_whole(tiny_dump, tmp_path):
    co3 = tmp_path / "h.co3"
    compress(tiny_dump, co3, threads=1)
    with open(co3, "rb") as f:
        c = open_co3(f)
        plain = len(zlib.compress(json.dumps(c.header, separators=(",", ":"),
                                             sort_keys=True).encode(), 9))
        assert c.header_bytes - 20 < plain - 150  # preamble and CRC apart
        assert c.header["source"]["model_repr"].startswith("Sequential(")  # provenance kept
    assert zlib.adler32(HEADER_DICT_V1) in DICTIONARIES


# ---------------------------------------------------------------------------- hostile files


def _rewrite(src, dst, body_fn=None, header_fn=None, step_context=False):
    """``src`` through Co3Writer (valid checksums), joined bodies replaced by ``body_fn``."""
    with open(src, "rb") as f:
        c = open_co3(f)
        blocks, header = list(c.layers()), json.loads(json.dumps(c.header))
    if header_fn:
        header_fn(header)
    with open(dst, "wb") as f:
        w = Co3Writer(f, header, step_context=step_context)
        for b in blocks:
            table = b"" if b.step_groups is not None else b.table
            groups = None if b.step_groups is None else [tuple(g) for g in b.step_groups]
            if b.joined:
                body = body_fn(b.bodies[0]) if body_fn else b.bodies[0]
                w.write_layer(b.meta, table, Joined(b.scales.tolist(), body), groups)
            else:
                w.write_layer(b.meta, table, list(zip(b.scales.tolist(), b.bodies)), groups)
        w.close()


@pytest.mark.parametrize("coder", ["ans", "huffman", "ctx"])
@pytest.mark.parametrize("edit", ["short", "extra", "flip"])
def test_a_damaged_joined_body_is_refused(tiny_dump, tmp_path, coder, edit):
    src = tmp_path / "j.co3"
    compress(tiny_dump, src, coder=coder, model="gennorm-zi", small_layers=False, threads=1)
    fn = {"short": lambda b: b[:-2], "extra": lambda b: b + b"\x00\x01",
          "flip": lambda b: b[:3] + bytes([b[3] ^ 0x5A]) + b[4:]}[edit]
    bad = tmp_path / "bad.co3"
    _rewrite(src, bad, fn)
    with pytest.raises(CorruptDataError):
        decompress(bad, tmp_path / "out.h5")


def test_joined_blocks_in_a_step_context_file_are_refused(tiny_dump, tmp_path):
    src, bad = tmp_path / "j.co3", tmp_path / "bad.co3"
    compress(tiny_dump, src, coder="ctx", small_layers=False, threads=1)
    _rewrite(src, bad, header_fn=lambda h: h.update(coder={"id": "ctx-steps", "key_every": 16,
                                                           "limit": 60, "precision": 16}))
    with pytest.raises(CorruptDataError, match="joined steps"):
        with open(bad, "rb") as f:
            list(open_co3(f).layers())


def _fix_crcs(data: bytearray) -> bytes:
    hlen = struct.unpack_from("<I", data, 12)[0]
    struct.pack_into("<I", data, 16 + hlen, zlib.crc32(bytes(data[:16 + hlen])))
    struct.pack_into("<I", data, len(data) - 11, zlib.crc32(bytes(data[:-11])))
    return bytes(data)


def test_a_13_file_claiming_an_older_version_is_refused():
    data = bytearray(V14.read_bytes())
    for minor in (0, 1, 2):
        data[10:12] = struct.pack("<H", minor)
        with pytest.raises(CorruptDataError, match="preset dictionary"):
            open_co3(io.BytesIO(_fix_crcs(data)))


def test_an_unknown_header_dictionary_is_refused():
    data = bytearray(V14.read_bytes())
    data[18:22] = b"\x12\x34\x56\x78"  # the zlib stream's DICTID
    with pytest.raises(CorruptDataError, match="unknown preset dictionary"):
        open_co3(io.BytesIO(_fix_crcs(data)))


def test_corrupt_varint_offsets_are_refused():
    good = V14.read_bytes()
    tlen = struct.unpack_from("<I", good, len(good) - 15)[0]
    start = len(good) - 15 - tlen
    for k in range(start + 8, len(good) - 15):  # each offset byte, CRCs fixed
        for v in (0x00, 0x80, 0xFF, good[k] ^ 1):
            data = bytearray(good)
            data[k] = v
            if bytes(data) == good:
                continue
            with pytest.raises(CorruptDataError):
                c = open_co3(io.BytesIO(_fix_crcs(data)))
                list(c.layers())
    for tl in (0, 7, tlen + 1, 1 << 30):  # a lying trailer length
        data = bytearray(good)
        struct.pack_into("<I", data, len(good) - 15, tl)
        with pytest.raises(CorruptDataError):
            open_co3(io.BytesIO(_fix_crcs(data)))


@pytest.mark.parametrize("zdict", [HEADER_DICT_V1, HEADER_DICT_V2])
def test_deflate_with_the_dictionary_round_trips(zdict):
    raw = json.dumps({"format": {"id": "fp8-e5m2"}, "x": list(range(50))}).encode()
    js = deflate(raw, zdict)
    assert zlib.decompressobj(zdict=zdict).decompress(js) == raw
    assert zlib.adler32(zdict) in DICTIONARIES


# ----------------------------------------------------------- files of earlier versions


@pytest.mark.parametrize("path", sorted(GOLDEN_OLD.glob("*.co3")), ids=lambda p: p.stem)
def test_files_of_earlier_versions_decode_bit_exactly(path, tmp_path):
    with open(path, "rb") as f:
        assert open_co3(f).version[1] < COMPACT_MINOR
    out = tmp_path / "out.h5"
    decompress(path, out)
    ref = GOLDEN_OLD / f"{path.stem}.h5"
    if ref.exists():
        _same_dump(out, ref)
    else:  # lossless: the stored words of its source
        from test_lossless import read_back

        back, orig = read_back(out), read_back(GOLDEN_OLD / f"{path.stem}-source.h5")
        assert list(back) == list(orig)
        for name in orig:
            assert back[name][1] == orig[name][1] and np.array_equal(back[name][0], orig[name][0])


@pytest.mark.parametrize("kind", ["garbage", "bomb", "trailing"])
def test_a_bad_deflated_table_is_refused(tiny_dump, tmp_path, monkeypatch, kind):
    from co3cli.container import blocks
    from co3cli.container.framing import TABLE_DEFLATED

    def deflated(raw):
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(raw) + c.flush()

    bad = {"garbage": b"\xff" * 7, "bomb": deflated(bytes(17 << 20)),
           "trailing": deflated(b"\x01\x10\x3c") + b"\x00"}[kind]
    monkeypatch.setattr(blocks, "table_field",
                        lambda t: struct.pack("<I", len(bad) | TABLE_DEFLATED) + bad)
    compress(tiny_dump, tmp_path / "x.co3", coder="ans", small_layers=False, threads=1)
    with pytest.raises(CorruptDataError, match="table"):
        with open(tmp_path / "x.co3", "rb") as f:
            list(open_co3(f).layers())


def test_joined_blocks_beyond_what_the_writer_joins_are_refused(tmp_path):
    """A joined (LYJ) block in a file of no step is refused with one line (it gave an
    IndexError in the decoder); so is one over JOIN_ENTRIES entries. (One step joins: files
    written from short scales on, below.)"""
    from co3cli.container.decode import block_table, read_co3_setup
    from co3cli.dump import write_dump
    from co3cli.errors import Co3Error

    rng = np.random.default_rng(3)
    write_dump(tmp_path / "t.h5", {"a.weight": ((rng.laplace(size=(5, 72)) * 1e-2).astype(np.float32),
                                                (8, 9))}, steps=np.arange(5))
    compress(tmp_path / "t.h5", tmp_path / "t.co3", coder="ans", model="gennorm-zi",
             small_layers=False, threads=1)
    with open(tmp_path / "t.co3", "rb") as f:
        c = open_co3(f)
        b, h = next(c.layers()), json.loads(json.dumps(c.header))
    assert b.joined
    grid, coder = read_co3_setup(h)
    table = block_table(b, grid, coder)
    for steps, numel in (([], 72), ([0, 1], 1 << 16)):
        hh = dict(h, steps=steps, loss=None,
                  layers=[dict(h["layers"][0], numel=numel, shape=[numel])])
        out = io.BytesIO()
        w = Co3Writer(out, hh)
        w.write_layer(b.meta, b.table, Joined([1.0] * len(steps),
                                               table.encode(np.zeros(len(steps) * 4, np.uint16))))
        w.close()
        with pytest.raises(Co3Error, match="joined steps"):
            list(open_co3(out).layers())


@pytest.mark.parametrize("coder", ["ctx", "ans"])
def test_a_one_step_dump_joins_its_small_layers_into_one_group(tmp_path, coder):
    from co3cli.dump import write_dump
    from test_codec import check_lossless

    rng = np.random.default_rng(8)
    layers = {f"l{k}.weight": ((rng.laplace(size=(1, 16 * (k + 1))) * 1e-2).astype(np.float32),
                               (4, 4 * (k + 1))) for k in range(6)}
    write_dump(tmp_path / "one.h5", layers, steps=np.array([7]))
    compress(tmp_path / "one.h5", tmp_path / "one.co3", coder=coder, threads=1)
    decompress(tmp_path / "one.co3", tmp_path / "back.h5")
    check_lossless(tmp_path / "one.h5", tmp_path / "one.co3", tmp_path / "back.h5", "fp8-e5m2",
                   None)
    with open(tmp_path / "one.co3", "rb") as f:
        blocks = list(open_co3(f).layers())
    if coder == "ctx":  # every small layer in one joined group (before: a chunk each)
        assert {b.group for b in blocks} == {0} and all(b.joined for b in blocks)
