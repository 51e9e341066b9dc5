"""Layers equal to an earlier layer, written as ``LYE`` references: what is referenced and what
is not, bit-exact round trips, the same decode as coding the layer again, hostile references,
goldens."""

import io

import numpy as np
import pytest

from conftest import run_cli
from golden.make_golden import EPOCH, HERE, SAME_CASES, SAME_SOURCE
from hostile import SAME_LIES, base, build_same
from test_golden import _blocks, _same_dump

from co3cli.codec import compress, decompress
from co3cli.container import open_co3
from co3cli.dump import Dump, write_dump
from co3cli.errors import Co3Error


def streams(rng, steps=3, memory=False):
    """An FL ``transmitted.h5``-like dump: raw, corrected (raw itself without a memory) and a
    small bias stream (pooled into a group: never referenced)."""
    out = {}
    w = (rng.laplace(size=(steps, 30000)) * 1e-3).astype(np.float32)
    c = w + np.float32(0.5) * w[::-1] if memory else w.copy()
    for stream, x in (("raw", w), ("corrected", c)):
        out[f"{stream}/fc.weight"] = (x, (100, 300))
        for k in range(5):
            out[f"{stream}/b{k}.bias"] = (np.full((steps, 8), 1e-3 * (k + 1), np.float32), (8,))
    return out


def layer_rows(path):
    with open(path, "rb") as f:
        co3 = open_co3(f)
        return co3, {b.name: b for b in co3.layers()}


@pytest.mark.parametrize("coder", ["ans", "ctx", "ctx-steps"])
def test_an_equal_layer_is_a_reference_and_decodes_to_the_same_values(tmp_path, coder):
    src = tmp_path / "s.h5"
    write_dump(src, streams(np.random.default_rng(1)), steps=np.arange(3))
    res = compress(src, tmp_path / "s.co3", coder=coder)
    rows = {r["name"]: r for r in res.layers}
    assert rows["corrected/fc.weight"]["same_as"] == "raw/fc.weight"
    assert rows["corrected/fc.weight"]["bytes"] == 16 and rows["corrected/fc.weight"]["payload_bytes"] == 0
    assert "same_as" not in rows["raw/fc.weight"]
    assert all("same_as" not in r for n, r in rows.items() if n.endswith(".bias"))  # grouped
    co3, blocks = layer_rows(tmp_path / "s.co3")
    ref, orig = blocks["corrected/fc.weight"], blocks["raw/fc.weight"]
    assert ref.same_as == co3.layer_names.index("raw/fc.weight")
    assert ref.bodies == orig.bodies and np.array_equal(ref.scales, orig.scales)
    decompress(tmp_path / "s.co3", tmp_path / "d.h5")
    with Dump.open(tmp_path / "d.h5") as d:
        a, b = d.read_layer("raw/fc.weight"), d.read_layer("corrected/fc.weight")
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_files_without_equal_layers_keep_their_bytes(tmp_path):
    """A memory on: corrected differs from raw, nothing is referenced (the layout as before)."""
    src = tmp_path / "s.h5"
    write_dump(src, streams(np.random.default_rng(2), memory=True), steps=np.arange(3))
    res = compress(src, tmp_path / "s.co3", coder="ans")
    assert all("same_as" not in r for r in res.layers)
    with open(tmp_path / "s.co3", "rb") as f:
        assert all(b.same_as is None for b in open_co3(f).layers())


def test_a_codebook_codes_every_layer_with_its_own_table(tmp_path):
    from co3cli.inspection import build_codebook

    src = tmp_path / "s.h5"
    write_dump(src, streams(np.random.default_rng(3)), steps=np.arange(3))
    build_codebook(src, tmp_path / "b.json", coder="ans")
    res = compress(src, tmp_path / "s.co3", codebook=tmp_path / "b.json")
    assert all("same_as" not in r for r in res.layers)


def test_inspect_names_the_source(tmp_path, capsys):
    src = tmp_path / "s.h5"
    write_dump(src, streams(np.random.default_rng(4)), steps=np.arange(3))
    compress(src, tmp_path / "s.co3", coder="ans")
    code, out, err = run_cli("inspect", tmp_path / "s.co3", "--decode", capsys=capsys)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("corrected/fc.weight"))
    assert line.split()[-1] == "raw/fc.weight" and line.split()[3:6] == ["16", "0", "0"]


def test_honest_reference_file_from_the_builder_reads(tmp_path, capsys):
    p = tmp_path / "ok.co3"
    p.write_bytes(build_same())
    with open(p, "rb") as f:
        co3 = open_co3(f)
        blocks = list(co3.layers())
    assert blocks[2].same_as == 0 and blocks[2].bodies == blocks[0].bodies
    for cmd in (("inspect", "--decode"), ("decompress", "-o", str(tmp_path / "d.h5"))):
        code, _, err = run_cli(cmd[0], p, *cmd[1:], capsys=capsys)
        assert code == 0, err


