"""``ctx`` model version 7: version 5 with mixed probabilities, the model of a ``.co3`` group
of small layers. Exact round trips over segments, exact consumption, fuzzing, its tables
pinned, never named by a coder config, fewer bytes than version 5 where a group is small, and
the files written before it (``tests/golden/v1.5-ctx5``) still decode bit for bit."""

import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from co3cli.coding import CODERS, get_coder
from co3cli.coding.ctx import MIXED_VERSION, SEGMENTS_VERSION, CtxTable
from co3cli.container import open_co3
from co3cli.errors import CorruptDataError, InputError
from co3cli.tables import flat_freqs
from test_ctx import SAMPLE, gennorm_weights, structured
from test_golden import EPOCH

GOLDEN = Path(__file__).resolve().parent / "golden"


def _tables(nsym, weights=None):
    w = gennorm_weights(nsym) if weights is None else weights
    v5 = get_coder("ctx").table_from_weights(w)
    return v5, v5.mixed()


def _round_trip(table, sym, segs):
    before = sym.copy()
    blob = table.encode_segments(sym, segs)
    np.testing.assert_array_equal(sym, before)
    out = table.decode_segments(blob, segs)
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, before)
    for bad in (blob[:-1], blob + b"\x00"):  # exact consumption
        with pytest.raises(CorruptDataError):
            table.decode_segments(bad, segs)
    return blob


def _steps(rng, steps, rows, cols, nsym):
    """``steps`` correlated steps of one gradient-like tensor, flattened step after step."""
    K = (nsym - 1) // 2
    base = structured(rng, rows, cols, nsym, dead_rows=1, dead_cols=1).astype(np.int64) - K
    out = [np.clip(base + rng.integers(-2, 3, base.size) * (base != 0), -K, nsym - 1 - K)
           for _ in range(steps)]
    return (np.concatenate(out) + K).astype(np.uint16)


@pytest.mark.parametrize("nsym", [3, 4, 15, 247, 255])
def test_segments_round_trip_with_and_without_lag(nsym):
    """Members of several row lengths, with and without their previous step, one stream;
    a payload one byte short or long is refused; version 5's payload is not version 7's."""
    rng = np.random.default_rng(nsym)
    a, b, c = _steps(rng, 3, 8, 9, nsym), _steps(rng, 3, 4, 16, nsym), _steps(rng, 3, 1, 8, nsym)
    sym = np.concatenate([a, b, c])
    v5, v7 = _tables(nsym)
    for segs in ([(a.size, 9, 72), (b.size, 16, 64), (c.size, 8, 8)],
                 [(a.size, 9, 0), (b.size, 16, 0), (c.size, 8, 0)],
                 [(sym.size, 1, 0)]):
        blob7 = _round_trip(v7, sym, segs)
        blob5 = _round_trip(v5, sym, segs)
        assert blob7 != blob5
        with pytest.raises(CorruptDataError):
            v5.decode_segments(blob7, segs)


def test_a_plain_encode_is_one_segment():
    rng = np.random.default_rng(2)
    sym = structured(rng, 30, 20, 247)
    _, v7 = _tables(247)
    blob = v7.encode(sym, cols=20)
    assert blob == v7.encode_segments(sym, [(sym.size, 20, 0)])
    np.testing.assert_array_equal(v7.decode(blob, sym.size, cols=20), sym)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), nsym=st.sampled_from([2, 3, 11, 16, 17, 33, 247, 255]),
       seed=st.integers(0, 2**16))
def test_fuzzed_segments_round_trip_and_flips(data, nsym, seed):
    """Random priors (zeros included), symbols, row lengths, lags: every stream round-trips;
    a flipped byte raises or decodes to the input."""
    rng = np.random.default_rng(seed)
    w = rng.random(nsym) ** 3 * (rng.random(nsym) < 0.8)
    w[rng.integers(nsym)] += 1
    _, v7 = _tables(nsym, w)
    segs, parts = [], []
    for _ in range(data.draw(st.integers(1, 4))):
        cols = data.draw(st.integers(1, 12))
        rows = data.draw(st.integers(1, 6))
        steps = data.draw(st.integers(1, 3))
        n = cols * rows
        parts.append(rng.integers(0, nsym, n * steps).astype(np.uint16)
                     if data.draw(st.booleans()) else
                     np.tile(structured(rng, rows, cols, nsym, 0, 0), steps))
        segs.append((n * steps, cols, n if steps > 1 and data.draw(st.booleans()) else 0))
    sym = np.concatenate(parts)
    blob = _round_trip(v7, sym, segs)
    bad = bytearray(blob)
    bad[int(rng.integers(len(bad)))] ^= int(rng.integers(1, 256))
    try:
        out = v7.decode_segments(bytes(bad), segs)
    except CorruptDataError:
        return
    np.testing.assert_array_equal(out, sym)


