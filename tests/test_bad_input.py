"""Bad input through the CLI: every refusal is one line, exit code 1 (usage errors: 2), no
traceback, and nothing left behind (no output, no ``.co3-tmp*`` / ``*.tmp`` file, no spool).

The CLI runs in-process (``main`` + ``capsys``) except where stdin must be a real pipe or tty.
Bad HDF5 files are built with h5py directly, so they do not depend on ``DumpWriter``.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import pytest

from co3cli.container import MAGIC, Co3Writer, Joined, open_co3
from co3cli.dump import Dump
from conftest import run_cli

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
_PRE = struct.Struct("<8sHHI")


# ----------------------------------------------------------------------------------------------
# helpers


co3 = run_cli


def assert_refused(code, err, *needles, expect=1):
    """One ``co3: error:`` line naming the problem (any of ``needles``), no traceback."""
    assert "Traceback" not in err, err
    assert code == expect, (code, err)
    if expect == 1:
        assert err.startswith("co3: error:"), err
        assert err.endswith("\n") and err.count("\n") == 1, f"not exactly one line: {err!r}"
    if needles:
        assert any(n.lower() in err.lower() for n in needles), (needles, err)


def leftovers(folder, keep=()):
    """Entries of ``folder`` other than ``keep`` (outputs, temp files, spools)."""
    return sorted(p for p in os.listdir(folder) if p not in set(keep))


def temp_like(folder):
    return [p for p in os.listdir(folder) if p.startswith(".co3-tmp") or p.endswith(".tmp")]


def gn_like(rng, shape, p0=0.15):
    """GenNorm-ish (beta ~ 0.8) float32 with exact zeros, cheap to draw."""
    beta = 0.8
    x = rng.gamma(1.0 / beta, 1.0, size=shape) ** (1.0 / beta) * 1e-3
    x *= np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    x[rng.random(shape) < p0] = 0.0
    return x.astype(np.float32)


def make_h5(path, *, schema="co3.gradients/1", grads=True, steps=(0, 1, 2), layers=None,
            loss=None):
    """An HDF5 file following (or breaking) the dump schema, written with h5py alone.

    ``layers`` maps name -> (data, shape attribute or None for no attribute); the default is
    two small layers of 3 rows.
    """
    import h5py

    rng = np.random.default_rng(7)
    if layers is None:
        layers = {"fc.weight": (gn_like(rng, (3, 12)), (3, 4)),
                  "fc.bias": (gn_like(rng, (3, 3)), (3,))}
    with h5py.File(path, "w") as f:
        if schema is not None:
            f.attrs["schema"] = schema
        if grads:
            g = f.create_group("grads")
            for name, (data, shape) in layers.items():
                ds = g.create_dataset(name, data=data)
                if shape is not None:
                    ds.attrs["shape"] = np.asarray(shape, dtype=np.int64)
        if steps is not None:
            f.create_dataset("steps", data=np.asarray(steps, dtype=np.int64))
        if loss is not None:
            f.create_dataset("loss", data=np.asarray(loss, dtype=np.float32))
    return path


def refix_crcs(buf: bytes) -> bytes:
    """Recompute the header CRC and the file CRC of a (hand-edited) ``.co3`` image."""
    b = bytearray(buf)
    _, _, _, hlen = _PRE.unpack_from(b, 0)
    end = _PRE.size + hlen
    b[end:end + 4] = struct.pack("<I", zlib.crc32(bytes(b[:end])))
    tail = 4 + 7  # file_crc u32 + "\x89CO3END"
    b[-tail:-7] = struct.pack("<I", zlib.crc32(bytes(b[:-tail])))
    return bytes(b)


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """Spools and report temp files go to a private folder we can check is left empty."""
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(systmp))
    yield systmp
    assert os.listdir(systmp) == [], "temporary files left in the temp dir"


@pytest.fixture
def out(tmp_path, monkeypatch):
    """Empty output folder, also the working directory."""
    d = tmp_path / "out"
    d.mkdir()
    monkeypatch.chdir(d)
    return d


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A valid dump and its .co3 files (ans and huffman), built once."""
    from co3cli.codec import compress

    d = tmp_path_factory.mktemp("good")
    rng = np.random.default_rng(3)
    dump = make_h5(d / "dump.h5", steps=(0, 5, 10),
                   layers={"fc1.weight": (gn_like(rng, (3, 2000)), (40, 50)),
                           "fc1.bias": (gn_like(rng, (3, 40), p0=0.0), (40,)),
                           "fc2.weight": (gn_like(rng, (3, 400)), (10, 40))},
                   loss=(2.0, 1.5, 1.2))
    files = {"dump": dump}
    for coder in ("ans", "huffman"):
        files[coder] = d / f"{coder}.co3"
        compress(str(dump), str(files[coder]), coder=coder)
    return files


