"""Layers coded given another layer: ``ctx`` model version 6 (bit-exact round trips against a
reference, exact consumption, argument checks), ``.co3`` ``LYX`` blocks (every decoder path,
the writer's checks, hostile files) and ``co3 compress``'s choice (what is coded given what,
the same bytes for any thread count, the plan's bounds), goldens and an FL dump end to end."""

import io

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import run_cli
from golden.make_golden import EPOCH, HERE, XREF_CASES, XREF_SOURCE
from hostile import XREF_LIES, build_xref
from test_golden import _blocks, _same_dump

from co3cli.codec import compress, decompress
from co3cli.coding import get_coder
from co3cli.container import open_co3
from co3cli.container.decode import (ReferenceCache, decode_block, decode_step,
                                     iter_decode_block, read_co3_setup)
from co3cli.dump import Dump, write_dump
from co3cli.errors import Co3Error, CorruptDataError, InputError
from co3cli.formats import get_grid


def pair(nsym, n=3000, seed=0, agree=0.9):
    """A symbol array and a reference that agrees with it on about ``agree`` of its entries
    (the rest one magnitude index away), both gradient-like."""
    rng = np.random.default_rng(seed)
    K = (nsym - 1) // 2
    ref = np.clip(K + np.round(rng.laplace(size=n) * nsym / 16), 0, nsym - 1).astype(np.uint16)
    ref[rng.random(n) < 0.3] = K
    step = np.where(rng.random(n) < agree, 0, rng.choice([-1, 1], n))
    return np.clip(ref.astype(np.int64) + step, 0, nsym - 1).astype(np.uint16), ref


def tables(nsym, sym):
    t4 = get_coder("ctx").table_from_weights(np.bincount(sym, minlength=nsym) + 1.0)
    return t4, t4.with_reference()


def references(sym, ref, nsym):
    K = (nsym - 1) // 2
    return {"close": ref, "zeros": np.full_like(ref, K), "equal": sym.copy(),
            "negated": np.clip(2 * K - ref.astype(np.int64), 0, nsym - 1).astype(np.uint16),
            "unrelated": np.random.default_rng(9).permutation(ref)}


@pytest.mark.parametrize("fmt", ["fp8-e5m2", "fp8-e4m3", "fp4-co3"])
@pytest.mark.parametrize("cols", [None, 1, 60, 3000])
def test_version5_round_trips_against_every_kind_of_reference(fmt, cols):
    nsym = get_grid(fmt).nsym
    sym, ref = pair(nsym)
    t4, t5 = tables(nsym, sym)
    plain = t4.encode(sym, cols=cols)
    sizes = {}
    for kind, r in references(sym, ref, nsym).items():
        before, rbefore = sym.copy(), r.copy()
        body = t5.encode(sym, cols=cols, ref=r)
        assert np.array_equal(sym, before) and np.array_equal(r, rbefore)  # inputs untouched
        assert np.array_equal(t5.decode(body, sym.size, cols=cols, ref=r), sym), kind
        sizes[kind] = len(body)
    assert sizes["zeros"] == len(plain)  # a reference of zeros: version 4's bits
    assert sizes["close"] < 0.8 * len(plain) and sizes["equal"] < 0.2 * len(plain)
    if cols is not None and cols > 1:  # the opposite polarity codes as well (within a few %)
        assert sizes["negated"] < 1.05 * sizes["close"]
    assert sizes["unrelated"] < 1.1 * len(plain)


def test_version5_zeros_reference_is_version4_byte_for_byte():
    nsym = get_grid("fp8-e5m2").nsym
    sym, _ = pair(nsym, seed=3)
    t4, t5 = tables(nsym, sym)
    K = (nsym - 1) // 2
    assert t5.encode(sym, cols=50, ref=np.full_like(sym, K)) == t4.encode(sym, cols=50)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 400), st.integers(1, 40), st.sampled_from(["fp8-e5m2", "fp4-co3"]),
       st.integers(0, 2**32 - 1))
