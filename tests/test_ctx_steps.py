"""The coder ``ctx-steps`` (context across steps): round trips, key steps = ``ctx``, random
access, exact consumption, streams, the ``.co3`` 1.2 files, hostile files, fuzz."""

import doctest
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import co3cli.coding.ctx_steps
from co3cli.coding import CODERS, coder_from_config, get_coder
from co3cli.coding.ctx_steps import CtxStepsCoder, key_steps
from co3cli.errors import CorruptDataError, InputError
from test_codec import check_lossless

from conftest import run_cli
from hostile import assemble, base, dumps, header_block, layer_block
from test_ctx import gennorm_weights, structured


def steps_of(rng, nsteps, rows, cols, nsym, drift=0.3):
    """Successive gradient-like steps: one persistent structure plus noise per step, dead
    rows and columns that stay dead."""
    K = (nsym - 1) // 2
    base_mag = rng.normal(0, 1, (rows, 1)) + rng.normal(0, 1, (1, cols)) + rng.normal(0, 1, (rows, cols))
    dead_c = rng.choice(cols, max(cols // 8, 1), replace=False)
    out = []
    for _ in range(nsteps):
        logmag = base_mag + drift * rng.normal(0, 1, (rows, cols))
        m = np.clip(np.round(K - 4 * (3 - logmag)), 0, K).astype(np.int64)
        m[:, dead_c] = 0
        sign = np.where(rng.random((rows, cols)) < 0.5, -1, 1)
        out.append((K + sign * m).astype(np.uint16).ravel())
    return np.array(out)


@pytest.fixture
def rng():
    return np.random.default_rng(2026)


def test_docstring_examples():
    assert doctest.testmod(co3cli.coding.ctx_steps).failed == 0


@pytest.mark.parametrize("key_every", [0, 1, 2, 5])
@pytest.mark.parametrize("nsym,cols", [(255, 40), (15, 40), (255, None), (3, 7)])
def test_round_trip_and_key_steps_are_ctx_bytes(rng, key_every, nsym, cols):
    sym = steps_of(rng, 7, 12, 40, nsym)
    before = sym.copy()
    w = gennorm_weights(nsym)
    table = get_coder("ctx-steps", key_every=key_every).table_from_weights(w)
    ctx = get_coder("ctx", model_version=1).table_from_weights(w)
    bodies = table.encode_steps(sym, cols)
    np.testing.assert_array_equal(sym, before)
    np.testing.assert_array_equal(table.decode_steps(bodies, sym.shape[1], cols), before)
    for t in key_steps(len(sym), key_every):  # a key step is ctx's payload of that step
        assert bodies[t] == ctx.encode(sym[t], cols)
    for t in range(len(sym)):  # random access from the key step
        np.testing.assert_array_equal(table.decode_step(bodies, t, sym.shape[1], cols), sym[t])


def test_context_across_steps_pays_on_persistent_steps(rng):
    sym = steps_of(rng, 8, 40, 100, 255, drift=0.2)
    w = gennorm_weights(255)
    ctx = get_coder("ctx", model_version=1).table_from_weights(w)
    steps = get_coder("ctx-steps", key_every=0).table_from_weights(w)
    n_ctx = sum(len(ctx.encode(r, 100)) for r in sym)
    n_steps = sum(map(len, steps.encode_steps(sym, 100)))
    assert n_steps < 0.97 * n_ctx


def test_threads_do_not_change_the_bytes(rng):
    from co3cli.workers import Workers

    sym = steps_of(rng, 9, 8, 30, 255)
    table = get_coder("ctx-steps", key_every=2).table_from_weights(gennorm_weights(255))
    with Workers(2) as w:
        assert table.encode_steps(sym, 30, run=w.run) == table.encode_steps(sym, 30)
        np.testing.assert_array_equal(table.decode_steps(table.encode_steps(sym, 30), sym.shape[1],
                                                         30, run=w.run), sym)


def test_stream_reset_and_errors(rng):
    sym = steps_of(rng, 4, 6, 20, 255)
    table = get_coder("ctx-steps", key_every=0).table_from_weights(gennorm_weights(255))
    enc, dec = table.stream(sym.shape[1], 20), table.stream(sym.shape[1], 20)
    p0, p1 = enc.encode(sym[0]), enc.encode(sym[1])
    enc.reset()  # a client that skipped rounds: the next step is a key step
    assert enc.next_is_key
    p2 = enc.encode(sym[2])
    assert p2 == table.encode(sym[2], 20)
    np.testing.assert_array_equal(dec.decode(p0), sym[0])
    with pytest.raises(CorruptDataError, match=r"ctx-steps payload \(step 1 after its key step\)"):
        dec.decode(p1 + b"\0")  # a byte too many
    with pytest.raises(CorruptDataError, match="reset"):  # a failed step: unusable until reset
        dec.decode(p1)
    dec.reset()
    np.testing.assert_array_equal(dec.decode(p0), sym[0])
    np.testing.assert_array_equal(dec.decode(p1), sym[1])
    with pytest.raises(InputError, match="symbols; this stream codes"):
        enc.encode(sym[0][:-1])
    bad = sym[3].copy()
    bad[5] = 255
    with pytest.raises(InputError, match="symbol 255 at index 5"):
        enc.encode(bad)
    # the rejected step changed nothing: the stream goes on as if it had not been offered
    p3 = enc.encode(sym[3])
    fresh = table.stream(sym.shape[1], 20)
    fresh.decode(p2)
    np.testing.assert_array_equal(fresh.decode(p3), sym[3])


@pytest.mark.parametrize("cut", ["short", "long", "empty", "step2"])
def test_exact_consumption(rng, cut):
    sym = steps_of(rng, 3, 6, 20, 255)
    table = get_coder("ctx-steps", key_every=0).table_from_weights(gennorm_weights(255))
    bodies = table.encode_steps(sym, 20)
    if cut == "short":
        bodies[1] = bodies[1][:-1]
    elif cut == "long":
        bodies[1] = bodies[1] + b"\x00"
    elif cut == "empty":
        bodies[1] = b""
    else:  # a non-key step decoded in another step's place
        bodies[1], bodies[2] = bodies[2], bodies[1]
    with pytest.raises(CorruptDataError, match="ctx-steps payload"):
        table.decode_steps(bodies, sym.shape[1], 20)


def test_wrong_count_is_caught(rng):
    sym = steps_of(rng, 2, 6, 20, 255)
    table = get_coder("ctx-steps", key_every=0).table_from_weights(gennorm_weights(255))
    bodies = table.encode_steps(sym, 20)
    with pytest.raises(CorruptDataError):
        table.stream(sym.shape[1] + 1, 20).decode(bodies[0])


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 3), st.integers(1, 30), st.sampled_from([3, 15, 255]))
def test_fuzz_round_trip(seed, key_every, n, nsym):
    r = np.random.default_rng(seed)
    cols = int(r.integers(1, n + 1))
    sym = r.integers(0, nsym, (4, n)).astype(np.uint16)
    sym[1:] = np.where(r.random((3, n)) < 0.6, sym[:-1], sym[1:])  # repeats across steps
    table = get_coder("ctx-steps", key_every=key_every).table_from_weights(
        r.random(nsym) + (r.random(nsym) < 0.5))
    bodies = table.encode_steps(sym, cols)
    np.testing.assert_array_equal(table.decode_steps(bodies, n, cols), sym)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.binary(max_size=40))