# ----------------------------------------------------------------------------------------------
# .co3 files: truncated, flipped, wrong magic, future version

READERS = [("decompress", "-o", "y.h5"), ("inspect",), ("report", "-q")]


@pytest.mark.parametrize("cut", [0.0, 0.001, 0.003, 0.02, 0.3, 0.5, 0.9, -9, -1])
def test_truncated_co3_refused(good, out, capsys, cut):
    data = good["ans"].read_bytes()
    n = int(len(data) * cut) if cut >= 0 else len(data) + cut
    n = max(n, 1) if cut else 0
    bad = out.parent / "trunc.co3"
    bad.write_bytes(data[:n])
    for cmd in READERS:
        code, o, e = co3(cmd[0], bad, *cmd[1:], capsys=capsys)
        # a cut inside the preamble reads as a bad magic; report then tries it as a dump
        short = ("magic", "HDF5") if n < _PRE.size else ()
        assert_refused(code, e, "truncated", *short)
        assert leftovers(out) == [], cmd


def test_random_byte_flips_refused_by_every_reader(good, out, capsys):
    rng = np.random.default_rng(11)
    for coder in ("ans", "huffman"):
        data = good[coder].read_bytes()
        # the preamble, the first layer head, inside bodies, and the trailer
        where = np.concatenate([[0, 8, 9, 10, 12, 15, 16, 30], rng.integers(0, len(data), 6),
                                np.arange(len(data) - 20, len(data), 7)])
        for pos in where:
            b = bytearray(data)
            b[pos] ^= int(rng.integers(1, 256))
            bad = out.parent / "flip.co3"
            bad.write_bytes(bytes(b))
            for cmd in READERS:
                code, o, e = co3(cmd[0], bad, *cmd[1:], capsys=capsys)
                maybe_dump = ("HDF5",) if cmd[0] == "report" and pos < len(MAGIC) else ()
                assert_refused(code, e, "checksum", "corrupt", "magic", "version", "truncated",
                               *maybe_dump)
                assert leftovers(out) == [], (coder, pos, cmd)


@pytest.mark.slow  # ~7 s each: the slow run (CI runs it)
@pytest.mark.parametrize("coder", ["ans", "huffman"])
def test_every_single_byte_flip_detected_before_decoding(good, coder):
    """Library level, exhaustive: every position, two masks; nothing decodes."""
    from co3cli.codec import decode_block, read_co3_setup
    from co3cli.errors import Co3Error

    data = good[coder].read_bytes()
    import io

    for pos in range(len(data)):
        for mask in (0x01, 0x80):
            b = bytearray(data)
            b[pos] ^= mask
            with pytest.raises(Co3Error):
                co3f = open_co3(io.BytesIO(bytes(b)))
                grid, c = read_co3_setup(co3f.header)
                for block in co3f.layers():
                    decode_block(block, grid, c, co3f.header["layers"][block.index]["numel"])


def test_wrong_magic(good, out, capsys):
    data = bytearray(good["ans"].read_bytes())
    data[:8] = b"PK\x03\x04\x00\x00\x00\x00"
    bad = out.parent / "zip.co3"
    bad.write_bytes(bytes(data))
    for cmd in READERS:
        code, o, e = co3(cmd[0], bad, *cmd[1:], capsys=capsys)
        # report falls back to reading it as a dump: it must still refuse in one line
        assert_refused(code, e, "magic" if cmd[0] != "report" else "HDF5")
        assert leftovers(out) == []