def test_version5_round_trip_property(n, cols, fmt, seed):
    nsym = get_grid(fmt).nsym
    rng = np.random.default_rng(seed)
    sym = rng.integers(0, nsym, n).astype(np.uint16)
    ref = np.where(rng.random(n) < 0.5, sym, rng.integers(0, nsym, n)).astype(np.uint16)
    _, t5 = tables(nsym, sym)
    body = t5.encode(sym, cols=cols, ref=ref)
    assert np.array_equal(t5.decode(body, n, cols=cols, ref=ref), sym)


def test_version5_decoder_consumes_exactly_its_payload():
    nsym = get_grid("fp4-co3").nsym
    sym, ref = pair(nsym, n=2000)
    _, t5 = tables(nsym, sym)
    body = t5.encode(sym, cols=40, ref=ref)
    for bad in (body + b"\0", body[:-1], b""):
        with pytest.raises(CorruptDataError):
            t5.decode(bad, sym.size, cols=40, ref=ref)
    with pytest.raises(CorruptDataError):
        t5.decode(body, sym.size - 1, cols=40, ref=ref[:-1])


def test_version5_arguments_are_checked():
    nsym = get_grid("fp8-e5m2").nsym
    sym, ref = pair(nsym, n=500)
    t4, t5 = tables(nsym, sym)
    assert t5.model_version == 6 and t5.takes_reference and not t4.takes_reference
    with pytest.raises(InputError, match="pass ref"):
        t5.encode(sym, cols=10)
    with pytest.raises(InputError, match="codes no reference"):
        t4.encode(sym, cols=10, ref=ref)
    with pytest.raises(InputError, match="symbols for"):
        t5.encode(sym, cols=10, ref=ref[:-1])
    with pytest.raises(InputError, match="nsym"):
        t5.encode(sym, cols=10, ref=np.full_like(ref, nsym))
    with pytest.raises(InputError, match="version 4"):
        t5.with_reference()
    with pytest.raises(InputError, match="version 4"):
        get_coder("ctx", model_version=3).table_from_weights(np.ones(nsym)).with_reference()
    with pytest.raises(InputError, match="version 4"):
        get_coder("ctx-steps").table_from_weights(np.ones(nsym)).with_reference()
    with pytest.raises(InputError, match="model_version"):
        get_coder("ctx", model_version=6)  # a config never names it
    back = get_coder("ctx").table_from_bytes(t5.to_bytes(), nsym)
    assert back.model_version == 6 and t5.to_bytes()[0] == 6
    assert back.encode(sym, cols=10, ref=ref) == t5.encode(sym, cols=10, ref=ref)


# ---------------------------------------------------------------------------------------
# Files


def fl_like(rng, steps=3, rows=40, cols=600, memory=0.7):
    """An FL ``transmitted.h5``-like dump: ``raw`` g, ``corrected`` v = g + gamma e and
    ``decoded`` (v rounded to a coarse grid), plus a same-shaped layer unrelated to them and
    small biases (pooled into a group)."""
    g = (rng.laplace(size=(steps, rows * cols)) * 1e-3).astype(np.float32)
    e = (rng.laplace(size=g.shape) * 5e-5).astype(np.float32)
    v = g + np.float32(memory) * e
    s = np.abs(v).max(axis=1, keepdims=True) / 8
    q = (np.round(v / s) * s).astype(np.float32)
    out = {}
    for stream, x in (("raw", g), ("corrected", v), ("decoded", q)):
        out[f"{stream}/fc.weight"] = (x, (rows, cols))
        out[f"{stream}/fc.bias"] = ((rng.standard_normal((steps, 8)) * 1e-3).astype(np.float32),
                                    (8,))
    out["other/fc.weight"] = ((rng.standard_normal((steps, rows * cols)) * 1e-2)
                              .astype(np.float32), (rows, cols))
    return out


@pytest.fixture(scope="module")
def fl_dump(tmp_path_factory):
    path = tmp_path_factory.mktemp("xref") / "fl.h5"
    write_dump(path, fl_like(np.random.default_rng(5)), steps=np.arange(3),
               attrs={"streams": '["raw", "corrected", "decoded", "other"]'})
    return path


def blocks(path):
    with open(path, "rb") as f:
        co3 = open_co3(f)
        return {b.name: b for b in co3.layers()}


