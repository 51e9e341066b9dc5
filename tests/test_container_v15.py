"""The ``.co3`` 1.5 layout: the header coded by a text model (``co3cli.coding.textcm``,
``co3cli.container.hcm``), block sizes in the trailer, ``GRC`` groups coded as one stream
(``ctx`` model version 5) with a compact prior: exact round trips, fewer bytes than 1.4, every
field refused when it lies, is cut short or runs on; the files of 1.4 decode bit for bit."""

import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from co3cli.codec import compress, decompress
from co3cli.coding import get_coder
from co3cli.coding.textcm import TextDecoder, TextEncoder
from co3cli.container import MINOR, open_co3
from co3cli.container.framing import trailer15_bytes
from co3cli.container.gcompact import (STREAM, STREAM_STEPS, _prior, _read_prior, pack_group,
                                       parse_group)
from co3cli.container.hcm import (KIND_DEFLATE, KIND_TEXT, _json, pack_header15,
                                  unpack_header15)
from co3cli.container.hcompact import pack_header
from co3cli.container.hdict import deflate
from co3cli.dump import write_dump
from co3cli.errors import CorruptDataError, InputError
from test_codec import check_lossless
from test_container_v14 import CASES, _header

GOLDEN = Path(__file__).resolve().parent / "golden"


# ----------------------------------------------------------- the text coder


def _code(parts):
    """Encode ``parts`` (("prime" | "code", bytes) each); decode them back the same way."""
    cap = sum(len(b) for _, b in parts)
    enc = TextEncoder(cap)
    for kind, b in parts:
        (enc.prime if kind == "prime" else enc.encode)(b)
    payload = enc.finish()
    dec = TextDecoder(payload, cap)
    back = []
    for kind, b in parts:
        if kind == "prime":
            dec.prime(b)
        else:
            back.append(dec.decode(len(b)))
    dec.finish()
    assert back == [b for kind, b in parts if kind == "code"]
    return payload


@pytest.mark.parametrize("seed", range(4))
def test_text_coder_round_trips_with_priming_in_between(seed):
    rng = np.random.default_rng(seed)
    words = [b"conv", b"weight", b"bias", b"layer", b"(3, 3)", b"\n", b" ", b"\xff\x00"]
    text = b"".join(words[k] for k in rng.integers(0, len(words), 400))
    noise = rng.integers(0, 256, 300, dtype=np.uint8).tobytes()
    payload = _code([("prime", text[:200]), ("code", text[200:]), ("prime", noise[:50]),
                     ("code", noise[50:]), ("code", b"")])
    assert len(payload) < len(text[200:]) + len(noise[50:])


def test_text_coder_learns_what_it_was_primed_with():
    text = json.dumps({"layers": [f"layer{i}.conv{j}.weight" for i in range(4) for j in (1, 2)]})
    cold = len(_code([("code", text.encode())]))
    warm = len(_code([("prime", text.encode()), ("code", text.encode())]))
    assert warm < cold / 3


def test_a_primed_state_kept_per_process_is_the_state_priming_gives():
    """A fresh model primed with a long text a second time copies the kept state: every array
    and register equal to priming it anew, and the same payload after it."""
    from co3cli.coding import textcm

    text = bytes(range(256)) * 6 + b"conv.weight 8,8,3,3\n" * 40
    textcm._SNAPS.pop(text, None)
    a, b = TextEncoder(len(text) + 600), TextEncoder(len(text) + 600)
    a.prime(text)          # runs the kernel, keeps the state
    assert text in textcm._SNAPS
    b.prime(text)          # copies it
    for name in ("S", "T", "W", "A1", "A2", "MM", "H", "MH"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    textcm._SNAPS.pop(text)
    c = TextEncoder(len(text) + 600)
    c.prime(text[:1000])   # too short to keep, and not fresh afterwards: runs
    c.prime(text[1000:])
    assert not any(k.startswith(text[:1000]) for k in textcm._SNAPS)
    payloads = {m.encode(b"layer1.0.conv2.weight 16,16,3,3\n") or m.finish() for m in (a, b, c)}
    assert len(payloads) == 1


def test_text_model_tables_are_pinned():
    """The squash and stretch tables both ends of every 1.5 header build: a change is a new
    format (the files written so far would not decode)."""
    import hashlib

    from co3cli.coding import textcm_kernels as k

    digest = [hashlib.sha256(t.astype("<i8").tobytes()).hexdigest()[:16]
              for t in (k.SQUASH, k.STRETCH)]
    assert digest == ["19057d5fd13d67d8", "5c145604940676df"]


def test_text_coder_is_deterministic_and_empty_costs_four_bytes():
    assert _code([("code", b"abc" * 50)]) == _code([("code", b"abc" * 50)])
    assert len(_code([])) == 4


@pytest.mark.parametrize("edit", ["cut", "extended", "flipped", "short"])
def test_text_coder_refuses_a_payload_not_its_encoders(edit):
    text = b"the quick brown fox jumps over the lazy dog " * 20
    payload = _code([("code", text)])
    bad = {"cut": payload[:-1], "extended": payload + b"\0", "short": payload[:3],
           "flipped": payload[:5] + bytes([payload[5] ^ 0x10]) + payload[6:]}[edit]
    with pytest.raises(CorruptDataError):
        dec = TextDecoder(bad, len(text))
        assert dec.decode(len(text)) == text
        dec.finish()


def test_text_coder_bounds_what_it_holds():
    enc = TextEncoder(10)
    enc.prime(b"0123456789")
    with pytest.raises(InputError, match="capacity"):
        enc.encode(b"x")
    dec = TextDecoder(b"\0" * 8, 10)
    with pytest.raises(CorruptDataError, match="capacity"):
        dec.decode(11)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=0, max_size=64), st.integers(0, 300))