def test_fuzz_garbage_payloads_raise_corrupt_data_only(seed, junk):
    r = np.random.default_rng(seed)
    sym = steps_of(r, 2, 4, 10, 255)
    table = get_coder("ctx-steps", key_every=0).table_from_weights(gennorm_weights(255))
    bodies = table.encode_steps(sym, 10)
    flipped = bytearray(bodies[1])
    k = int(r.integers(len(flipped)))
    flipped[k] ^= 1 << int(r.integers(8))
    for body in (junk, bytes(flipped)):
        s = table.stream(sym.shape[1], 10)
        s.decode(bodies[0])
        try:
            out = s.decode(body)
        except CorruptDataError:
            continue
        assert out.shape == (sym.shape[1],) and out.max() < 255


def test_coder_config_and_tables():
    assert CODERS.get("ctx-steps") is CtxStepsCoder
    coder = get_coder("ctx-steps", key_every=4, limit=30)
    assert coder.config() == {"id": "ctx-steps", "precision": 16, "limit": 30, "key_every": 4}
    assert coder_from_config(coder.config()).config() == coder.config()
    table = coder.table_from_weights(np.ones(15))
    data = table.to_bytes()
    assert data[0] == 2 and coder.table_from_bytes(data, 15).key_every == 4
    with pytest.raises(CorruptDataError, match="model version 5"):  # a ctx table
        coder.table_from_bytes(get_coder("ctx", limit=30).table_from_weights(np.ones(15)).to_bytes(), 15)
    with pytest.raises(CorruptDataError, match="model version 2"):
        get_coder("ctx", limit=30).table_from_bytes(data, 15)
    for bad in (-1, 1.5, "x", True):
        with pytest.raises(InputError, match="key_every"):
            get_coder("ctx-steps", key_every=bad)


