"""Layers equal to an earlier layer, written as ``LYE`` references: what is referenced and what
is not, bit-exact round trips, the same decode as coding the layer again, hostile references,
goldens."""

import io

import numpy as np
import pytest

from conftest import run_cli
from golden.make_golden import EPOCH, HERE, SAME_CASES, SAME_SOURCE
from hostile import SAME_LIES, build_same
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