def test_the_version_is_stored_never_configured():
    """Version 7 tables come from a version 5 table (``mixed``) and from stored bytes; a
    coder config never names it (nor version 6) and the default stays version 5."""
    v5, v7 = _tables(15)
    assert (v5.model_version, v7.model_version) == (SEGMENTS_VERSION, MIXED_VERSION) == (5, 7)
    assert v7.to_bytes()[0] == 7 and v7.to_bytes()[1:] == v5.to_bytes()[1:]
    back = get_coder("ctx").table_from_bytes(v7.to_bytes(), 15)
    assert back.model_version == 7 and back.to_bytes() == v7.to_bytes()
    assert CODERS.build("ctx").model_version == 5
    assert CtxTable(flat_freqs(15, 16), 16).model_version == 5
    for version in (6, 7):
        with pytest.raises(InputError, match="model_version"):
            get_coder("ctx", model_version=version)
    for table in (get_coder("ctx", model_version=4).table_from_weights(np.ones(15)), v7):
        assert not table.has_mixed
        with pytest.raises(InputError, match="mixed"):
            table.mixed()
    with pytest.raises(InputError, match="reference"):
        v7.with_reference()
    bad = bytes([8]) + v7.to_bytes()[1:]
    with pytest.raises(CorruptDataError, match="model version 8"):
        get_coder("ctx").table_from_bytes(bad, 15)


def test_mixer_tables_are_pinned():
    """The squash table and the mixers' constants both ends build: a change is a new model
    version (files written so far would not decode)."""
    from co3cli.coding import ctx_mix_kernels as k

    digest = hashlib.sha256(k.SQ16.astype("<i8").tobytes()).hexdigest()[:16]
    assert digest == "a9b9ca5f838eeb95"
    assert (k.MX_DEPTH, k.MX_CNT, k.MX_W, k.MX_SHIFT, k.MX_LIMIT, k.WCAP) == (
        16, 8, (32768, 19661, 39322, 26214), (15, 15), 255, 1 << 24)
    assert k.SQ16.size == 4096 and k.SQ16.min() == 32 and k.SQ16.max() == 65504
    assert k.SQ16[2048] == 32768 and np.all(np.diff(k.SQ16) >= 0)


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample dump not bundled")
@pytest.mark.parametrize("fmt", ["fp8-e5m2", "fp4-e2m1"])
def test_fewer_bytes_than_version_5_on_small_real_layers(fmt):
    """The point of version 7: a group of small layers, where the statistics are still
    learning, in fewer bytes (the bundled dump's layers, their first steps, as a group
    stream codes them)."""
    from co3cli.dump import Dump
    from co3cli.formats import get_grid
    from co3cli.tables import scale_and_quantize

    grid = get_grid(fmt)
    parts, segs = [], []
    with Dump.open(SAMPLE) as dump:
        for name in dump.layers:
            shape = dump.shape(name)
            data = dump.read_layer(name)[:3].reshape(3, -1)[:, :4096]
            whole_rows = len(shape) > 1 and data.shape[1] % shape[-1] == 0
            cols = shape[-1] if whole_rows else data.shape[1]
            _, sym, _ = scale_and_quantize(data, grid, None)
            parts.append(sym.reshape(-1))
            segs.append((sym.size, cols, data.shape[1]))
    sym = np.concatenate(parts)
    v5 = get_coder("ctx").table_from_ints(flat_freqs(grid.nsym, 16))
    n5 = len(_round_trip(v5, sym, segs))
    n7 = len(_round_trip(v5.mixed(), sym, segs))
    assert n7 < 0.995 * n5