# ------------------------------------------------------------------------------------------
# .co3 files


def test_compress_round_trip_version_and_threads(tmp_path, capsys, monkeypatch):
    from co3cli.codec import compress, decompress
    from co3cli.container import open_co3
    from co3cli.dump import write_dump

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # the one timestamp
    rng = np.random.default_rng(5)
    layers = {"w": ((rng.standard_normal((1, 600)) * np.exp(rng.normal(0, 1, 600)) *
                     np.ones((7, 1)) + 0.3 * rng.standard_normal((7, 600))).astype(np.float32) * 1e-3,
                    (20, 30)),
              "b": ((rng.standard_normal((7, 20)) * 1e-2).astype(np.float32), (20,))}
    src = tmp_path / "d.h5"
    write_dump(src, layers, steps=np.arange(7))
    out = {}
    for coder, params in (("ctx", {}), ("ctx-steps", {"key_every": 3})):
        for threads in (1, 2):
            dst = tmp_path / f"{coder}-{threads}.co3"
            compress(src, dst, coder=coder, coder_params=params, threads=threads)
            out[coder, threads] = dst.read_bytes()
        decompress(tmp_path / f"{coder}-2.co3", tmp_path / f"{coder}.h5", threads=2)
    assert out["ctx", 1] == out["ctx", 2] and out["ctx-steps", 1] == out["ctx-steps", 2]
    assert out["ctx", 1][8:12] == b"\x01\x00\x05\x00"  # 1.5 (every file now)
    assert out["ctx-steps", 1][8:12] == b"\x01\x00\x05\x00"  # 1.5 (context across steps: >= 1.2)
    with open(tmp_path / "ctx-steps-1.co3", "rb") as f:
        assert open_co3(f).header["coder"]["key_every"] == 3
    for coder in ("ctx", "ctx-steps"):  # the same symbols (ctx's group: its short scales)
        check_lossless(src, tmp_path / f"{coder}-2.co3", tmp_path / f"{coder}.h5", "fp8-e5m2", None)
    code, o, e = run_cli("inspect", tmp_path / "ctx-steps-1.co3", "--decode", capsys=capsys)
    assert code == 0 and "v1.5" in o, e