@pytest.mark.parametrize("fmt", ["fp8-e5m2", "fp4-co3"])
def test_streams_are_coded_given_one_another_and_decode_bit_exactly(fl_dump, tmp_path, fmt):
    res = compress(fl_dump, tmp_path / "x.co3", format=fmt, threads=1)
    given = {r["name"]: r.get("given") for r in res.layers}
    assert given["corrected/fc.weight"] == "raw/fc.weight"
    assert given["decoded/fc.weight"] == "corrected/fc.weight"
    assert given["raw/fc.weight"] is None and given["other/fc.weight"] is None  # unrelated
    assert all(given[n] is None for n in given if n.endswith(".bias"))  # grouped
    # the same values as a file with no layer coded given another (model version 3)
    plain = compress(fl_dump, tmp_path / "p.co3", format=fmt, threads=1,
                     coder_params={"model_version": 3})
    assert all(r.get("given") is None for r in plain.layers)
    decompress(tmp_path / "x.co3", tmp_path / "x.h5")
    decompress(tmp_path / "p.co3", tmp_path / "p.h5")
    _same_dump(tmp_path / "x.h5", tmp_path / "p.h5")
    b = blocks(tmp_path / "x.co3")
    assert b["decoded/fc.weight"].xref.name == "corrected/fc.weight"
    assert b["decoded/fc.weight"].xref.xref.name == "raw/fc.weight"
    size = sum(r["bytes"] for r in res.layers if r["name"].startswith(("corrected/", "decoded/"))
               and r["name"].endswith("weight"))
    old = sum(r["bytes"] for r in plain.layers if r["name"].startswith(("corrected/", "decoded/"))
              and r["name"].endswith("weight"))
    assert size < 0.8 * old


def test_every_decoder_path_agrees(fl_dump, tmp_path):
    compress(fl_dump, tmp_path / "x.co3", format="fp4-co3", threads=1)
    with open(tmp_path / "x.co3", "rb") as f:
        co3 = open_co3(f)
        grid, coder = read_co3_setup(co3.header)
        lays = co3.header["layers"]
        refs = ReferenceCache(co3)
        assert refs._last == {co3.layer_names.index("raw/fc.weight"):
                              co3.layer_names.index("corrected/fc.weight"),
                              co3.layer_names.index("corrected/fc.weight"):
                              co3.layer_names.index("decoded/fc.weight")}
        for block in co3.layers():
            lay = lays[block.index]
            whole = decode_block(block, grid, coder, lay["numel"], lay["shape"])
            cached = decode_block(block, grid, coder, lay["numel"], lay["shape"], refs)
            rows = np.stack(list(iter_decode_block(block, grid, coder, lay["numel"],
                                                   lay["shape"])))
            assert np.array_equal(whole, cached) and np.array_equal(whole, rows)
            for t in range(whole.shape[0]):  # random access: a step alone
                assert np.array_equal(decode_step(block, grid, coder, lay["numel"],
                                                  lay["shape"], t), whole[t])
            refs.done(block.index)
        with pytest.raises(InputError, match="step 3"):
            decode_step(block, grid, coder, lay["numel"], lay["shape"], 3)