def test_text_decoder_on_any_bytes_decodes_or_refuses(blob, n):
    try:
        dec = TextDecoder(blob, 300)
        dec.decode(n)
        dec.finish()
    except CorruptDataError:
        pass


# ----------------------------------------------------------- the header


@pytest.mark.parametrize("case", sorted(CASES))
def test_text_header_gives_back_exactly_the_header(case):
    h = _header(**CASES[case])
    raw = pack_header15(h)
    back = unpack_header15(raw, 100)
    assert _json(back) == _json(h)
    assert list(back) == list(unpack_header(pack_header(h)))  # keys as 1.4 gives them
    assert [type(v) for v in back.get("loss") or []] == [type(v) for v in h.get("loss") or []]


def unpack_header(raw):
    from co3cli.container.hcompact import unpack_header as unpack14

    return unpack14(raw, 100)


PROVENANCE = {"batch_size": 64, "co3cli_version": "0.1.0", "created": "2026-12-03T07:26:48+00:00",
              "config": json.dumps({"lr": 0.1, "seed": 0, "task": "t"}, sort_keys=True),
              "final_loss": float(np.float32(0.1)), "lr": 0.1,
              "model_repr": "Sequential(\n  (conv1): Conv2d(1, 8, kernel_size=(3, 3), stride=(1, "
                            "1), padding=(1, 1), bias=False)\n)"}


@pytest.mark.parametrize("edit", [
    {}, {"created": "2026-12-03T07:26:48Z"}, {"created": "1-01-01T00:00:00+00:00"},
    {"config": json.dumps({"b": 1, "a": 2})}, {"config": "{not json"},
    {"config": json.dumps([1, 2], sort_keys=True)}, {"final_loss": 0.5}, {"final_loss": 1},
    {"model_repr": None}])
def test_provenance_moves_only_where_it_comes_back_exactly(edit):
    src = {**PROVENANCE, **edit, "layers": json.dumps([x["name"] for x in _header()["layers"]])}
    h = _header(created="2026-12-03T07:27:15+00:00", source=src)
    back = unpack_header15(pack_header15(h), 100)
    assert _json(back) == _json(h) and back["source"] == h["source"]


def test_text_header_is_smaller_than_the_compact_one_on_every_golden():
    for path in sorted(GOLDEN.glob("*.co3")):
        with open(path, "rb") as f:
            h = open_co3(f).header
        raw = pack_header15(h)
        assert raw[0] == KIND_TEXT and len(raw) < len(deflate(pack_header(h))), path.name
    h = _header(created="2026-12-03T07:27:15+00:00", source=PROVENANCE)
    assert len(pack_header15(h)) < 0.75 * len(deflate(pack_header(h)))


@pytest.mark.parametrize("name", ["a\nb", "a\udcff", "with space", " lead", "ünï/x"])
def test_odd_layer_names_round_trip(name):
    h = _header(layers=[{"name": name, "numel": 6, "shape": [2, 3]},
                        {"name": "z", "numel": 1, "shape": []}])
    assert _json(unpack_header15(pack_header15(h), 100)) == _json(h)