def test_cli_key_every(tmp_path, capsys):
    from co3cli.data import SAMPLE_DATA_DIR

    src = SAMPLE_DATA_DIR / "digits-mlp.h5"
    code, o, e = run_cli("compress", src, "-o", tmp_path / "a.co3", "--coder", "ctx-steps",
                         "--key-every", "2", "-q", capsys=capsys)
    assert code == 0, e
    for args, msg in ((["--coder", "ans", "--key-every", "2"], "unknown parameter"),
                      (["--coder", "ctx-steps", "--key-every", "-3"], "key_every=-3")):
        code, o, e = run_cli("compress", src, "-o", tmp_path / "b.co3", *args, capsys=capsys)
        assert code == 1 and e.startswith("co3: error:") and msg in e and e.count("\n") == 1, e


def _steps_file(minor=2, mutate=None, header_edit=None):
    header, parts = base(steps=3, coder_id="ctx-steps")
    if header_edit:
        header_edit(header)
    if mutate:
        parts = [(m, t, mutate(c)) for m, t, c in parts]
    blocks = [layer_block(i, m, t, c) for i, (m, t, c) in enumerate(parts)]
    return assemble(header_block(zlib.compress(dumps(header), 9), minor=minor), blocks)


def _refused(tmp_path, capsys, data, readers, match):
    p = tmp_path / "x.co3"
    p.write_bytes(data)
    for cmd in readers:
        args = [str(tmp_path / "o.h5") if a == "OUT" else a for a in cmd]
        code, o, e = run_cli(args[0], p, *args[1:], capsys=capsys)
        assert code == 1 and "Traceback" not in e and e.count("\n") == 1, (cmd, e)
        assert e.startswith("co3: error:") and match in e, (cmd, e)
        assert not (tmp_path / "o.h5").exists()


DECODERS = [("inspect", "--decode"), ("decompress", "-o", "OUT"), ("report",)]


def test_hostile_step_files(tmp_path, capsys):
    ok = tmp_path / "ok.co3"
    ok.write_bytes(_steps_file())
    code, o, e = run_cli("inspect", ok, "--decode", capsys=capsys)
    assert code == 0, e
    # a ctx-steps header in a file that says 1.0 or 1.1
    for minor in (0, 1):
        _refused(tmp_path, capsys, _steps_file(minor=minor), [("inspect",)] + DECODERS,
                 "needs 1.2")
    # a non-key step's body cut short / swapped with another step's (CRCs correct)
    _refused(tmp_path, capsys, _steps_file(mutate=lambda c: [c[0], (c[1][0], c[1][1][:-1]), c[2]]),
             DECODERS, "ctx-steps payload")
    _refused(tmp_path, capsys, _steps_file(mutate=lambda c: [c[0], c[2], c[1]]), DECODERS,
             "ctx-steps payload")

    def lie(h):
        h["coder"]["key_every"] = 1  # every step decoded alone: the context steps do not
    _refused(tmp_path, capsys, _steps_file(header_edit=lie), DECODERS, "ctx-steps payload")

    def bad(h):
        h["coder"]["key_every"] = "x"
    _refused(tmp_path, capsys, _steps_file(header_edit=bad), [("inspect", "--decode")],
             "key_every")

    def unkeyed(h):
        del h["coder"]["key_every"]  # the id alone marks context across steps
    for minor in (0, 1):
        _refused(tmp_path, capsys, _steps_file(minor=minor, header_edit=unkeyed),
                 [("inspect",)] + DECODERS, "needs 1.2")


def test_step_groups_refused_in_a_ctx_steps_file(tmp_path, capsys):
    """The writer stores a ctx-steps layer whole or codes it in context: a table-group LYS
    block in such a file is refused, not decoded against the wrong tables."""
    from hostile import steps_block

    header, parts = base(steps=2, coder_id="ctx-steps")
    meta, table, chunks = parts[1]
    blocks = [layer_block(0, *parts[0]), steps_block(1, meta, [(1, 0, table), (1, 0, table)],
                                                     chunks)]
    data = assemble(header_block(zlib.compress(dumps(header), 9), minor=2), blocks)
    _refused(tmp_path, capsys, data, DECODERS, "step groups in a file whose coder")


