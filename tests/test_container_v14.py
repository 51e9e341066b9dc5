"""The ``.co3`` 1.4 layout: the compact header (``co3cli.container.hcompact``) and compact group
blocks (``GRC``, ``co3cli.container.gcompact``): exact round trips, fewer bytes, every field of
each refused when it lies, is cut short or runs on."""

import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from co3cli.codec import compress, decompress
from co3cli.container import MINOR, open_co3
from co3cli.container.gcompact import pack_scales, read_scales, stacks
from co3cli.container.hcompact import pack_header, unpack_header
from co3cli.dump import write_dump
from co3cli.errors import CorruptDataError
from test_codec import check_lossless
from test_container_compact import _fix_crcs, small_layers

LAYERS = [{"name": "conv1.weight", "numel": 72, "shape": [8, 1, 3, 3]},
          {"name": "conv1.bias", "numel": 8, "shape": [8]},
          {"name": "layer1.0.ünï/weight", "numel": 12, "shape": [3, 4]}]


def _header(**kw):
    h = {"co3cli_version": "0.1.0", "format": {"id": "fp8-e5m2"}, "coder": {"id": "ans"},
         "model": "auto", "scale_rule": "absmax", "layers": LAYERS, "steps": [0, 5, 10],
         "loss": [2.5, 1.25, float(np.float32(0.1))],
         "source": {"layers": json.dumps([x["name"] for x in LAYERS]), "lr": 0.1}}
    h.update(kw)
    return h


