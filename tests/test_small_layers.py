"""Small layers pooled into ``.co3`` 1.1 group blocks: the grouping rule, bit-exact round trips,
fewer bytes, the same bytes for any thread count, per-layer provenance, old readers' rules."""

import io

import numpy as np
import pytest

from co3cli.codec import compress, decode_block, decompress, read_co3_setup
from co3cli.container import Co3Writer, open_co3, plan_groups, plan_units
from co3cli.container import MINOR, plan
from co3cli.dump import write_dump
from co3cli.errors import CorruptDataError, InputError
from test_codec import check_lossless


def bn_layers(rng, steps=2, blocks=10, channels=32):
    """A BatchNorm-like net: per block a conv kernel (big), a BN weight and bias (small)."""
    out = {}
    for b in range(blocks):
        out[f"b{b}.conv.weight"] = ((rng.standard_normal((steps, 9216)) * 1e-3).astype(np.float32),
                                    (2 * channels, 16, 3, 3))
        out[f"b{b}.bn.weight"] = ((rng.laplace(size=(steps, channels)) * 1e-2).astype(np.float32),
                                  (channels,))
        out[f"b{b}.bn.bias"] = ((rng.standard_normal((steps, channels)) * 1e-2).astype(np.float32),
                                (channels,))
    out["fc.bias"] = (np.zeros((steps, 10), np.float32), (10,))  # all zero: a group copes
    return out


@pytest.fixture
def bn_dump(tmp_path):
    path = tmp_path / "bn.h5"
    write_dump(path, bn_layers(np.random.default_rng(7)), steps=np.array([0, 1]))
    return path