# ------------------------------------------------------------------------------------------
# In-training streams: the co3 compressor with coder="ctx-steps"


def _rounds(nrounds, n=600, seed=3):
    rng = np.random.default_rng(seed)
    base_scale = np.exp(rng.normal(0, 1, n))
    return [(base_scale * rng.standard_normal(n) * 1e-3).astype(np.float32) for _ in range(nrounds)]


def test_co3_ctx_steps_stream_round_trips_and_pays():
    from co3cli.compressors import get_compressor

    vs = _rounds(12)
    sizes = {}
    for coder in ("ctx", "ctx-steps"):
        comp = get_compressor("co3", coder=coder, refit_every=6)
        send, recv = {"cols": 30}, {"cols": 30}
        total = 0
        for r, v in enumerate(vs):
            pk = comp.compress(v, send, np.random.default_rng(r))
            assert np.array_equal(comp.decompress(pk.payload, v.size, recv), pk.v_hat)
            total += len(pk.payload)
            if coder == "ctx-steps":
                assert pk.payload[0] >> 1 == r % 6  # the stream position; 0 at every refit
        sizes[coder] = total
    assert sizes["ctx-steps"] < sizes["ctx"]


def test_co3_ctx_steps_export_import_same_bytes_and_lost_state_refused():
    from co3cli.compressors import get_compressor

    vs = _rounds(5)
    comp = get_compressor("co3", coder="ctx-steps")
    send, recv = {"cols": 30}, {"cols": 30}
    payloads = [comp.compress(v, send, None).payload for v in vs[:3]]
    for p in payloads:
        comp.decompress(p, 600, recv)
    send2 = comp.import_state(comp.export_state(send))
    recv2 = comp.import_state(comp.export_state(recv))
    a = comp.compress(vs[3], send, None).payload
    assert comp.compress(vs[3], send2, None).payload == a  # restored state: the same bytes
    np.testing.assert_array_equal(comp.decompress(a, 600, recv2), comp.decompress(a, 600, recv))
    # a receiver that lost its state (or is a step behind) refuses, in one line
    with pytest.raises(CorruptDataError, match="receiver's stream is at 0"):
        comp.decompress(a, 600, {"cols": 30, "table": recv["table"]})
    with pytest.raises(CorruptDataError, match="ctx-steps packet 2 step.*stream is at 4"):
        comp.decompress(payloads[2], 600, comp.import_state(comp.export_state(recv)))
    for bad in (b"", b"\x05", comp.export_state(send)["stream"][:-1]):
        doc = comp.export_state(send)
        doc["stream"] = bad
        with pytest.raises(CorruptDataError, match="ctx-steps stream"):
            comp.import_state(doc)


def test_co3_ctx_steps_truncations_are_corrupt():
    from co3cli.compressors import get_compressor

    vs = _rounds(2, n=40)
    comp = get_compressor("co3", coder="ctx-steps")
    send, recv = {}, {}
    p0 = comp.compress(vs[0], send, None).payload
    p1 = comp.compress(vs[1], send, None).payload
    comp.decompress(p0, 40, recv)
    saved = comp.export_state(recv)
    for cut in range(len(p1)):
        with pytest.raises(CorruptDataError):
            comp.decompress(p1[:cut], 40, comp.import_state(saved))
    with pytest.raises(CorruptDataError):
        comp.decompress(p1 + b"\0", 40, comp.import_state(saved))
    # ans keeps refusing flags beyond the table bit
    ans = get_compressor("co3")
    pa = bytearray(ans.compress(vs[0], {}, None).payload)
    pa[0] |= 2
    with pytest.raises(CorruptDataError, match="bad payload header"):
        ans.decompress(bytes(pa), 40, {})