def test_threads_share_the_rows_of_a_source_and_of_a_layer_given_it(tmp_path, monkeypatch):
    """``decode_values`` with workers: a layer that an ``LYX`` block is coded given (decoded
    whole for the cache) has its rows shared among the threads as any layer's are (its rows
    were decoded one after another on one thread: the ``raw`` stream of an FL dump, a third of
    its entries, decompressed on one core whatever ``--threads``)."""
    from co3cli.codec import decode_values
    from co3cli.workers import Workers

    a, b = dead_columns(np.random.default_rng(3), steps=4, rows=64, cols=1024, every=1 << 20)
    write_dump(tmp_path / "s.h5", {"raw/w": (a, (64, 1024)), "corrected/w": (b, (64, 1024))},
               steps=np.arange(4), attrs={"streams": '["raw", "corrected"]'})
    compress(tmp_path / "s.h5", tmp_path / "s.co3", threads=1)
    tasks = []
    run = Workers.run
    monkeypatch.setattr(Workers, "run", lambda self, t: tasks.append(len(t)) or run(self, t))
    with open(tmp_path / "s.co3", "rb") as f, Workers(2) as workers:
        co3 = open_co3(f)
        grid, coder = read_co3_setup(co3.header)
        refs = ReferenceCache(co3)
        assert refs.wants(0)  # raw/w: corrected/w is coded given it
        for block in co3.layers():
            lay = co3.header["layers"][block.index]
            alone = decode_values(block, grid, coder, lay["numel"], lay["shape"], workers)
            shared, tasks[:] = tasks[:], []
            cached = decode_values(block, grid, coder, lay["numel"], lay["shape"], workers, refs)
            assert np.array_equal(alone, cached)
            assert tasks == shared[-1:] and shared[-1] >= 2, (block.name, shared, tasks)
            tasks.clear()
            refs.done(block.index)