def test_plan_groups_by_kind_with_a_minimum_and_a_cut(monkeypatch):
    names = [f"l{i}.{k}" for i in range(10) for k in ("weight", "bias")] + ["x.running_mean"]
    numels = [100] * 20 + [5]
    groups = plan_groups(names, numels, 1)
    assert groups == [list(range(0, 20, 2)), list(range(1, 20, 2))]  # x.running_mean: alone
    # 7 of each kind and one more: too few per kind, so pooled (15 >= MIN_LAYERS)
    assert plan_groups(names[:14] + names[20:], numels[:14] + [5], 1) == [list(range(15))]
    assert plan_groups(names[:7], numels[:7], 1) == []  # too few: alone (the 1.0 layout)
    assert plan_groups(names, [plan.SMALL_ENTRIES + 1] * 21, 1) == []  # none small
    assert plan_groups(names, numels, plan.SMALL_ENTRIES // 50) == []  # steps count too
    monkeypatch.setattr(plan, "GROUP_ENTRIES", 300)
    g = plan_groups(names, numels, 1)
    assert [len(x) for x in g] == [3, 3, 3, 3, 3, 3, 1, 1] and sorted(sum(g, [])) == list(range(20))
    units = plan_units(21, [[1, 3], [2, 5]])
    assert units == [(False, [0]), (True, [1, 3]), (True, [2, 5]), (False, [4]), (False, [6]),
                     (False, [7]), (False, [8]), (False, [9]), (False, [10]), (False, [11]),
                     (False, [12]), (False, [13]), (False, [14]), (False, [15]), (False, [16]),
                     (False, [17]), (False, [18]), (False, [19]), (False, [20])]


@pytest.mark.parametrize("coder", ["ans", "huffman", "ctx"])
def test_groups_round_trip_bit_exactly_and_cost_fewer_bytes(bn_dump, tmp_path, coder):
    co3, dec = tmp_path / "g.co3", tmp_path / "g.h5"
    res = compress(bn_dump, co3, coder=coder, model="gennorm-zi", threads=1)
    alone = compress(bn_dump, tmp_path / "a.co3", coder=coder, model="gennorm-zi",
                     small_layers=False, threads=1)
    assert res.nbytes < alone.nbytes - 21 * 100  # 21 small layers: a table and a meta each
    assert [lay["name"] for lay in res.layers] == [lay["name"] for lay in alone.layers]
    assert sum(lay["bytes"] for lay in res.layers) < res.nbytes
    decompress(co3, dec)
    check_lossless(bn_dump, co3, dec, "fp8-e5m2", None)
    with open(co3, "rb") as f:
        c = open_co3(f)
        assert c.version == (1, MINOR)
        assert c.header["small_layers"] == plan.plan_config(pool_all=coder == "ctx")
        blocks = list(c.layers())
        assert sum(b.nbytes for b in blocks) == c.size - c.header_bytes - c.trailer_bytes
    groups = {b.group for b in blocks if b.group is not None}
    if coder == "ctx":  # an adaptive coder: every layer of <= JOIN_ENTRIES entries in one group
        assert groups == {0} and all(b.group == 0 for b in blocks)
    else:
        assert groups == {1, 2}  # the BN weights' group, the biases' (fc.bias pooled there)
        assert [b.index for b in blocks if b.group == 2] == list(range(2, 30, 3)) + [30]
        assert all(b.group is None for b in blocks[:30:3])  # conv kernels: alone
    with open(tmp_path / "a.co3", "rb") as f:
        assert open_co3(f).version == (1, MINOR)


def test_group_layout_does_not_depend_on_threads(bn_dump, tmp_path, monkeypatch):
    from co3cli import workers

    monkeypatch.setattr(workers, "SMALL_LAYER_BYTES", 0)  # every unit a job on the pool
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    outs = []
    for t in (1, 2, 3):
        compress(bn_dump, tmp_path / f"t{t}.co3", threads=t)
        outs.append((tmp_path / f"t{t}.co3").read_bytes())
        decompress(tmp_path / f"t{t}.co3", tmp_path / f"t{t}.h5", threads=t)
    assert outs[0] == outs[1] == outs[2]


def test_group_records_each_layers_scale_fallback(tmp_path):
    from co3cli.inspection import inspect_co3

    rng = np.random.default_rng(0)
    layers = {f"l{i}.b": ((rng.laplace(size=(2, 50)) * 1e-3).astype(np.float32), (50,))
              for i in range(8)}
    layers["l3.b"] = (np.tile(np.linspace(-1e-2, 1e-2, 50, dtype=np.float32), (2, 1)), (50,))
    write_dump(tmp_path / "p.h5", layers, steps=np.array([0, 1]))
    compress(tmp_path / "p.h5", tmp_path / "p.co3", format="fp4-co3", scale="co3-poly",
             model="gennorm-zi")
    info = {lay["name"]: lay for lay in inspect_co3(tmp_path / "p.co3", decode=True).layers}
    assert {lay["group"] for lay in info.values()} == {0}
    assert info["l3.b"]["scale_fallbacks"] == 2
    assert all(info[n]["scale_fallbacks"] == 0 for n in info if n != "l3.b")
    with open(tmp_path / "p.co3", "rb") as f:
        metas = {b.name: b.meta for b in open_co3(f).layers()}
    assert metas["l3.b"]["scale_fallback"]["steps"] == [0, 1]
    assert "layers" not in metas["l0.b"] and metas["l0.b"]["model"] == "gennorm-zi"
    decompress(tmp_path / "p.co3", tmp_path / "d.h5")
    check_lossless(tmp_path / "p.h5", tmp_path / "p.co3", tmp_path / "d.h5", "fp4-co3", "co3-poly")


def test_codebook_files_keep_per_layer_tables(bn_dump, tmp_path):
    from co3cli import codebook as cb
    from co3cli.coding import get_coder
    from co3cli.dump import Dump
    from co3cli.formats import get_grid

    with Dump.open(bn_dump) as d:
        book = cb.build(d, get_grid("fp8-e5m2"), get_coder("ans"))
    compress(bn_dump, tmp_path / "b.co3", codebook=book)
    with open(tmp_path / "b.co3", "rb") as f:
        c = open_co3(f)
        assert c.version == (1, MINOR) and "small_layers" not in c.header
        assert all(b.group is None for b in c.layers())


def test_every_member_decodes_alone_in_any_order(bn_dump, tmp_path):
    compress(bn_dump, tmp_path / "g.co3")
    with open(tmp_path / "g.co3", "rb") as f:
        c = open_co3(f)
        grid, coder = read_co3_setup(c.header)
        lays = c.header["layers"]
        ref = {b.index: decode_block(b, grid, coder, lays[b.index]["numel"], lays[b.index]["shape"])
               for b in c.layers()}
        for i in [30, 2, 5, 2, 1]:  # random access re-reads its group
            b = c.read_layer(i)
            np.testing.assert_array_equal(decode_block(b, grid, coder, lays[i]["numel"],
                                                       lays[i]["shape"]), ref[i])


def test_writer_refuses_blocks_out_of_order():
    h = {"layers": [{"name": f"l{i}", "shape": [1], "numel": 1} for i in range(3)], "steps": [0]}
    w = Co3Writer(io.BytesIO(), h, groups=True)
    with pytest.raises(InputError, match="comes next"):
        w.write_group({}, b"", [(1, [(1.0, b"")]), (2, [(1.0, b"")])])
    w.write_group({}, b"", [(0, [(1.0, b"")]), (2, [(1.0, b"")])])
    with pytest.raises(InputError, match="already written"):
        w.write_group({}, b"", [(1, [(1.0, b"")]), (2, [(1.0, b"")])])
    with pytest.raises(InputError, match="header declares"):
        w.close()
    w.write_layer({}, b"", [(1.0, b"")])
    w.close()
    with pytest.raises(InputError, match="without group blocks"):
        Co3Writer(io.BytesIO(), h).write_group({}, b"", [(0, [(1.0, b"")])])


def test_a_group_block_in_a_10_file_is_refused(bn_dump, tmp_path):
    import struct
    import zlib

    compress(bn_dump, tmp_path / "g.co3")
    data = bytearray((tmp_path / "g.co3").read_bytes())
    data[10:12] = struct.pack("<H", 0)  # claim 1.0, fix the CRCs
    hlen = struct.unpack_from("<I", data, 12)[0]
    struct.pack_into("<I", data, 16 + hlen, zlib.crc32(bytes(data[:16 + hlen])))
    struct.pack_into("<I", data, len(data) - 11, zlib.crc32(bytes(data[:-11])))
    with pytest.raises(CorruptDataError, match="unreadable header"):  # a 1.5 header
        open_co3(io.BytesIO(bytes(data)))