def test_a_default_group_is_coded_with_version_7(tmp_path):
    """``co3 compress`` codes a group of small layers as one version 7 stream (and in fewer
    bytes than the version 5 stream it wrote before)."""
    from co3cli.codec import compress, decompress
    from test_codec import check_lossless

    src = GOLDEN / "source.h5"
    dst = tmp_path / "g.co3"
    compress(src, dst)
    with open(dst, "rb") as f:
        blocks = list(open_co3(f).layers())
    grouped = [b for b in blocks if b.group is not None]
    assert grouped and all(b.table[0] == 7 for b in grouped)
    decompress(dst, tmp_path / "g.h5")
    check_lossless(src, dst, tmp_path / "g.h5", "fp8-e5m2", None)
    assert dst.stat().st_size < (GOLDEN / "v1.5-ctx5" / "fp8-default5.co3").stat().st_size


def test_a_group_keeps_version_5_where_version_7_is_not_smaller(tmp_path, monkeypatch):
    """The writer codes a group's stream with both versions and keeps the smaller: where
    version 7's body is larger (made so here), the file holds version 5's and decodes."""
    import co3cli.codec as codec
    from co3cli.codec import compress, decompress
    from test_codec import check_lossless

    real = codec.stream_body

    def larger_v7(table, syms, layout):
        body = real(table, syms, layout)
        return body + bytes(4096) if table.model_version == MIXED_VERSION else body

    monkeypatch.setattr(codec, "stream_body", larger_v7)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    src, dst = GOLDEN / "source.h5", tmp_path / "g.co3"
    compress(src, dst)
    with open(dst, "rb") as f:
        grouped = [b for b in open_co3(f).layers() if b.group is not None]
    assert grouped and {b.table[0] for b in grouped} == {SEGMENTS_VERSION}
    # the file version 5 groups gave before version 7, byte for byte
    assert dst.read_bytes() == (GOLDEN / "v1.5-ctx5" / "fp8-default5.co3").read_bytes()
    decompress(dst, tmp_path / "g.h5")
    check_lossless(src, dst, tmp_path / "g.h5", "fp8-e5m2", None)


def test_inspect_names_the_version_a_table_stores(capsys):
    """The header's coder config says 5; ``co3 inspect`` shows the groups' 7 per layer (a
    column only where some table differs from the config)."""
    from co3cli.inspection import inspect_co3
    from conftest import run_cli

    new, old = GOLDEN / "fp8-default5.co3", GOLDEN / "v1.5-ctx5" / "fp8-default5.co3"
    rows = {r["name"]: r["ctx_model_version"] for r in inspect_co3(new).layers}
    assert set(rows.values()) == {7} and len(rows) == 5
    assert {r["ctx_model_version"] for r in inspect_co3(old).layers} == {5}
    code, out, err = run_cli("inspect", new, capsys=capsys)
    assert code == 0, err
    head, first = out.splitlines()[2], out.splitlines()[3]
    assert head.split()[-2:] == ["ctx", "model"] and first.split()[-1] == "7"
    code, out, err = run_cli("inspect", old, capsys=capsys)
    assert code == 0 and "ctx model" not in out
    ans = inspect_co3(GOLDEN / "fp8-ans.co3").layers
    assert all(r["ctx_model_version"] is None for r in ans)


def test_the_version_5_group_fixtures_are_there():
    assert sorted(p.name for p in (GOLDEN / "v1.5-ctx5").iterdir()) == sorted(
        f"{c}.{ext}" for c in ("fp4-ctx5", "fp4-default5", "fp8-ctx5", "fp8-default5")
        for ext in ("co3", "h5"))


@pytest.mark.parametrize("path", sorted((GOLDEN / "v1.5-ctx5").glob("*.co3")),
                         ids=lambda p: p.stem)
def test_files_written_with_version_5_groups_decode_bit_exactly(path, tmp_path):
    """The fixtures as co3cli wrote them before version 7 (``tests/golden/v1.5-ctx5``: their
    groups one version 5 stream) decode to what they did and to what their rewrites
    (``tests/golden``, version 7 streams) decode to; the rewrites are smaller."""
    from co3cli.codec import decompress
    from test_golden import _same_dump

    versions = {}
    for p in (path, GOLDEN / path.name):
        with open(p, "rb") as f:
            c = open_co3(f)
            versions[p] = {b.table[0] for b in c.layers() if b.group is not None}
    assert versions == {path: {5}, GOLDEN / path.name: {7}}
    out = tmp_path / "out.h5"
    decompress(path, out)
    _same_dump(out, path.with_suffix(".h5"))
    _same_dump(out, GOLDEN / f"{path.stem}.h5")
    assert (GOLDEN / path.name).stat().st_size < path.stat().st_size