def test_the_same_bytes_for_any_thread_count(fl_dump, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    compress(fl_dump, tmp_path / "a.co3", threads=1)
    compress(fl_dump, tmp_path / "b.co3", threads=3)
    assert (tmp_path / "a.co3").read_bytes() == (tmp_path / "b.co3").read_bytes()
    decompress(tmp_path / "a.co3", tmp_path / "a.h5", threads=1)
    decompress(tmp_path / "a.co3", tmp_path / "b.h5", threads=3)
    _same_dump(tmp_path / "a.h5", tmp_path / "b.h5")


def test_an_equal_layer_of_a_layer_coded_given_another(tmp_path):
    """``LYE`` of an ``LYX`` layer: the copy decodes given the original's source; a later
    layer close to the copy is coded given the original (never given an ``LYE`` block)."""
    layers = fl_like(np.random.default_rng(6))
    layers["copy/fc.weight"] = (layers["corrected/fc.weight"][0].copy(), (40, 600))
    write_dump(tmp_path / "s.h5", layers, steps=np.arange(3))
    res = compress(tmp_path / "s.h5", tmp_path / "s.co3", format="fp4-co3", threads=1)
    rows = {r["name"]: r for r in res.layers}
    assert rows["copy/fc.weight"]["same_as"] == "corrected/fc.weight"
    assert rows["decoded/fc.weight"]["given"] == "corrected/fc.weight"
    b = blocks(tmp_path / "s.co3")
    assert b["copy/fc.weight"].xref.name == "raw/fc.weight"
    decompress(tmp_path / "s.co3", tmp_path / "d.h5")
    with Dump.open(tmp_path / "d.h5") as d:
        assert np.array_equal(d.read_layer("copy/fc.weight"), d.read_layer("corrected/fc.weight"))


def test_an_equal_layer_stands_for_its_source_as_a_candidate(tmp_path):
    """``copy`` (equal to ``corrected``: an ``LYE`` block) is ``decoded``'s nearest candidate:
    ``decoded`` is coded given ``corrected`` itself."""
    src = fl_like(np.random.default_rng(7))
    layers = {k: src[k] for k in ("raw/fc.weight", "corrected/fc.weight")}
    layers["copy/fc.weight"] = (src["corrected/fc.weight"][0].copy(), (40, 600))
    layers["decoded/fc.weight"] = src["decoded/fc.weight"]
    write_dump(tmp_path / "s.h5", layers, steps=np.arange(3))
    res = compress(tmp_path / "s.h5", tmp_path / "s.co3", format="fp4-co3", threads=2)
    rows = {r["name"]: r for r in res.layers}
    assert rows["copy/fc.weight"]["same_as"] == "corrected/fc.weight"
    assert rows["decoded/fc.weight"]["given"] == "corrected/fc.weight"
    decompress(tmp_path / "s.co3", tmp_path / "d.h5")
    with Dump.open(tmp_path / "d.h5") as d:
        assert np.array_equal(d.read_layer("copy/fc.weight"), d.read_layer("corrected/fc.weight"))


def test_an_alias_whose_source_the_plan_dropped_is_no_candidate(tmp_path, monkeypatch):
    """``q/b`` equals ``p/a``; ``v/b`` (close to both) has ``q/b`` among its candidates but the
    plan keeps ``p/a`` only until ``t/c``: whatever the timing, ``v/b`` is not coded given
    ``p/a`` through ``q/b`` (the same bytes for any thread count)."""
    rng = np.random.default_rng(8)
    a = (rng.laplace(size=(3, 24000)) * 1e-3).astype(np.float32)
    noise = [(rng.laplace(size=a.shape) * 1e-3).astype(np.float32) for _ in range(3)]
    layers = {"p/a": (a, (40, 600)), "q/b": (a.copy(), (40, 600)),
              **{f"{k}/c": (x, (40, 600)) for k, x in zip("rtu", noise)},
              "v/b": (a + np.float32(0.02) * noise[0], (40, 600))}
    write_dump(tmp_path / "s.h5", layers, steps=np.arange(3))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    res = compress(tmp_path / "s.h5", tmp_path / "one.co3", format="fp4-co3", threads=1)
    rows = {r["name"]: r for r in res.layers}
    assert rows["q/b"]["same_as"] == "p/a" and rows["v/b"].get("given") != "p/a"
    compress(tmp_path / "s.h5", tmp_path / "three.co3", format="fp4-co3", threads=3)
    assert (tmp_path / "one.co3").read_bytes() == (tmp_path / "three.co3").read_bytes()


def test_codebooks_and_other_coders_code_no_layer_given_another(fl_dump, tmp_path):
    for coder in ("ans", "ctx-steps"):
        res = compress(fl_dump, tmp_path / "x.co3", coder=coder, threads=1)
        assert all(r.get("given") is None for r in res.layers)


def test_no_references_writes_the_file_of_before(fl_dump, tmp_path, capsys, monkeypatch):
    """``--no-references``: no ``LYX`` block, the bytes of a file whose layers code alone (here:
    the same as with a model version 4 coder whose layers all code alone)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    code, _, err = run_cli("compress", fl_dump, "-o", tmp_path / "n.co3", "--no-references",
                           "-q", capsys=capsys)
    assert code == 0, err
    assert all(b.xref is None for b in blocks(tmp_path / "n.co3").values())
    res = compress(fl_dump, tmp_path / "y.co3")
    assert res.nbytes < (tmp_path / "n.co3").stat().st_size
    import co3cli.references as refs

    monkeypatch.setattr(refs, "TRY_RATIO", 0.0)  # nothing is tried: what --no-references writes
    compress(fl_dump, tmp_path / "z.co3")
    assert (tmp_path / "z.co3").read_bytes() == (tmp_path / "n.co3").read_bytes()


def test_inspect_shows_the_layer_a_layer_is_coded_given(fl_dump, tmp_path, capsys):
    compress(fl_dump, tmp_path / "x.co3", format="fp4-co3", threads=1)
    code, out, err = run_cli("inspect", tmp_path / "x.co3", "--decode", capsys=capsys)
    assert code == 0, err
    assert "coded given" in out.splitlines()[2]
    line = next(x for x in out.splitlines() if x.startswith("decoded/fc.weight"))
    assert line.split()[-1] == "corrected/fc.weight"
    code, out, err = run_cli("report", tmp_path / "x.co3", capsys=capsys)
    assert code == 0, err


def test_writer_refuses_a_reference_it_cannot_decode():
    from co3cli.container import Co3Writer
    from co3cli.container.blocks import Joined
    from co3cli.container.xref import MAX_CHAIN

    n = MAX_CHAIN + 3
    lays = [{"name": f"l{i}", "shape": [4], "numel": 4} for i in range(n)]
    lays[1] = {"name": "l1", "shape": [2, 2], "numel": 4}
    w = Co3Writer(io.BytesIO(), {"layers": lays, "steps": [0, 1]})
    w.write_layer({}, b"", [(1.0, b""), (1.0, b"")])
    for bad in (1, 2, 7):  # another shape, itself, not written
        with pytest.raises(InputError, match="cannot be coded given"):
            w.write_xref({}, b"", [(1.0, b""), (1.0, b"")], bad)
    with pytest.raises(InputError, match="cannot be coded given"):
        w.write_xref({}, b"", Joined([1.0, 1.0], b""), 0)
    w.write_layer({}, b"", [(1.0, b""), (1.0, b"")])
    for k in range(2, 2 + MAX_CHAIN):  # a chain of MAX_CHAIN blocks, then one too many
        w.write_xref({}, b"", [(1.0, b""), (1.0, b"")], k - 1 if k > 2 else 0)
    with pytest.raises(InputError, match="cannot be coded given"):
        w.write_xref({}, b"", [(1.0, b""), (1.0, b"")], 1 + MAX_CHAIN)


def test_the_plan_bounds_candidates_and_kept_symbols():
    from co3cli.references import MAX_CANDIDATES, ReferencePlan

    names = [f"b{i}.attn.weight" for i in range(40)] + ["x/fc.weight", "y/fc.weight"]
    shapes = [(64, 64)] * 40 + [(8, 8)] * 2
    plan = ReferencePlan(names, shapes, grouped=[3], steps=10, keep_bytes=3 * 2 * 10 * 4096)
    assert all(len(c) <= MAX_CANDIDATES for c in plan.candidates.values())
    assert 3 not in plan.last and all(3 not in c for c in plan.candidates.values())
    # 0, 1 and 2 kept; 4 is not (0 is held until 4, its last user, is written)
    assert plan.candidates[41] == [40] and plan.candidates[5] == [2, 1]
    live = [sum(2 * 10 * 4096 for j, end in plan.last.items() if j <= i <= end and j < 40)
            for i in range(40)]
    assert max(live) <= 3 * 2 * 10 * 4096
    streams = ReferencePlan(["raw/a", "raw/b", "corrected/a", "corrected/b", "decoded/a"],
                            [(4, 4)] * 5, [], 2, ["raw", "corrected", "decoded"])
    assert streams.candidates[4] == [2, 0, 3]  # the same name in other streams first


def test_a_file_decodes_each_source_once_in_the_cache_the_plan_assumed(tmp_path, monkeypatch):
    """The plan keeps a layer's symbols until its last user is written, as the reader's
    ``ReferenceCache`` does until it is decoded: with the same budget (3 layers here) every
    source fits and is decoded once (the plan dropped a source at its last user's turn, so
    ``x3`` was kept while ``x0``, ``x1``, ``x2`` were held: the cache refused it, and ``x6``,
    coded given ``x3``, decoded ``x3`` and ``x0`` again)."""
    import co3cli.codec as codec
    from co3cli.container import decode
    from co3cli.references import ReferencePlan

    from co3cli.container.xref import KEEP_BYTES

    assert ReferencePlan.__init__.__defaults__[-2:] == (KEEP_BYTES, 1 << 16)  # one budget,
    assert ReferenceCache.__init__.__defaults__ == (KEEP_BYTES, 1 << 16)  # both sides
    steps, size = 2, 1 * 2 * 64 * 1024  # fp8: a byte per kept symbol, on both sides
    monkeypatch.setattr(ReferencePlan.__init__, "__defaults__", (None, 3 * size, 1 << 16))
    monkeypatch.setattr(ReferenceCache.__init__, "__defaults__", (3 * size, 1 << 16))
    plan = ReferencePlan([f"l{i}" for i in range(40)], [(64, 64)] * 40, [], 10,
                         keep_bytes=3 * 2 * 10 * 4096)
    for i in plan.last:  # held when i's symbols come: the layers kept until i or later
        assert sum(1 for j, end in plan.last.items() if j < i <= end) + 1 <= 3, i
    rng = np.random.default_rng(0)
    xs = [(rng.laplace(size=(steps, 64 * 1024)) * 1e-3).astype(np.float32) for _ in range(3)]
    for k in (0, 1, 2, 3):  # x3 close to x0, x4 to x1, x5 to x2, x6 to x3
        xs.append(xs[k] + (rng.laplace(size=xs[k].shape) * 5e-5).astype(np.float32))
    write_dump(tmp_path / "s.h5", {f"x{i}": (x, (64, 1024)) for i, x in enumerate(xs)},
               steps=np.arange(steps))
    res = compress(tmp_path / "s.h5", tmp_path / "s.co3", threads=1)
    given = {r["name"]: r.get("given") for r in res.layers}
    assert [given[f"x{i}"] for i in (3, 4, 5)] == ["x0", "x1", "x2"]
    names = []
    decode_block = decode.decode_block
    monkeypatch.setattr(codec, "decode_block",
                        lambda block, *a: names.append(block.name) or decode_block(block, *a))
    monkeypatch.setattr(decode, "decode_block",
                        lambda block, *a: names.append(block.name) or decode_block(block, *a))
    decompress(tmp_path / "s.co3", tmp_path / "d.h5", threads=1)
    assert sorted(names) == sorted(set(names)), names


def dead_columns(rng, steps=16, rows=64, cols=256, every=4):
    """A (steps, rows x cols) gradient-like layer whose every ``every``-th column is zero (an
    input that is always 0: an image's border pixels), and one close to it (zero there too)."""
    a = (rng.laplace(size=(steps, rows, cols)) * 1e-3).astype(np.float32)
    a[:, :, ::every] = 0
    b = a + (rng.laplace(size=a.shape) * 5e-5).astype(np.float32) * (a != 0)
    return a.reshape(steps, -1), b.reshape(steps, -1)


def test_the_estimate_sees_every_column(tmp_path):
    """The estimate's strided sample of a 2-D layer covers its columns: with a stride that
    divides the row length (here 4, of 256) it saw only the dead columns, estimated 1.0, and
    the layer was never tried given its near copy."""
    from co3cli.references import conditional_ratio
    from co3cli.tables import scale_and_quantize

    a, b = dead_columns(np.random.default_rng(2))
    grid = get_grid("fp8-e5m2")
    sa, sb = (scale_and_quantize(x, grid, None)[1] for x in (a, b))
    assert conditional_ratio(sb, sa, grid.nsym) < 0.5
    write_dump(tmp_path / "s.h5", {"raw/w": (a, (64, 256)), "corrected/w": (b, (64, 256))},
               steps=np.arange(16), attrs={"streams": '["raw", "corrected"]'})
    res = compress(tmp_path / "s.h5", tmp_path / "s.co3", threads=1)
    assert {r["name"]: r.get("given") for r in res.layers}["corrected/w"] == "raw/w"


def test_the_estimate_costs_memory_of_its_sample_not_of_the_alphabet_squared():
    """A 4095-symbol grid's estimate: a joint histogram of nsym**2 bins was 134 MB (per layer
    and candidate, on every thread at once); the counts of the pairs seen are a few MB, and
    the estimate is the same number (a 247-symbol grid: the histogram's, bit for bit)."""
    import tracemalloc

    from co3cli.references import _entropy, _sample, conditional_ratio

    for fmt in ("uniform12", "fp8-e5m2"):
        nsym = get_grid(fmt).nsym
        sym, ref = pair(nsym, n=16 * 65536, seed=4)
        sym, ref = sym.reshape(16, -1), ref.reshape(16, -1)
        tracemalloc.start()
        ratio = conditional_ratio(sym, ref, nsym)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 8 << 20, (fmt, peak)
        rows, stride = _sample(sym)
        x = sym[rows, ::stride].ravel().astype(np.int64)
        y = ref[rows, ::stride].ravel().astype(np.int64)
        joint = np.bincount(y * nsym + x, minlength=nsym * nsym).reshape(nsym, nsym)
        assert ratio == (_entropy(joint.ravel()) - _entropy(joint.sum(axis=1))) / \
            _entropy(joint.sum(axis=0))


def test_a_layer_too_short_to_pay_is_not_coded_given_another(tmp_path):
    """Two 2-entry-per-row layers that agree: a trial that does not save bytes is dropped."""
    rng = np.random.default_rng(1)
    w = (rng.laplace(size=(2, 70000)) * 1e-3).astype(np.float32)
    noise = (rng.standard_normal(w.shape) * 1e-2).astype(np.float32)
    write_dump(tmp_path / "s.h5", {"a.weight": (w, (70000,)), "b.weight": (noise, (70000,))},
               steps=np.arange(2))
    res = compress(tmp_path / "s.h5", tmp_path / "s.co3", threads=1)
    assert all(r.get("given") is None for r in res.layers)


@pytest.mark.parametrize("name", sorted(XREF_LIES))
def test_lying_references_are_refused(name):
    from co3cli.container.decode import block_table

    kw, msg = XREF_LIES[name]
    with pytest.raises(Co3Error, match=msg):
        co3 = open_co3(io.BytesIO(build_xref(**kw)))
        grid, coder = read_co3_setup(co3.header)
        for block in list(co3.layers()):  # every block's structure, then the tables
            block_table(block, grid, coder)


def test_honest_xref_file_from_the_builder_reads(tmp_path, capsys):
    p = tmp_path / "ok.co3"
    p.write_bytes(build_xref(chain=3))  # a chain of MAX_CHAIN blocks reads
    for cmd in (("inspect", "--decode"), ("report",), ("decompress", "-o", str(tmp_path / "d.h5"))):
        code, _, err = run_cli(cmd[0], p, *cmd[1:], capsys=capsys)
        assert code == 0, (cmd, err)


@pytest.mark.parametrize("case", sorted(XREF_CASES))
def test_golden_xref_files_decode_and_compress_to_the_same_bytes(case, tmp_path, monkeypatch,
                                                                 capsys):
    golden = HERE / f"{case}.co3"
    assert sum(b.xref is not None for b in blocks(golden).values()) == 2
    decompress(golden, tmp_path / "d.h5")
    fmt = dict(zip(XREF_CASES[case][::2], XREF_CASES[case][1::2])).get("--format")
    compress(XREF_SOURCE, tmp_path / "p.co3", format=fmt, coder_params={"model_version": 3})
    decompress(tmp_path / "p.co3", tmp_path / "p.h5")  # the same values, coded without LYX
    _same_dump(tmp_path / "d.h5", tmp_path / "p.h5")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    code, _, err = run_cli("compress", XREF_SOURCE, "-o", tmp_path / "o.co3", *XREF_CASES[case],
                           "-q", capsys=capsys)
    assert code == 0, err
    assert _blocks(tmp_path / "o.co3") == _blocks(golden)
    new, old = blocks(tmp_path / "o.co3"), blocks(golden)  # the same sources
    assert {n: b.xref and b.xref.name for n, b in new.items()} == \
        {n: b.xref and b.xref.name for n, b in old.items()}


def test_an_fl_transmitted_dump_end_to_end(tmp_path, capsys):
    """``co3 simulate fl --dump-rounds`` (two rounds, two clients), then compress, inspect,
    decompress: the corrected and decoded fc1 streams are coded given the earlier ones."""
    pytest.importorskip("torch")
    run = tmp_path / "run"
    code, _, err = run_cli("simulate", "fl", "--task", "mnist5k-mlp", "--clients", "2",
                           "--rounds", "2", "--eval-every", "2", "-c", "co3", "--format",
                           "fp4-co3", "--set", "gamma=0.7", "--set", "batch_size=16",
                           "--dump-rounds", "0,1", "-q", "-o", run, capsys=capsys)
    assert code == 0, err
    code, _, err = run_cli("compress", run / "transmitted.h5", "-o", tmp_path / "t.co3",
                           "--format", "fp4-co3", "-q", capsys=capsys)
    assert code == 0, err
    code, out, err = run_cli("inspect", tmp_path / "t.co3", "--decode", "--json", capsys=capsys)
    assert code == 0, err
    import json

    given = {lay["name"]: lay["given"] for lay in json.loads(out)["layers"]}
    assert given["corrected/fc1.weight"] == "raw/fc1.weight"
    assert given["decoded/fc1.weight"] == "corrected/fc1.weight"
    code, _, err = run_cli("decompress", tmp_path / "t.co3", "-o", tmp_path / "t.h5", "-q",
                           capsys=capsys)
    assert code == 0, err
    with Dump.open(run / "transmitted.h5") as src, Dump.open(tmp_path / "t.h5") as dec:
        assert dec.layers == src.layers