def test_a_guess_of_deep_alternating_layer_lines_stays_small():
    """Layer lines that would make the module guess 36x their size (31 levels closed and
    opened per line): the reader builds no more of it than it primes."""
    import tracemalloc

    from hostile import text_header

    deep = ".".join(["a"] * 31)
    lines = b"".join(f"{'bc'[k % 2]}{k}.{deep}.w 1\n".encode() for k in range(3000))
    raw = text_header(1, lines, b"{}", b"")
    tracemalloc.start()
    try:
        h = unpack_header15(raw, 100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(h["layers"]) == 3000
    assert peak < 12 << 20, peak  # (the guess in full: 7.7 MB of text, 30 MB at its peak)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.lists(st.sampled_from(["a", "b", "ü", "emb", "0", "\U0001f600"]),
                                   min_size=1, max_size=6),
                          st.lists(st.integers(1, 9), max_size=4)), max_size=30),
       st.integers(0, 3000))
def test_a_guess_cut_at_its_cap_is_the_whole_guess_cut(layers, cap):
    from co3cli.container.hcm import _guess
    from co3cli.container.hprime import module_guess

    layers = [(".".join(parts), shape) for parts, shape in layers]
    assert _guess(layers, cap) == json.dumps(module_guess(layers))[1:-1].encode()[:cap]


def test_a_long_header_is_written_in_the_compact_form(monkeypatch):
    from co3cli.container import hcm

    monkeypatch.setattr(hcm, "MAX_TEXT", 200)
    h = _header()
    raw = pack_header15(h)
    assert raw[0] == KIND_DEFLATE and _json(unpack_header15(raw, 100)) == _json(h)


# ----------------------------------------------------------- the trailer


@pytest.mark.parametrize("blocks, nlayers", [(1, 1), (1, 20), (3, 7), (130, 300), (0, 0)])
def test_trailer_gives_back_every_offset(blocks, nlayers):
    from co3cli.container.framing import _read_trailer15

    rng = np.random.default_rng(blocks)
    first = 100
    sizes = rng.integers(1, 5000, blocks)
    starts = first + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    owner = np.sort(np.concatenate([np.arange(blocks), rng.integers(0, max(blocks, 1),
                                                                     nlayers - blocks)]))
    if blocks:  # the blocks in the order of their first layer
        offsets = [int(starts[k]) for k in owner]
    else:
        offsets = []
    end = first + int(sizes.sum())
    data = b"\0" * end + trailer15_bytes(offsets, end) + b"CRC!" + b"\x89CO3END"
    at, read, _ = _read_trailer15(io.BytesIO(data), len(data), first, nlayers, "t",
                                  b"\x89CO3END")
    assert at == end and read() == offsets


# ----------------------------------------------------------- groups as one stream