def test_future_major_version_refused_with_valid_checksums(good, out, capsys):
    data = bytearray(good["ans"].read_bytes())
    struct.pack_into("<H", data, 8, 2)
    bad = out.parent / "v2.co3"
    bad.write_bytes(refix_crcs(bytes(data)))
    for cmd in READERS[:2]:
        code, o, e = co3(cmd[0], bad, *cmd[1:], capsys=capsys)
        assert_refused(code, e, "version 2.")
        assert "upgrade" in e
        assert leftovers(out) == []


def test_future_minor_version_is_read(good, out, capsys):
    data = bytearray(good["ans"].read_bytes())
    struct.pack_into("<H", data, 10, 7)
    newer = out.parent / "v1_7.co3"
    newer.write_bytes(refix_crcs(bytes(data)))
    code, o, e = co3("inspect", newer, "--json", capsys=capsys)
    assert code == 0, e
    assert json.loads(o)["version"] == "1.7"
    code, o, e = co3("decompress", newer, "-o", "y.h5", "-q", capsys=capsys)
    assert code == 0, e
    assert leftovers(out) == ["y.h5"]


def _rewrite(src, dst, header_fn=None, block_fn=None):
    """Copy ``src`` to ``dst`` through ``Co3Writer`` (so every checksum is valid), letting
    ``header_fn(header)`` edit the header and ``block_fn(block) -> (meta, table, scales, bodies)``
    edit layer blocks."""
    import copy

    with open(src, "rb") as f:
        c = open_co3(f)
        blocks = list(c.layers())
        header = copy.deepcopy(c.header)
    if header_fn:
        header_fn(header)
    with open(dst, "wb") as f:
        w = Co3Writer(f, header)
        for b in blocks:
            meta, table, scales, bodies = (block_fn or (lambda b: (b.meta, b.table,
                                                                   b.scales.tolist(), b.bodies)))(b)
            w.write_layer(meta, table, Joined(scales, bodies[0]) if b.joined
                          else list(zip(scales, bodies)))
        w.close()


def _rewrite_layer_body(src, dst, layer, body_fn):
    """Copy ``src`` to ``dst`` with valid checksums but layer ``layer``'s chunk bodies replaced."""
    def block_fn(b):
        bodies = [body_fn(x) for x in b.bodies] if b.index == layer else b.bodies
        return b.meta, b.table, b.scales.tolist(), bodies

    _rewrite(src, dst, block_fn=block_fn)


def _set(key, value, layer=None):
    def fn(h):
        (h if layer is None else h["layers"][layer])[key] = value
    return fn


def _block(**edits):
    def fn(b):
        got = {"meta": b.meta, "table": b.table, "scales": b.scales.tolist(), "bodies": b.bodies}
        got.update({k: v(got[k]) for k, v in edits.items()})
        return got["meta"], got["table"], got["scales"], got["bodies"]
    return fn



# (header edit, block edit, command, words the one-line error must contain)
MALFORMED = {
    "numel+1": (_set("numel", 2001, 0), None, "decompress", ["payload", "numel", "shape"]),
    "negative-shape": (_set("shape", [-40, -50], 0), None, "decompress", ["shape"]),
    "unknown-format": (lambda h: h["format"].update(id="fp99"), None, "decompress", ["format"]),
    "unknown-coder": (_set("coder", {"id": "zip"}), None, "decompress", ["coder"]),
    "short-loss": (_set("loss", [1.0]), None, "decompress", ["loss"]),
    "duplicate-layer": (lambda h: h["layers"][1].update(name=h["layers"][0]["name"]), None,
                        "decompress", ["already", "twice", "duplicate"]),
    "bad-layer-name": (_set("name", "../x", 1), None, "decompress", ["../x"]),
    "zero-scale": (None, _block(scales=lambda s: [0.0] * len(s)), "decompress", ["scale"]),
    "nan-scale": (None, _block(scales=lambda s: [float("nan")] * len(s)), "decompress",
                  ["scale"]),
    "empty-table": (None, _block(table=lambda t: b""), "decompress", ["table"]),
    "zero-table": (None, _block(table=lambda t: bytes(len(t))), "decompress", ["table"]),
    "layer-without-name": (lambda h: h["layers"][0].pop("name"), None, "decompress", ["name"]),
    "layer-not-object": (lambda h: h["layers"].__setitem__(0, "abc"), None, "inspect",
                         ["layer"]),
    "steps-not-int": (_set("steps", ["a", "b", "c"]), None, "decompress", ["steps"]),
    "coder-not-object": (_set("coder", "ans"), None, "decompress", ["coder"]),
    "source-not-object": (_set("source", [1, 2]), None, "decompress", ["source"]),
    "meta-not-object": (None, _block(meta=lambda m: [1, 2]), "inspect", ["meta"]),
}
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_checksummed_but_malformed_co3_refused(good, out, capsys, case):
    """A writer bug (not a flipped bit) produces valid checksums around nonsense: still one line."""
    header_fn, block_fn, cmd, needles = MALFORMED[case]
    bad = out.parent / f"{case}.co3"
    _rewrite(good["ans"], bad, header_fn, block_fn)
    args = {"decompress": ("-o", "y.h5", "-q"), "inspect": ()}[cmd]
    code, o, e = co3(cmd, bad, *args, capsys=capsys)
    assert_refused(code, e, *needles)
    assert leftovers(out) == []