@pytest.mark.parametrize("name", sorted(SAME_LIES))
def test_lying_references_are_refused(name):
    kw, msg = SAME_LIES[name]
    with pytest.raises(Co3Error, match=msg):
        list(open_co3(io.BytesIO(build_same(**kw))).layers())


def test_writer_refuses_a_reference_it_cannot_decode():
    from co3cli.container import Co3Writer
    from co3cli.errors import InputError

    lays = [{"name": "a", "shape": [4], "numel": 4}, {"name": "b", "shape": [2, 2], "numel": 4}]
    w = Co3Writer(io.BytesIO(), {"layers": lays, "steps": [0]})
    w.write_layer({}, b"", [(1.0, b"")])
    with pytest.raises(InputError, match="cannot refer"):
        w.write_same(0)  # another shape
    with pytest.raises(InputError, match="cannot refer"):
        w.write_same(1)  # itself


@pytest.mark.parametrize("case", sorted(SAME_CASES))
def test_golden_references_decode_and_compress_to_the_same_bytes(case, tmp_path, monkeypatch,
                                                                   capsys):
    golden = HERE / f"{case}.co3"
    _, blocks = layer_rows(golden)
    assert blocks["corrected/fc.weight"].same_as == 0
    decompress(golden, tmp_path / "d.h5")
    _same_dump(tmp_path / "d.h5", HERE / f"{case}.h5")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    code, _, err = run_cli("compress", SAME_SOURCE, "-o", tmp_path / "o.co3", *SAME_CASES[case],
                           "-q", capsys=capsys)
    assert code == 0, err
    assert _blocks(tmp_path / "o.co3") == _blocks(golden)


def test_many_references_of_few_bytes_read_back(tmp_path):
    """Twenty frozen (all-zero) layers of one shape over 100 steps: 19 references of 16 bytes
    each in a file far smaller than steps x layers (the reader counts coded layers only)."""
    src = tmp_path / "frozen.h5"
    write_dump(src, {f"l{i}.weight": (np.zeros((100, 700), np.float32), (700,)) for i in range(20)},
               steps=np.arange(100))
    res = compress(src, tmp_path / "f.co3")
    assert sum("same_as" in r for r in res.layers) == 19 and res.nbytes < 100 * 20
    decompress(tmp_path / "f.co3", tmp_path / "d.h5")
    with Dump.open(tmp_path / "d.h5") as d:
        assert all(not d.read_layer(n).any() for n in d.layers)


def test_a_big_reference_passes_the_per_block_limit_and_the_file_limit_holds(monkeypatch):
    """A reference to a layer of more than 2**20 entries per byte of its 16-byte block reads
    (its source's block is checked); references declaring more entries than the limit per
    byte of the whole file are refused (the limit shrunk here, so a small file reaches it)."""
    from co3cli.codec import encode_layer
    from co3cli.coding import get_coder
    from co3cli.container import Co3Writer, reader
    from co3cli.formats import get_grid

    def build(numel, refs, zeros=True):
        data = np.zeros((4, numel), np.float32) if zeros else \
            np.random.default_rng(0).laplace(size=(4, numel)).astype(np.float32)
        enc = encode_layer(data, get_grid("fp8-e5m2"), get_coder("ans"), model="gennorm-zi",
                           shape=(numel,))
        lays = [{"name": f"l{i}", "shape": [numel], "numel": numel} for i in range(1 + refs)]
        out = io.BytesIO()
        w = Co3Writer(out, dict(base()[0], layers=lays, steps=[0, 1, 2, 3]))
        w.write_layer(enc.meta, enc.table.to_bytes(), list(zip(enc.scales.tolist(), enc.bodies)))
        for _ in range(refs):
            w.write_same(0)
        w.close()
        return out

    big = (1 << 24) // 4 + 8  # 4 steps: just over 2**20 entries per byte of 16 bytes
    got = list(open_co3(build(big, 1)).layers())
    assert got[1].same_as == 0 and got[1].bodies == got[0].bodies
    monkeypatch.setattr(reader, "MAX_ENTRIES_PER_BYTE", 64)
    assert len(list(open_co3(build(2000, 10, zeros=False)).layers())) == 11
    f = build(2000, 100, zeros=False)
    assert 100 * 4 * 2000 > 64 * len(f.getvalue())
    with pytest.raises(Co3Error, match="references to equal layers declare"):
        open_co3(f)