CASES = {
    "plain": {},
    "irregular steps": {"steps": [3, 4, 9]},
    "one step": {"steps": [7], "loss": [1.0]},
    "no loss": {"loss": None},
    "float64 loss": {"loss": [0.1, 0.2, 0.3]},
    "int loss": {"loss": [1, 2, 3]},  # ints stay ints: left in the JSON
    "nan loss": {"loss": [float("nan"), 1.0, 2.0]},
    "huge steps": {"steps": [-2**63, 0, 2**63 - 1]},
    "no steps": {"steps": [], "loss": None},
    "other source layers": {"source": {"layers": "[\"x\"]"}},
    "no source": {"source": None},
    "layer with more keys": {"layers": [{**LAYERS[0], "dtype": "float32"}]},
    "bool dims": {"layers": [{"name": "a", "numel": 1, "shape": [True]}]},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compact_header_gives_back_exactly_the_header(case):
    h = _header(**CASES[case])
    raw = pack_header(h)
    back = unpack_header(raw, 100)
    assert json.dumps(back, sort_keys=True) == json.dumps(h, sort_keys=True)
    assert [type(v) for v in back.get("loss") or []] == [type(v) for v in h.get("loss") or []]


def test_a_loss_beyond_float32s_range_is_kept_as_float64_without_a_warning():
    import warnings

    h = _header(steps=[0, 1], loss=[1e300, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow RuntimeWarning would fail here
        raw = pack_header(h)
    assert unpack_header(raw, 100)["loss"] == [1e300, 0.5]


def test_compact_header_moves_the_repetitive_fields_out_of_the_json():
    h = _header()
    raw = pack_header(h)
    js_end = _json_end(raw)
    assert b"conv1.bias" not in raw[:js_end] and b'"steps"' not in raw[:js_end]
    assert raw[js_end] == 0x17  # layers, steps, loss as float32, the source's layers
    assert len(pack_header(h)) < len(json.dumps(h, separators=(",", ":")).encode()) - 100


def _json_end(raw: bytes) -> int:
    from co3cli.container.framing import read_uvarint

    n, pos = read_uvarint(raw, 0, len(raw), "t")
    return pos + n


def _lies():
    h = _header(steps=[3, 4, 9])
    raw = pack_header(h)
    js_end = _json_end(raw)
    out = {f"cut at {k}": raw[:k] for k in range(0, len(raw), 5)}
    out["extended"] = raw + b"\0"
    out["unknown flag"] = raw[:js_end] + bytes([raw[js_end] | 0x80]) + raw[js_end + 1:]
    out["loss32 and loss64"] = raw[:js_end] + bytes([raw[js_end] | 0x0C]) + raw[js_end + 1:]
    out["no layers flag"] = raw[:js_end] + bytes([raw[js_end] & ~0x01]) + raw[js_end + 1:]
    lay = js_end + 1
    out["too many layers"] = raw[:lay] + b"\x7f" + raw[lay + 1:]
    out["prefix beyond the previous name"] = raw[:lay + 1] + b"\x05" + raw[lay + 2:]
    return out


@pytest.mark.parametrize("lie", sorted(_lies()))
def test_a_lying_or_cut_compact_header_is_refused_in_one_line(lie):
    with pytest.raises(CorruptDataError) as e:
        unpack_header(_lies()[lie], 100)
    assert "\n" not in str(e.value)


def test_compact_steps_are_bounded_before_any_allocation():
    js = b"{}"
    raw = bytes([len(js)]) + js + bytes([2]) + b"\xff\xff\xff\xff\x0f\x00\x02\x00"
    with pytest.raises(CorruptDataError, match="steps"):
        unpack_header(raw, 1000)
    dims = bytes([len(js)]) + js + b"\x01\x01\x00\x01a\x21" + b"\x01" * 33
    with pytest.raises(CorruptDataError, match="dimensions"):
        unpack_header(dims, 1000)


# ---------------------------------------------------------------------------- scales


@pytest.mark.parametrize("n", [0, 1, 3, 60])
def test_scales_round_trip_bit_for_bit(n):
    rng = np.random.default_rng(n)
    s = (rng.lognormal(-8, 3, n)).astype(np.float32)
    if n >= 3:
        s[:3] = np.array([1e-40, np.inf, -0.0], dtype=np.float32)  # any bit pattern
    b = pack_scales(s)
    back, pos = read_scales(b + b"xyz", 0, len(b), n, "t")
    assert pos == len(b) and back.tobytes() == s.tobytes()
    assert len(b) <= 3 + -(-n * (23 + 10) // 8)


@pytest.mark.parametrize("n", [7, 8, 9, 61])
def test_scales_are_packed_and_read_a_few_rows_at_a_time_to_the_same_bytes(n, monkeypatch):
    # bounded memory on a block of many scales: the rows in pieces of SCALE_ROWS (a multiple
    # of 8, so every piece ends on a byte) give the bytes and values of one piece
    from co3cli.container import gcompact

    s = np.random.default_rng(n).lognormal(-8, 3, n).astype(np.float32)
    whole = pack_scales(s)
    monkeypatch.setattr(gcompact, "SCALE_ROWS", 8)
    assert pack_scales(s) == whole
    back, pos = read_scales(whole, 0, len(whole), n, "t")
    assert pos == len(whole) and back.tobytes() == s.tobytes()
    if n * (whole[0] + 23) % 8:  # bits of padding in the last byte
        bad = whole[:-1] + bytes([whole[-1] | 1])  # a padding bit set
        with pytest.raises(CorruptDataError, match="padded"):
            read_scales(bad, 0, len(bad), n, "t")


def test_scales_cost_fewer_bytes_than_float32_when_their_exponents_are_close():
    s = (np.random.default_rng(0).random(100) * 1e-3 + 1e-3).astype(np.float32)
    assert len(pack_scales(s)) < 100 * 4 - 80


@pytest.mark.parametrize("edit", ["short", "width", "first", "padding", "first difference"])
def test_a_bad_scales_section_is_refused(edit):
    s = np.array([1e-3, 2e-3, 3e-3], dtype=np.float32)
    b = bytearray(pack_scales(s))
    if edit == "short":
        b = b[:-1]
    elif edit == "width":
        b[0] = 11
    elif edit == "first":
        b[1:3] = (600).to_bytes(2, "little")
    elif edit == "padding":
        b[-1] |= 1
    else:  # the first zigzag difference of a width > 0 section
        b[3] |= 0x80
    with pytest.raises(CorruptDataError):
        read_scales(bytes(b), 0, len(b), 3, "t")


# ---------------------------------------------------------------------------- GRC blocks


@pytest.fixture
def tiny_dump(tmp_path):
    path = tmp_path / "tiny.h5"
    layers = small_layers(np.random.default_rng(3))
    layers["conv3.weight"] = (np.random.default_rng(4).laplace(size=(5, 576)).astype(np.float32),
                              (8, 8, 3, 3))  # a second layer of row length 72: a stack
    write_dump(path, layers, steps=np.arange(5), loss=np.linspace(2, 1, 5).astype(np.float32),
               attrs={"task": "tiny", "layers": json.dumps(list(layers))})
    return path


@pytest.mark.parametrize("coder", ["ctx", "ans", "huffman"])
def test_compact_groups_round_trip_and_decode_in_any_order(tiny_dump, tmp_path, coder):
    co3, dec = tmp_path / "g.co3", tmp_path / "g.h5"
    res = compress(tiny_dump, co3, coder=coder, model="gennorm-zi", threads=1)
    decompress(co3, dec)
    check_lossless(tiny_dump, co3, dec, "fp8-e5m2", None)
    with open(co3, "rb") as f:
        c = open_co3(f)
        assert c.version == (1, MINOR) and c.header["source"]["layers"].startswith("[")
        blocks = [c.read_layer(i) for i in reversed(range(len(c.offsets)))]
        assert sum(b.nbytes for b in blocks) == c.size - c.header_bytes - c.trailer_bytes
    assert sum(lay["bytes"] for lay in res.layers) == res.nbytes - c.header_bytes - c.trailer_bytes
    if coder == "ctx":
        assert b"GRC\0" in co3.read_bytes() and any(b.stack is not None for b in blocks)


def test_stacks_follow_the_first_member_of_each_row_length():
    assert stacks([72, 8, 72, 10, 8]) == [[0, 2], [1, 4], [3]]


def _block(path):
    data = path.read_bytes()
    with open(path, "rb") as f:
        c = open_co3(f)
        start = c.offsets[0]
        return data, start, c._stops[start]


def _edited(path, edit) -> bytes:
    data, start, stop = _block(path)
    block = bytes(edit(bytearray(data[start:stop - 4])))
    out = bytearray(data[:start] + block + struct.pack("<I", zlib.crc32(block)) + data[stop:])
    return _fix_crcs(out)


def _grc_edits(block: bytes) -> dict:
    """Lies in every field of a GRC block's head (its layout: tag, n, layout, meta, table)."""
    n_at, lay_at, meta_at = 4, 5, 6
    return {"n + 1": lambda b: b[:n_at] + bytes([b[n_at] + 1]) + b[n_at + 1:],
            "layout 2": lambda b: b[:lay_at] + b"\x02" + b[lay_at + 1:],
            "meta longer": lambda b: b[:meta_at] + bytes([b[meta_at] + 2]) + b[meta_at + 1:],
            "meta shorter": lambda b: b[:meta_at] + bytes([b[meta_at] - 2]) + b[meta_at + 1:],
            "extended": lambda b: b + b"\0",
            "cut by one": lambda b: b[:-1],
            "cut in the head": lambda b: b[:8]}


V4 = {"model_version": 4}  # its groups in the layouts of 1.4 (1.5's streams: test_container_v15)


@pytest.mark.parametrize("edit", sorted(_grc_edits(b"")))
def test_a_lying_compact_group_is_refused_in_one_line(tiny_dump, tmp_path, edit):
    co3 = tmp_path / "g.co3"
    compress(tiny_dump, co3, threads=1, coder_params=V4)
    assert _block(co3)[0][_block(co3)[1]:][:4] == b"GRC\0"
    bad = _edited(co3, _grc_edits(b"")[edit])
    with pytest.raises(CorruptDataError) as e:
        c = open_co3(io.BytesIO(bad))
        list(c.layers())
        decompress_bytes(bad, tmp_path)
    assert "\n" not in str(e.value)


def decompress_bytes(data: bytes, tmp_path):
    p = tmp_path / "x.co3"
    p.write_bytes(data)
    decompress(p, tmp_path / "x.h5")


@pytest.mark.parametrize("params", [V4, {}])
def test_every_cut_of_a_compact_group_is_refused(tiny_dump, tmp_path, params):
    co3 = tmp_path / "g.co3"
    compress(tiny_dump, co3, threads=1, coder_params=params)
    data, start, stop = _block(co3)
    for k in range(4, stop - start - 4, 7):
        bad = _edited(co3, lambda b: b[:k])
        with pytest.raises(CorruptDataError):
            c = open_co3(io.BytesIO(bad))
            list(c.layers())
            decompress_bytes(bad, tmp_path)


def test_a_compact_group_in_a_file_claiming_13_is_refused(tiny_dump, tmp_path):
    co3 = tmp_path / "g.co3"
    compress(tiny_dump, co3, threads=1)
    data = bytearray(co3.read_bytes())
    data[10:12] = struct.pack("<H", 3)
    with pytest.raises(CorruptDataError):
        c = open_co3(io.BytesIO(_fix_crcs(data)))
        list(c.layers())


def test_a_compact_group_in_a_step_context_file_is_refused(tiny_dump, tmp_path):
    from test_container_compact import _rewrite  # noqa: F401 (the 1.3 helper writes LYR only)
    from co3cli.container import Co3Writer, Joined

    co3 = tmp_path / "g.co3"
    compress(tiny_dump, co3, threads=1)
    with open(co3, "rb") as f:
        c = open_co3(f)
        blocks, header = list(c.layers()), json.loads(json.dumps(c.header))
    header["coder"] = {"id": "ctx-steps", "key_every": 16, "limit": 60, "precision": 16}
    buf = io.BytesIO()
    w = Co3Writer(buf, header, groups=True)  # as if the coder coded apart: a writer would not
    w.write_group(blocks[0].meta, blocks[0].table,
                  [(b.index, Joined(b.scales.tolist(), b.bodies[0])) for b in blocks])
    w.close()
    with pytest.raises(CorruptDataError, match="step by step"):
        list(open_co3(io.BytesIO(buf.getvalue())).layers())


# ----------------------------------------------------------- files of 1.3

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.mark.parametrize("path", sorted((GOLDEN / "v1.3").glob("*.co3")), ids=lambda p: p.stem)
def test_files_of_13_decode_bit_exactly(path, tmp_path):
    """The fixtures as co3cli wrote them before 1.4 (``tests/golden/v1.3``) decode to what their
    1.4 rewrites (``tests/golden``) decode to, bit for bit, and carry the same header."""
    from test_golden import _same_dump

    with open(path, "rb") as f:
        c = open_co3(f)
        assert c.version == (1, 3)
        old_header = c.header
    with open(GOLDEN / path.name, "rb") as f:
        assert open_co3(f).header == old_header
    out = tmp_path / "out.h5"
    decompress(path, out)
    ref = path.with_suffix(".h5")  # what it decoded to where a later fit moved a scale
    ref = ref if ref.exists() else GOLDEN / f"{path.stem}.h5"
    if ref.exists():
        _same_dump(out, ref)
    else:  # lossless: the stored words of its source
        from test_lossless import read_back

        src = GOLDEN / f"{path.stem.replace('lossless2', 'lossless')}-source.h5"
        back, orig = read_back(out), read_back(src)
        assert list(back) == list(orig)
        for name in orig:
            assert back[name][1] == orig[name][1] and np.array_equal(back[name][0], orig[name][0])


# ----------------------------------------------------------- the ctx prior of a group


def test_octave_prior_is_powers_of_two_summing_to_the_precision():
    from co3cli.tables import octave_freqs

    counts = np.array([0, 3, 40, 1000, 37, 2, 0, 1])
    f = octave_freqs(counts, 12)
    assert f.sum() == 1 << 12 and np.all((f > 0) == (counts > 0))
    others = np.delete(f, np.argmax(counts))
    assert np.all((others & (others - 1)) == 0)  # powers of two (or 0)
    assert octave_freqs(np.zeros(5), 12) is None
    assert octave_freqs(np.ones(8192), 12) is None  # every symbol at 2**-13 rounds to 1: no room


def _kernels(rng, steps=3, k=10, n=1152):
    out = {}
    for b in range(k):
        x = (rng.standard_normal((steps, n)) * rng.lognormal(-6, 1, (steps, 1))).astype(np.float32)
        out[f"l{b}.weight"] = (x, (n // 72, 8, 3, 3))
        out[f"l{b}.bias"] = ((rng.laplace(size=(steps, 8)) * 1e-2).astype(np.float32), (8,))
    return out


def test_the_octave_prior_is_taken_where_the_file_is_smaller(tiny_dump, tmp_path, monkeypatch):
    from co3cli import tables

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # the same header bytes
    src = tmp_path / "k.h5"
    # 20 kernels (ctx model 4 takes the flat prior on 10 of them: the octaves pay from ~20)
    write_dump(src, _kernels(np.random.default_rng(1), k=20), steps=np.arange(3))
    for path, chosen in ((src, True), (tiny_dump, False)):  # 69,600 entries; 7,050
        with_it = compress(path, tmp_path / "a.co3", threads=1)
        with open(tmp_path / "a.co3", "rb") as f:
            meta = open_co3(f).read_layer(0).meta
        with monkeypatch.context() as m:
            m.setattr(tables, "octave_freqs", lambda counts, precision: None)
            without = compress(path, tmp_path / "b.co3", threads=1)
        assert (meta["model"] == "empirical-octaves") == chosen
        assert with_it.nbytes < without.nbytes if chosen else with_it.nbytes == without.nbytes
        decompress(tmp_path / "a.co3", tmp_path / "a.h5")
        check_lossless(path, tmp_path / "a.co3", tmp_path / "a.h5", "fp8-e5m2", None)


@pytest.mark.parametrize("edit", ["extended", "cut", "moved twice"])
def test_a_file_whose_compact_header_lies_is_refused_in_one_line(tiny_dump, tmp_path, monkeypatch,
                                                                 edit):
    from co3cli.container import blocks

    def bad(h):
        raw = pack_header(h)
        if edit == "extended":
            return raw + b"\0"
        if edit == "cut":
            return raw[:-3]
        from co3cli.container.framing import read_uvarint

        n, pos = read_uvarint(raw, 0, len(raw), "t")  # steps in the JSON and moved too
        js = json.dumps({**json.loads(raw[pos:pos + n]), "steps": [0]}).encode()
        return bytes([len(js) & 0x7F | 0x80, len(js) >> 7]) + js + raw[pos + n:]

    from co3cli.container.hdict import deflate

    # .co3 1.5 writes a compact header of 1.4 as its header kind 0
    monkeypatch.setattr(blocks, "pack_header15", lambda h: b"\0" + deflate(bad(h)))
    compress(tiny_dump, tmp_path / "x.co3", threads=1)
    with pytest.raises(CorruptDataError) as e:
        decompress(tmp_path / "x.co3", tmp_path / "x.h5")
    assert "\n" not in str(e.value) and "header" in str(e.value)


def test_many_evenly_spaced_steps_without_a_loss_compress(tmp_path):
    # their steps cost a few bytes whatever their count: the writer's own check of its header
    # once bounded the steps by the header's size and refused 5,000 of them
    src = tmp_path / "s.h5"
    write_dump(src, {"w": (np.random.default_rng(0).laplace(size=(5000, 3)).astype(np.float32),
                           (3,))}, steps=np.arange(0, 10000, 2))
    compress(src, tmp_path / "s.co3", coder="ans", threads=1)
    decompress(tmp_path / "s.co3", tmp_path / "s2.h5")
    check_lossless(src, tmp_path / "s.co3", tmp_path / "s2.h5", "fp8-e5m2", None)


@pytest.mark.slow  # ~5 s: the slow run (CI runs it)
def test_names_sharing_prefixes_are_bounded_in_all():
    # each name the whole previous one plus 1,000 characters: 200 of them are 20 M characters
    # from a few hundred kB of header; a reader stops at what a JSON header could list
    from co3cli.container import hcompact
    from co3cli.errors import InputError
    from co3cli.varint import uvarint

    layers = [{"name": "x" * (1000 * (i + 1)), "numel": 1, "shape": [1]} for i in range(200)]
    js = b'{"steps":[0]}'
    raw = uvarint(len(js)) + js + bytes([hcompact.LAYERS]) + hcompact._layers_bytes(layers)
    assert len(raw) < 300_000
    with pytest.raises(CorruptDataError, match="layer names of more than"):
        unpack_header(raw, 10)
    with pytest.raises(InputError, match="a reader takes at most"):  # nor are they written
        pack_header({"layers": layers, "steps": [0]})


def test_a_header_beyond_what_a_reader_takes_is_refused_when_written(monkeypatch):
    from co3cli.container import hcompact
    from co3cli.errors import InputError

    monkeypatch.setattr(hcompact, "MAX_HEADER_JSON", 1000)
    h = {"layers": [{"name": "w", "numel": 1, "shape": [1]}], "steps": list(range(0, 1800, 3))}
    with pytest.raises(InputError, match="a reader takes at most 1,000"):
        pack_header(h)


def test_a_lone_surrogate_in_a_name_stays_in_the_json():
    h = {"layers": [{"name": "a\udcff", "numel": 2, "shape": [2]}], "steps": [0, 1]}
    raw = pack_header(h)
    assert raw[-1] == 0 and unpack_header(raw, 10) == h  # no field moved


@pytest.mark.parametrize("fmt, key", [(None, "tie_rule"), (None, "co3cli_version"),
                                      ("f32-lossless", "co3cli_version")])
def test_a_header_without_a_key_the_decoder_reads_is_refused_in_one_line(tiny_dump, tmp_path,
                                                                         monkeypatch, fmt, key):
    from co3cli.container import blocks

    from co3cli.container.hcm import pack_header15

    monkeypatch.setattr(blocks, "pack_header15",
                        lambda h: pack_header15({k: v for k, v in h.items() if k != key}))
    compress(tiny_dump, tmp_path / "x.co3", format=fmt, threads=1)
    with pytest.raises(CorruptDataError) as e:  # was a KeyError from the decoder
        decompress(tmp_path / "x.co3", tmp_path / "x.h5")
    assert "\n" not in str(e.value) and f"'{key}' missing" in str(e.value)
    assert not (tmp_path / "x.h5").exists()