@pytest.mark.parametrize("coder", ["ans", "huffman"])
@pytest.mark.parametrize("edit", ["short", "extra", "junk"])
def test_undecodable_body_with_valid_crcs_refused(good, out, capsys, coder, edit):
    """Decoders must prove they consumed exactly their chunk (rule 6), even when CRCs pass."""
    rng = np.random.default_rng(5)
    fn = {"short": lambda b: b[: max(1, len(b) // 2)],
          "extra": lambda b: b + b"\x00\x00\x00\x00",
          "junk": lambda b: rng.integers(0, 256, len(b), dtype=np.uint8).tobytes()}[edit]
    bad = out.parent / f"{coder}-{edit}.co3"
    _rewrite_layer_body(good[coder], bad, 2, fn)
    code, o, e = co3("inspect", bad, capsys=capsys)
    assert code == 0, e  # structurally sound: only decoding can tell
    code, o, e = co3("decompress", bad, "-o", "y.h5", capsys=capsys)
    assert_refused(code, e, "payload", "corrupt", "decod")
    assert leftovers(out) == []


def test_failed_decompress_leaves_existing_output_intact(good, out, capsys):
    target = out / "y.h5"
    target.write_bytes(b"precious")
    # 1. corrupted file: refused before anything is written
    data = bytearray(good["ans"].read_bytes())
    data[len(data) // 2] ^= 0x40
    bad = out.parent / "flip.co3"
    bad.write_bytes(bytes(data))
    code, o, e = co3("decompress", bad, "-o", target, capsys=capsys)
    assert_refused(code, e, "checksum")
    assert target.read_bytes() == b"precious"
    assert leftovers(out) == ["y.h5"]
    # 2. valid checksums, last layer undecodable: earlier layers were already written
    bad2 = out.parent / "late.co3"
    _rewrite_layer_body(good["ans"], bad2, 2, lambda b: b[:8])
    code, o, e = co3("decompress", bad2, "-o", target, capsys=capsys)
    assert_refused(code, e, "payload", "corrupt")
    assert target.read_bytes() == b"precious"
    assert leftovers(out) == ["y.h5"]


def test_failed_compress_leaves_existing_output_intact(out, capsys):
    rng = np.random.default_rng(2)
    late = gn_like(rng, (3, 50))
    late[2, 7] = np.nan
    src = make_h5(out.parent / "nan.h5", layers={"a": (gn_like(rng, (3, 20)), (20,)),
                                                  "b": (late, (5, 10))})
    target = out / "x.co3"
    target.write_bytes(b"precious")
    code, o, e = co3("compress", src, "-o", target, capsys=capsys)
    assert_refused(code, e, "grads/b")
    assert target.read_bytes() == b"precious"
    assert leftovers(out) == ["x.co3"]


# ----------------------------------------------------------------------------------------------
# bad dumps (HDF5)

DUMP_READERS = [("compress", "-o", "x.co3"), ("codebook", "build"), ("fit", "-q"),
                ("report", "-q")]


def _run_dump_reader(cmd, path, capsys, *extra):
    if cmd[0] == "codebook":
        return co3("codebook", "build", path, "-o", "book.json", "-q", *extra, capsys=capsys)
    return co3(cmd[0], path, *cmd[1:], *extra, capsys=capsys)


BAD_DUMPS = {
    "no-schema": (dict(schema=None), ["schema"]),
    "schema-2": (dict(schema="co3.gradients/2"), ["co3.gradients/2"]),
    "schema-garbage": (dict(schema="hello"), ["schema"]),
    "no-grads": (dict(grads=False), ["'grads'"]),
    "no-steps": (dict(steps=None), ["'steps'"]),
    "rows-vs-steps": (dict(steps=(0, 1, 2, 3)), ["rows", "steps"]),
    "numel-vs-shape": (dict(layers={"w": (np.ones((3, 12), np.float32), (5, 5))}), ["shape"]),
    "no-shape-attr": (dict(layers={"w": (np.ones((3, 12), np.float32), None)}), ["shape"]),
    "empty-layer": (dict(layers={"w": (np.ones((3, 0), np.float32), (0,))}), ["empty"]),
    "empty-grads": (dict(layers={}), ["no datasets", "no layers"]),
    "1d-layer": (dict(layers={"w": (np.ones(3, np.float32), (3,))}), ["2-D"]),
    "string-layer": (dict(layers={"w": (np.array([[b"ab"], [b"cd"], [b"ef"]]), (1,))}),
                     ["dtype"]),
    "loss-mismatch": (dict(loss=(1.0, 2.0)), ["loss"]),
    "empty-steps": (dict(steps=(), layers={"w": (np.ones((0, 4), np.float32), (4,))}),
                    ["steps", "empty"]),
}


@pytest.mark.parametrize("case", sorted(BAD_DUMPS))
def test_bad_dump_structure_refused(out, capsys, case):
    kwargs, needles = BAD_DUMPS[case]
    src = make_h5(out.parent / f"{case}.h5", **kwargs)
    for cmd in DUMP_READERS:
        code, o, e = _run_dump_reader(cmd, src, capsys)
        assert_refused(code, e, *needles)
        assert leftovers(out) == [], cmd


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nonfinite_named_then_zeroed(out, capsys, value):
    rng = np.random.default_rng(4)
    w = gn_like(rng, (3, 30))
    w[1, 3] = value
    src = make_h5(out.parent / "nonfinite.h5", layers={"ok": (gn_like(rng, (3, 8)), (8,)),
                                                       "blk/w": (w, (5, 6))})
    for cmd in DUMP_READERS:
        code, o, e = _run_dump_reader(cmd, src, capsys)
        assert_refused(code, e, "grads/blk/w")
        assert "non-finite" in e and "step 1" in e
        assert leftovers(out) == [], cmd
    code, o, e = co3("compress", src, "-o", "x.co3", "-q", "--nonfinite", "zero", capsys=capsys)
    assert code == 0, e
    code, o, e = co3("decompress", "x.co3", "-o", "y.h5", "-q", capsys=capsys)
    assert code == 0, e
    with Dump.open(out / "y.h5") as d:
        assert d.read_layer("blk/w")[1, 3] == 0.0
    code, o, e = co3("compress", src, "-o", "z.co3", "--nonfinite", "nan", capsys=capsys)
    assert_refused(code, e, "nonfinite")
    assert leftovers(out) == ["x.co3", "y.h5"]


@pytest.mark.parametrize("frac", [0.05, 0.5, 0.9, 0.999])
def test_truncated_hdf5_refused(good, out, capsys, frac):
    data = good["dump"].read_bytes()
    src = out.parent / "trunc.h5"
    src.write_bytes(data[: int(len(data) * frac)])
    for cmd in DUMP_READERS:
        code, o, e = _run_dump_reader(cmd, src, capsys)
        assert_refused(code, e, "trunc.h5")
        assert leftovers(out) == [], cmd


def test_zero_byte_files_refused(out, capsys):
    empty_h5 = out.parent / "empty.h5"
    empty_h5.write_bytes(b"")
    empty_co3 = out.parent / "empty.co3"
    empty_co3.write_bytes(b"")
    for cmd in DUMP_READERS:
        code, o, e = _run_dump_reader(cmd, empty_h5, capsys)
        assert_refused(code, e, "empty.h5")
        assert leftovers(out) == [], cmd
    for cmd in READERS:
        code, o, e = co3(cmd[0], empty_co3, *cmd[1:], capsys=capsys)
        assert_refused(code, e, "empty.co3")
        assert leftovers(out) == [], cmd


def test_directory_as_input_refused(out, capsys):
    d = out.parent / "adir"
    d.mkdir()
    for cmd in DUMP_READERS:
        code, o, e = _run_dump_reader(cmd, d, capsys)
        assert_refused(code, e, "not a file", "directory")
        assert leftovers(out) == [], cmd
    for cmd in READERS:
        code, o, e = co3(cmd[0], d, *cmd[1:], capsys=capsys)
        assert_refused(code, e, "not a file", "directory")
        assert leftovers(out) == [], cmd


def test_directory_as_output_refused(good, out, capsys):
    (out / "taken").mkdir()
    for args in (("compress", good["dump"], "-o", "taken"),
                 ("decompress", good["ans"], "-o", "taken"),
                 ("codebook", "build", good["dump"], "-o", "taken", "-q")):
        code, o, e = co3(*args, capsys=capsys)
        assert_refused(code, e, "directory")
        assert leftovers(out) == ["taken"] and os.listdir(out / "taken") == [], args


def test_output_into_missing_folder_refused(good, out, capsys):
    for args in (("compress", good["dump"], "-o", "nowhere/x.co3"),
                 ("decompress", good["ans"], "-o", "nowhere/y.h5"),
                 ("codebook", "build", good["dump"], "-o", "nowhere/b.json", "-q")):
        code, o, e = co3(*args, capsys=capsys)
        assert_refused(code, e, "nowhere")
        assert leftovers(out) == [], args


def test_missing_input_refused(out, capsys):
    for cmd in DUMP_READERS:
        code, o, e = _run_dump_reader(cmd, "missing.h5", capsys)
        assert_refused(code, e, "missing.h5")
    for cmd in READERS:
        code, o, e = co3(cmd[0], "missing.co3", *cmd[1:], capsys=capsys)
        assert_refused(code, e, "missing.co3")
    assert leftovers(out) == []


# ----------------------------------------------------------------------------------------------
# codebooks


@pytest.fixture(scope="module")
def book(good, tmp_path_factory):
    from co3cli import codebook as cb
    from co3cli.coding import get_coder
    from co3cli.formats import get_grid

    path = tmp_path_factory.mktemp("book") / "book.json"
    with Dump.open(good["dump"]) as d, open(path, "wb") as f:
        cb.build(d, get_grid("fp8-e5m2"), get_coder("huffman")).save(f)
    return path


def test_codebook_for_another_format_refused(good, book, out, capsys):
    code, o, e = co3("compress", good["dump"], "-o", "x.co3", "--codebook", book,
                     "--format", "fp4-co3", capsys=capsys)
    assert_refused(code, e, "fp8-e5m2")
    assert "fp4-co3" in e
    assert leftovers(out) == []


@pytest.mark.parametrize("damage", [
    "edit", "truncate", "not-json", "other-schema", "empty",
    "table-size",
])
def test_corrupted_codebook_refused(good, book, out, capsys, damage):
    text = book.read_text()
    doc = json.loads(text)
    if damage == "edit":  # one table entry changed, checksum left as is
        name = next(iter(doc["layers"]))
        doc["layers"][name]["table"][0] += 1
        text = json.dumps(doc)
    elif damage == "truncate":
        text = text[: len(text) // 2]
    elif damage == "not-json":
        text = "\x89HDF\r\n\x1a\n"
    elif damage == "other-schema":
        doc["schema"] = "co3.codebook/9"
        text = json.dumps(doc)
    elif damage == "empty":
        text = ""
    elif damage == "table-size":  # self-consistent checksum, wrong table length
        from co3cli.codebook import _checksum

        name = next(iter(doc["layers"]))
        doc["layers"][name]["table"] = doc["layers"][name]["table"][:-1]
        doc["checksum"] = _checksum(doc)
        text = json.dumps(doc)
    bad = out.parent / f"book-{damage}.json"
    bad.write_text(text)
    code, o, e = co3("compress", good["dump"], "-o", "x.co3", "--codebook", bad, capsys=capsys)
    assert_refused(code, e, "codebook")
    assert leftovers(out) == []
    code, o, e = co3("codebook", "show", bad, capsys=capsys)
    assert_refused(code, e, "codebook")


def test_codebook_with_coder_options_refused(good, book, out, capsys):
    code, o, e = co3("compress", good["dump"], "-o", "x.co3", "--codebook", book,
                     "--max-len", "12", capsys=capsys)
    assert_refused(code, e, "codebook")
    assert leftovers(out) == []


# ----------------------------------------------------------------------------------------------
# options


@pytest.mark.parametrize("args,code,needles", [
    (["--bogus"], 2, ["--bogus"]),
    (["--format"], 2, ["--format"]),
    (["--precision", "abc"], 2, ["--precision"]),
    (["--max-len", "1.5"], 2, ["--max-len"]),
    (["--format", "fp9.9"], 1, ["format", "fp9.9"]),
    (["--format", "fp8-e9m9"], 1, ["format"]),
    (["--format", "uniform40"], 1, ["format", "uniform40"]),
    (["--coder", "lz77"], 1, ["coder", "lz77"]),
    (["--model", "cauchy"], 1, ["model", "cauchy"]),
    (["--scale", "maxabs"], 1, ["scale", "maxabs"]),
    (["--precision", "30"], 1, ["precision", "30"]),
    (["--precision", "0"], 1, ["precision"]),
    (["--coder", "huffman", "--max-len", "0"], 1, ["max_len", "max-len"]),
    (["--coder", "huffman", "--max-len", "99"], 1, ["max_len", "max-len"]),
    (["--coder", "huffman", "--precision", "16"], 1, ["precision"]),
    (["--max-len", "0"], 1, ["max_len", "max-len"]),
    (["--nonfinite", "ignore"], 1, ["nonfinite", "ignore"]),
    (["--format", "uniform8-c3", "--scale", "absmax"], 1, ["scale"]),
])
def test_bad_options_refused(good, out, capsys, args, code, needles):
    got, o, e = co3("compress", good["dump"], "-o", "x.co3", *args, capsys=capsys)
    assert_refused(got, e, *needles, expect=code)
    assert leftovers(out) == []


@pytest.mark.parametrize("cmd", [["decompress", "GOOD", "-o", "y.h5", "--coder", "ans"],
                                 ["inspect", "GOOD", "--bogus"],
                                 ["compress", "-o", "x.co3"],
                                 ["compress", "DUMP"],
                                 ["nosuchcommand"],
                                 ["fit", "DUMP", "--per-step=maybe"]])
def test_usage_errors_exit_2(good, out, capsys, cmd):
    args = [good["ans"] if a == "GOOD" else good["dump"] if a == "DUMP" else a for a in cmd]
    code, o, e = co3(*args, capsys=capsys)
    assert_refused(code, e, expect=2)
    assert leftovers(out) == []


def test_bad_fit_and_codebook_options_refused(good, out, capsys):
    for args, needles in ((("fit", good["dump"], "--models", ""), ["model"]),
                          (("fit", good["dump"], "--models", "empirical"), ["empirical"]),
                          (("fit", good["dump"], "--layers", "nomatch*"), ["nomatch"]),
                          (("codebook", "build", good["dump"], "-o", "b.json", "--step", "9"),
                           ["step"]),
                          (("codebook", "build", good["dump"], "-o", "b.json", "--step", "-1"),
                           ["step"])):
        code, o, e = co3(*args, "-q", capsys=capsys)
        assert_refused(code, e, *needles)
        assert leftovers(out) == [], args


# ----------------------------------------------------------------------------------------------
# small but valid dumps succeed


@pytest.mark.parametrize("kind", ["one-step", "one-entry", "one-step-one-entry", "all-zero"])
@pytest.mark.parametrize("coder", ["ans", "huffman"])
def test_tiny_dumps_round_trip(out, capsys, kind, coder):
    from co3cli.formats import get_grid
    from co3cli.quantize import dequantize, quantize
    from co3cli.scales import compute_scale

    rng = np.random.default_rng(9)
    steps = (4,) if kind.startswith("one-step") else (0, 1, 2)
    numel = 1 if kind.endswith("one-entry") else 25
    x = gn_like(rng, (len(steps), numel)) + (0 if kind == "all-zero" else 1e-4)
    if kind == "all-zero":
        x[:] = 0
    src = make_h5(out.parent / "tiny.h5", steps=steps, layers={"w": (x, (numel,))})
    code, o, e = co3("compress", src, "-o", "x.co3", "--coder", coder, "-q", capsys=capsys)
    assert code == 0, e
    code, o, e = co3("decompress", "x.co3", "-o", "y.h5", "-q", capsys=capsys)
    assert code == 0, e
    code, o, e = co3("inspect", "x.co3", capsys=capsys)
    assert code == 0, e
    grid = get_grid("fp8-e5m2")
    with Dump.open(out / "y.h5") as d:
        assert list(d.steps) == list(steps)
        y = d.read_layer("w")
    for t in range(len(steps)):
        if not np.any(x[t]):
            assert not np.any(y[t])
            continue
        s = compute_scale(x[t], grid)
        np.testing.assert_array_equal(y[t], dequantize(quantize(x[t], grid, s), grid, s))
    assert leftovers(out) == ["x.co3", "y.h5"]


# ----------------------------------------------------------------------------------------------
# stdin


def _run(args, tmp, **kw):
    env = {**ENV, "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, "-m", "co3cli", *map(str, args)], env=env,
                          capture_output=True, timeout=120, **kw)


def test_stdin_pipe_succeeds(good, out, private_tmp):
    with open(good["dump"], "rb") as f:
        r = _run(["compress", "-", "-o", out / "x.co3", "-q"], private_tmp, stdin=f)
    assert r.returncode == 0, r.stderr.decode()
    assert leftovers(out) == ["x.co3"]
    with open(out / "x.co3", "rb") as f:
        r = _run(["decompress", "-", "-o", "-", "-q"], private_tmp, stdin=f)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout[:8] == b"\x89HDF\r\n\x1a\n"


@pytest.mark.parametrize("args", [
    pytest.param(["compress", "-", "-o", "x.co3"], id="compress"),
    pytest.param(["codebook", "build", "-", "-o", "b.json"], id="codebook"),
    pytest.param(["fit", "-"], id="fit"),
    pytest.param(["report", "-"], id="report"),
    pytest.param(["decompress", "-", "-o", "y.h5"], id="decompress"),
    pytest.param(["inspect", "-"], id="inspect"),
])
def test_stdin_with_nothing_piped_refused(out, private_tmp, args):
    r = _run(args, private_tmp, stdin=subprocess.DEVNULL, cwd=out)  # empty, not a tty
    e = r.stderr.decode()
    assert_refused(r.returncode, e)
    assert "co3-stdin-" not in e, f"names the private spool file, not the input: {e!r}"
    assert "stdin" in e or "empty" in e or e.startswith("co3: error: - "), e
    assert leftovers(out) == []


def test_stdin_tty_refused(out, private_tmp):
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    try:
        r = _run(["compress", "-", "-o", "x.co3"], private_tmp, stdin=slave, cwd=out)
    finally:
        os.close(slave)
        os.close(master)
    e = r.stderr.decode()
    assert_refused(r.returncode, e, "nothing is piped", "stdin")
    assert leftovers(out) == []


def test_co3_on_stdin_is_not_a_dump(good, out, private_tmp):
    with open(good["ans"], "rb") as f:
        r = _run(["compress", "-", "-o", "x.co3"], private_tmp, stdin=f, cwd=out)
    assert_refused(r.returncode, r.stderr.decode(), "compressed .co3 file")
    assert "co3 decompress" in r.stderr.decode()  # says which command reads it
    assert leftovers(out) == []