def _groups(tmp_path, steps=3, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((1, 1200))
    layers = {f"b{i}.bias": ((rng.standard_normal((steps, 16)) * 1e-3).astype(np.float32), (16,))
              for i in range(6)}
    layers["fc.weight"] = ((base + 0.3 * rng.standard_normal((steps, 1200))).astype(np.float32)
                           * 1e-3, (30, 40))
    layers["conv.weight"] = ((rng.standard_normal((steps, 72)) * 1e-2).astype(np.float32),
                             (8, 1, 3, 3))
    src = tmp_path / "g.h5"
    write_dump(src, layers, steps=np.arange(steps))
    return src


@pytest.mark.parametrize("fmt", ["fp8-e5m2", "fp4-co3"])
def test_default_group_is_one_stream_and_round_trips(tmp_path, fmt):
    src = _groups(tmp_path)
    dst = tmp_path / "g.co3"
    compress(src, dst, format=fmt, threads=1)
    with open(dst, "rb") as f:
        c = open_co3(f)
        assert c.version == (1, MINOR) == (1, 5)
        blocks = list(c.layers())
        assert {b.group for b in blocks} == {0} and all(isinstance(b.stack[3], tuple)
                                                        for b in blocks)
        order = list(range(len(blocks)))[::-1]  # members decode in any order
        c2 = open_co3(f)
        assert [c2.read_layer(i).name for i in order] == [blocks[i].name for i in order]
    decompress(dst, tmp_path / "g2.h5")
    check_lossless(src, dst, tmp_path / "g2.h5", fmt, None)


def test_the_previous_step_codes_correlated_steps_in_fewer_bytes():
    rng = np.random.default_rng(3)
    table = get_coder("ctx").table_from_weights(np.ones(247))
    g = rng.laplace(size=(1, 64, 72)) * np.exp(rng.normal(size=(1, 64, 1)))
    steps = g + 0.2 * rng.laplace(size=(4, 64, 72))
    sym = np.clip(np.round(steps / np.abs(steps).max() * 60) + 123, 0, 246).astype(np.uint16)
    x = sym.reshape(-1)
    segs = [(x.size, 72, 0)]
    lagged = [(x.size, 72, 64 * 72)]
    plain, with_lag = table.encode_segments(x, segs), table.encode_segments(x, lagged)
    assert len(with_lag) < 0.97 * len(plain)
    for s, body in ((segs, plain), (lagged, with_lag)):
        np.testing.assert_array_equal(table.decode_segments(body, s), x)
    with pytest.raises(CorruptDataError):
        table.decode_segments(with_lag, segs)


def test_one_segment_codes_version_4s_bytes():
    rng = np.random.default_rng(1)
    sym = rng.integers(100, 147, 2000).astype(np.uint16)
    v4 = get_coder("ctx", model_version=4).table_from_weights(np.ones(247))
    v5 = get_coder("ctx").table_from_weights(np.ones(247))
    assert v5.encode(sym, cols=40) == v4.encode(sym, cols=40) == v5.encode_segments(
        sym, [(2000, 40, 0)])


@pytest.mark.parametrize("segs", [[(100, 10, 0)], [(60, 10, 0), (30, 4, 0)], [(90, 7, 0)],
                                  [(90, 10, 95)], [(90, 10, 15)], [(0, 1, 0), (90, 10, 0)]])
def test_segments_that_do_not_fit_are_refused(segs):
    table = get_coder("ctx").table_from_weights(np.ones(15))
    with pytest.raises(InputError, match="segments"):
        table.encode_segments(np.full(90, 7, dtype=np.uint16), segs)
    with pytest.raises(InputError, match="version 5"):
        get_coder("ctx", model_version=4).table_from_weights(np.ones(15)).encode_segments(
            np.full(90, 7, dtype=np.uint16), [(90, 10, 0)])


def _prior_of(meta, table):
    raw = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    return _prior(raw, table, STREAM)


@pytest.mark.parametrize("nsym", [15, 247])
def test_flat_and_octave_priors_round_trip_in_a_few_bytes(nsym):
    from co3cli.tables import flat_freqs, octave_freqs

    coder = get_coder("ctx")
    flat = coder.table_from_ints(flat_freqs(nsym, 16)).to_bytes()
    counts = np.random.default_rng(nsym).geometric(0.05, 5000) % nsym
    octave = coder.table_from_ints(octave_freqs(np.bincount(counts, minlength=nsym), 16)).to_bytes()
    for meta, table in (({"model": "uniform"}, flat), ({"model": "empirical-octaves"}, octave)):
        packed = _prior_of(meta, table)
        fields = _prior(json.dumps(meta, separators=(",", ":")).encode(), table, 1)
        assert packed[0] in (1, 2) and len(packed) < (7 if packed[0] == 1 else len(fields))
        m, t, _, pos = _read_prior(packed, 0, len(packed), "g")
        assert (m, t, pos) == (meta, table, len(packed))
    other = coder.table_from_weights(np.arange(1, nsym + 1)).to_bytes()  # neither: fields
    assert _prior_of({"model": "uniform"}, other)[0] == 0


@pytest.mark.parametrize("edit, says", [  # the layout, prior kind, head (3), nsym, scales
    (lambda b: b[:1] + b"\x03" + b[2:], "bad prior kind"),
    (lambda b: b[:3] + b"\x07" + b[4:], "prior of"),   # precision 7
    (lambda b: b[:5] + b"\x80\x04" + b[6:], "prior of 512 symbols"),  # beyond 2**precision
    (lambda b: b[:4], "prior overruns")])
def test_a_lying_flat_prior_is_refused(edit, says):
    from co3cli.tables import flat_freqs

    table = get_coder("ctx", precision=8).table_from_ints(flat_freqs(15, 8)).to_bytes()
    block = pack_group(b'{"model":"uniform"}', table, [np.ones(1, np.float32)], [b"\0" * 4],
                       STREAM)
    layout_at = 5
    assert block[layout_at:layout_at + 6] == bytes([STREAM, 1]) + table[:3] + bytes([15])
    cut = edit(block[layout_at:layout_at + 7])
    bad = block[:layout_at] + cut + (block[layout_at + 7:] if len(cut) >= 7 else b"")
    with pytest.raises(CorruptDataError, match=says):
        parse_group(bad, len(bad), [16], 1, "g")


def test_octave_prior_whose_sum_overflows_is_refused():
    from co3cli.tables import octave_freqs

    coder = get_coder("ctx")
    table = coder.table_from_ints(octave_freqs(np.arange(1, 16) ** 3, 16)).to_bytes()
    packed = _prior_of({"model": "empirical-octaves"}, table)
    assert packed[0] == 2 and packed[4:6] == bytes([15, int(packed[5])])
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    lie = z.compress(bytes([2 * 17] + [0] * 14)) + z.flush()  # one symbol at 2**16
    bad = packed[:6] + bytes([len(lie)]) + lie
    with pytest.raises(CorruptDataError, match="octave prior"):
        _read_prior(bad, 0, len(bad), "g")


def test_a_stream_layout_needs_a_version_5_table(tmp_path):
    from co3cli.container import gcompact

    assert gcompact.body_members(STREAM_STEPS, [3, 5, 3]) == [[0, 2, 1]]
    assert gcompact.stream_segments(STREAM_STEPS, [0, 2, 1], [3, 5, 3], [6, 10, 9], 2) == [
        (12, 3, 6), (18, 3, 9), (20, 5, 10)]
    assert gcompact.stream_segments(STREAM, [0], [3], [6], 2) == [(12, 3, 0)]


# ----------------------------------------------------------- files of 1.4


@pytest.mark.parametrize("path", sorted((GOLDEN / "v1.4").glob("*.co3")), ids=lambda p: p.stem)
def test_files_of_14_decode_bit_exactly(path, tmp_path):
    """The fixtures as co3cli wrote them before 1.5 (``tests/golden/v1.4``) decode to what their
    1.5 rewrites (``tests/golden``) decode to, bit for bit, and carry the same header (those of
    ``ctx`` model version 4 rewritten with that version: ``CTX_OLD_CASES``)."""
    from test_golden import _same_dump

    with open(path, "rb") as f:
        c = open_co3(f)
        assert c.version == (1, 4)
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


# ----------------------------------------------------------- damage anywhere


def _fix_crcs15(data: bytearray) -> bytes:
    hlen = struct.unpack_from("<I", data, 12)[0]
    if 16 + hlen + 4 <= len(data) - 11:
        struct.pack_into("<I", data, 16 + hlen, zlib.crc32(bytes(data[:16 + hlen])))
    struct.pack_into("<I", data, len(data) - 11, zlib.crc32(bytes(data[:-11])))
    return bytes(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_a_15_file_with_its_checksums_fixed(data):
    from hostile import honest15

    good = _HONEST.setdefault("ctx", honest15())
    buf = bytearray(good)
    for _ in range(data.draw(st.integers(1, 3))):
        k = data.draw(st.integers(12, len(buf) - 12))
        buf[k] = data.draw(st.integers(0, 255))
    try:
        c = open_co3(io.BytesIO(_fix_crcs15(buf)))
        from co3cli.container.decode import decode_block, read_co3_setup

        grid, coder = read_co3_setup(c.header)
        for b in c.layers():
            lay = c.header["layers"][b.index]
            decode_block(b, grid, coder, lay["numel"], lay["shape"])
    except CorruptDataError:
        pass


_HONEST: dict = {}


def _stream_file(tmp_path):
    src = _groups(tmp_path)
    dst = tmp_path / "g.co3"
    compress(src, dst, threads=1)
    data = dst.read_bytes()
    with open(dst, "rb") as f:
        c = open_co3(f)
        start = c.offsets[0]
        return data, start, c._stops[start]


@pytest.mark.parametrize("edit", ["layout swapped", "n + 1", "prior kind", "cut", "extended"])
def test_a_lying_stream_group_is_refused_in_one_line(tmp_path, edit):
    data, start, stop = _stream_file(tmp_path)
    block = bytearray(data[start:stop - 4])
    assert block[:4] == b"GRC\0" and block[5] in (STREAM, STREAM_STEPS)
    if edit == "layout swapped":
        block[5] ^= 1
    elif edit == "n + 1":
        block[4] += 1
    elif edit == "prior kind":
        block[6] = 3
    elif edit == "cut":
        block = block[:-1]
    else:
        block += b"\0"
    out = bytearray(data[:start] + bytes(block) + struct.pack("<I", zlib.crc32(bytes(block)))
                    + data[stop:])
    # the trailer's size of the block, then the CRCs
    from hostile import assemble15, split15

    head, _, index = split15(data)
    bad = assemble15(head, [bytes(out[start:len(out) - (len(data) - stop)])], index)
    with pytest.raises(CorruptDataError) as e:
        open_co3(io.BytesIO(bad))
        p = tmp_path / "x.co3"
        p.write_bytes(bad)
        decompress(p, tmp_path / "x.h5")
    assert "\n" not in str(e.value)