def test_group_blocks_with_ctx_steps(tmp_path, monkeypatch):
    """Small layers pooled into a group block (one table), each member coded in steps."""
    from co3cli.codec import compress, decompress
    from co3cli.container import open_co3
    from co3cli.dump import write_dump

    rng = np.random.default_rng(9)
    layers = {f"b{k}.bias": ((rng.standard_normal((1, 16)) + 0.2 * rng.standard_normal((5, 16)))
                             .astype(np.float32) * 1e-2, (16,)) for k in range(9)}
    src = tmp_path / "d.h5"
    write_dump(src, layers, steps=np.arange(5))
    for coder in ("ctx", "ctx-steps"):
        compress(src, tmp_path / f"{coder}.co3", coder=coder)
        decompress(tmp_path / f"{coder}.co3", tmp_path / f"{coder}.h5")
    with open(tmp_path / "ctx-steps.co3", "rb") as f:
        co3 = open_co3(f)
        assert co3.version == (1, 5) and {b.group for b in co3.layers()} == {0}
    for coder in ("ctx", "ctx-steps"):  # the same symbols (ctx's group: its short scales)
        check_lossless(src, tmp_path / f"{coder}.co3", tmp_path / f"{coder}.h5", "fp8-e5m2", None)


def test_stream_checkpoint_of_earlier_versions_still_loads():
    """``tests/golden/ctx-steps-stream.bin.z``: a checkpoint (:meth:`CtxStepsStream.to_bytes`,
    zlib'd) that co3cli wrote before it kept the column state narrower (int32 estimates,
    int16 counts; the checkpoint keeps int64): it loads, writes back the same bytes and codes
    the next step as that version did. Out-of-range column state is refused."""
    from pathlib import Path

    from co3cli.coding.ctx_steps import CtxStepsStream

    old = zlib.decompress((Path(__file__).parent / "golden" / "ctx-steps-stream.bin.z")
                          .read_bytes())
    rng = np.random.default_rng(20261203)
    K = 127
    w = np.exp(-np.abs(np.arange(255) - K) / 6.0) + 1e-3 * np.arange(255)
    table = get_coder("ctx-steps", key_every=0).table_from_weights(w)
    mag = rng.integers(0, 40, 96)
    steps = [np.clip(K + np.where(rng.random(96) < 0.5, -1, 1)
                     * np.clip(mag + rng.integers(-3, 4, 96), 0, 120), 0, 254).astype(np.uint16)
             for _ in range(3)]
    s = CtxStepsStream.from_bytes(table, old)
    assert s.to_bytes() == old
    assert s.encode(steps[2]).hex() == (
        "68ca04e9b6828c5f967363732372364958410430f920f5b5a0dafdfccc40cefa0873e4768b79e558c444"
        "67a8e06ce8dac1c37ece611b705d08a18a3aec77738c4f77dab39ae64dff2d9738bf")
    fresh = table.stream(96, None)
    fresh.encode(steps[0])
    fresh.encode(steps[1])
    assert fresh.to_bytes() == old  # this version writes the same checkpoint
    # a column estimate beyond int32 (the first of them: after PR, zparent and minit)
    from co3cli.varint import uvarints_to_bytes

    npr, nzp, nmc = co3cli.coding.ctx_steps.skern.state_sizes(table._child.size // 2)
    head = len(uvarints_to_bytes([96, 96, 0, 2, 0]))  # n, cols, key_every, since_key, broken
    # PR int32, zparent int64, minit bool, col_est and col_n int64 (96 columns), row_off int64
    # and row_ok bool (one row), 5 int64 scalars, the previous symbols uint16
    assert len(old) == head + 4 * npr + 8 * nzp + nmc + 2 * 8 * 96 + 8 + 1 + 8 * 5 + 2 * 96
    at = head + 4 * npr + 8 * nzp + nmc
    bad = old[:at] + (1 << 40).to_bytes(8, "little") + old[at + 8:]
    with pytest.raises(CorruptDataError, match="state out of range"):
        CtxStepsStream.from_bytes(table, bad)
