"""Step groups (``co3cli.segments``), stored layers (``co3cli.coding.raw``) and their ``LYS``
blocks (``co3cli.container.tableset``): the split, bit-exact round trips, hostile files, goldens."""

from __future__ import annotations

import numpy as np
import pytest

from co3cli.container import MINOR
from co3cli.errors import CorruptDataError, InputError


def _drift_counts(rng, sizes=(5, 5), n=20000, nsym=31):
    """Per-step histograms: runs of steps drawn from different distributions."""
    rows = []
    for k, size in enumerate(sizes):
        p = rng.dirichlet(np.full(nsym, 0.3 + k))
        rows += [rng.multinomial(n, p) for _ in range(size)]
    return np.array(rows, dtype=np.int64)


def test_known_drift_splits_where_it_drifts():
    from co3cli.segments import segment_steps

    rng = np.random.default_rng(0)
    assert segment_steps(_drift_counts(rng, (4, 6)), side_bits=8 * 300) == [0, 4, 10]
    assert segment_steps(_drift_counts(rng, (3, 2, 5)), side_bits=8 * 300) == [0, 3, 5, 10]


def test_no_drift_stays_one_group():
    from co3cli.segments import segment_steps

    rng = np.random.default_rng(1)
    assert segment_steps(_drift_counts(rng, (12,)), side_bits=8 * 300) == [0, 12]
    # drift too small to pay for a table: one group
    assert segment_steps(_drift_counts(rng, (4, 6), n=30), side_bits=8 * 300) == [0, 10]
    assert segment_steps(np.zeros((1, 5), dtype=np.int64), 100.0) == [0, 1]


def test_many_steps_split_on_block_edges():
    from co3cli.segments import MAX_BLOCKS, block_edges, segment_steps

    rng = np.random.default_rng(2)
    counts = _drift_counts(rng, (100, 100), n=2000)
    edges = segment_steps(counts, side_bits=8 * 300)
    assert len(block_edges(200)) == MAX_BLOCKS + 1
    assert edges[0] == 0 and edges[-1] == 200 and len(edges) == 3
    assert abs(edges[1] - 100) <= 200 // MAX_BLOCKS


def test_plan_keeps_one_table_unless_real_bits_say_otherwise():
    from co3cli.coding import get_coder
    from co3cli.segments import plan_step_groups

    coder = get_coder("ans")
    rng = np.random.default_rng(3)
    counts = _drift_counts(rng, (4, 4))
    single = coder.table_from_weights(counts.sum(axis=0).astype(float))
    plan = plan_step_groups(counts, single, lambda lo, hi, c: coder.table_from_weights(c.astype(float)))
    assert plan.edges == [0, 4, 8] and plan.sizes == [4, 4] and plan.bits < plan.single_bits
    calm = _drift_counts(rng, (8,))
    single = coder.table_from_weights(calm.sum(axis=0).astype(float))
    assert plan_step_groups(calm, single, lambda lo, hi, c: coder.table_from_weights(
        c.astype(float))) is None


def test_small_layers_exit_before_building_tables():
    from co3cli.coding import get_coder
    from co3cli.segments import plan_step_groups

    coder = get_coder("ans")
    counts = _drift_counts(np.random.default_rng(9), (2, 2), n=40)  # drift, but 160 entries
    single = coder.table_from_weights(counts.sum(axis=0).astype(float))
    assert plan_step_groups(counts, single, lambda *a: pytest.fail("built a table")) is None


def test_raw_table_round_trip_and_checks():
    from co3cli.coding.raw import RawTable, raw_bytes

    rng = np.random.default_rng(4)
    for nsym in (1, 2, 15, 253, 256, 1000):
        t = RawTable(nsym)
        for n in (0, 1, 7, 100):
            sym = rng.integers(0, nsym, n).astype(np.uint16)
            blob = t.encode(sym)
            assert len(blob) == raw_bytes(n, nsym)
            assert np.array_equal(t.decode(blob, n), sym)
    t = RawTable(15)
    with pytest.raises(InputError):
        t.encode(np.array([15], dtype=np.uint16))
    with pytest.raises(CorruptDataError, match="need 2"):
        t.decode(b"\x00", 3)
    with pytest.raises(CorruptDataError, match="padding"):
        t.decode(b"\x00\x01", 3)
    with pytest.raises(CorruptDataError, match="nsym"):
        t.decode(b"\xf0", 1)


def _write(tmp_path, layers, steps):
    from co3cli.dump import write_dump

    src = tmp_path / "src.h5"
    write_dump(src, layers, steps=np.arange(steps))
    return src


def _layers(rng, steps=6, drift=True):
    from golden.make_golden import steps_layers

    layers = steps_layers(rng, steps)
    if not drift:
        layers["drift.weight"] = ((rng.laplace(size=(steps, 2400)) * 1e-3).astype(np.float32),
                                  (60, 40))
    return layers


def _blocks(path):
    from co3cli.container import open_co3

    with open(path, "rb") as f:
        co3 = open_co3(f, str(path))
        return co3.version, {b.name: b for b in co3.layers()}


@pytest.mark.parametrize("coder,model", [("ans", "auto"), ("huffman", "gennorm-zi"),
                                         ("ans", "empirical"), ("ctx", "auto")])
def test_round_trip_bit_exact(tmp_path, coder, model):
    from co3cli.codec import compress, decompress

    from test_codec import check_lossless

    src = _write(tmp_path, _layers(np.random.default_rng(5)), 6)
    r = compress(src, tmp_path / "x.co3", coder=coder, model=model, threads=1)
    decompress(tmp_path / "x.co3", tmp_path / "x.h5", threads=2)
    # the symbols of independently recomputed scales, at the scales stored
    check_lossless(src, tmp_path / "x.co3", tmp_path / "x.h5", "fp8-e5m2", None)
    _, blocks = _blocks(tmp_path / "x.co3")
    drift, tiny = blocks["drift.weight"], blocks["tiny.bias"]
    if coder != "ctx":  # order-0 coders split the drifting layer where it drifts (step 3)
        sizes = [s for s, _, _ in drift.step_groups]
        assert 3 in np.cumsum(sizes) and drift.meta["step_groups"] == sizes
    else:
        assert drift.step_groups is None
    assert blocks["calm.weight"].step_groups is None
    if coder == "ctx":  # small layers pooled into one group (co3cli.container.plan)
        assert tiny.group is not None and tiny.meta.get("model") in ("empirical", "uniform")
    else:
        assert (tiny.meta.get("model") == "stored") == (model == "auto")
    assert r.nbytes == (tmp_path / "x.co3").stat().st_size


def test_split_is_smaller_and_threads_do_not_change_bytes(tmp_path, monkeypatch):
    from co3cli.codec import compress

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # the header's "created"

    src = _write(tmp_path, _layers(np.random.default_rng(6)), 6)
    one = compress(src, tmp_path / "a.co3", coder="ans", model="auto", threads=1)
    two = compress(src, tmp_path / "b.co3", coder="ans", model="auto", threads=2)
    assert (tmp_path / "a.co3").read_bytes() == (tmp_path / "b.co3").read_bytes()
    _, blocks = _blocks(tmp_path / "a.co3")
    groups = blocks["drift.weight"].step_groups
    assert len(groups) == 2 and one.nbytes == two.nbytes
    # the split pays: smaller than the same layer with one table of the same model
    lone = compress(src, tmp_path / "c.co3", coder="ans", model="empirical", threads=1)
    assert one.layers[0]["bytes"] < lone.layers[0]["bytes"] * 0.97 or \
        _blocks(tmp_path / "c.co3")[1]["drift.weight"].step_groups is not None


def test_no_drift_file_keeps_the_old_layout(tmp_path):
    from co3cli.codec import compress

    src = _write(tmp_path, _layers(np.random.default_rng(7), drift=False), 6)
    compress(src, tmp_path / "x.co3", coder="ans", model="gennorm-zi", threads=1)
    version, blocks = _blocks(tmp_path / "x.co3")
    assert version == (1, MINOR) and all(b.step_groups is None for b in blocks.values())
    assert b"LYS\0" not in (tmp_path / "x.co3").read_bytes()


@pytest.mark.parametrize("model", ["auto", "gennorm-zi"])  # gennorm-zi: a fit beside the groups
def test_report_and_inspect_read_step_groups(tmp_path, capsys, model):
    from co3cli.codec import compress
    from conftest import run_cli

    src = _write(tmp_path, _layers(np.random.default_rng(8)), 6)
    compress(src, tmp_path / "x.co3", coder="ans", model=model, threads=1)
    for cmd in (("inspect",), ("inspect", "--decode"), ("report",)):
        code, out, err = run_cli(cmd[0], tmp_path / "x.co3", *cmd[1:], capsys=capsys)
        assert code == 0, (cmd, err)


# ------------------------------------------------------------------------------------------
# hostile LYS blocks (``tests/hostile.py``: ``build_steps``, ``STEPS_LIES``; the corpus holds them)


def test_honest_lys_file_reads(tmp_path, capsys):
    from conftest import run_cli
    from hostile import build_steps

    p = tmp_path / "ok.co3"
    p.write_bytes(build_steps())
    for cmd in (("inspect", "--decode"), ("report",)):
        code, _, err = run_cli(cmd[0], p, *cmd[1:], capsys=capsys)
        assert code == 0, err


def test_hostile_lys_refused_in_one_line(tmp_path, capsys):
    from hostile import CORPUS, STEPS_LIES, build_steps
    from test_hostile_co3 import refused_everywhere

    from co3cli.inspection import inspect_co3

    for case, (groups_fn, msg) in STEPS_LIES.items():
        p = tmp_path / f"{case}.co3"
        p.write_bytes(build_steps(groups_fn))
        assert (CORPUS / f"steps_{case}.co3").read_bytes() == p.read_bytes()  # committed
        with pytest.raises(CorruptDataError, match=msg):
            inspect_co3(p)
        refused_everywhere(p, tmp_path, capsys)


def test_short_stored_body_refused_by_the_decoder(tmp_path, capsys):
    from conftest import run_cli
    from hostile import build_steps

    from co3cli.inspection import inspect_co3

    p = tmp_path / "short.co3"
    p.write_bytes(build_steps(lambda g, t: [(2, 1, b"")]))  # its rANS bodies are not the 8 bytes 8 stored symbols take
    inspect_co3(p)  # the layout is sound
    with pytest.raises(CorruptDataError, match="stored payload"):
        inspect_co3(p, decode=True)
    code, _, err = run_cli("inspect", p, "--decode", capsys=capsys)
    assert code == 1 and err.startswith("co3: error:") and err.count("\n") == 1


def test_truncated_and_garbled_tablesets_refused():
    from co3cli.container.tableset import pack_tableset, parse_tableset

    good = pack_tableset([(2, 0, b"abc"), (1, 1, b"")], 3)
    assert parse_tableset(good, 3, "x") == [(2, 0, b"abc"), (1, 1, b"")]
    for cut in range(len(good)):
        with pytest.raises(CorruptDataError):
            parse_tableset(good[:cut], 3, "x")
    with pytest.raises(CorruptDataError, match="unexpected bytes"):
        parse_tableset(good + b"\0", 3, "x")
    with pytest.raises(InputError):
        pack_tableset([(2, 0, b"")], 3)


def test_truncated_lys_file_refused(tmp_path, capsys):
    from conftest import run_cli
    from hostile import build_steps

    data = build_steps()
    for cut in (len(data) // 2, len(data) - 5):
        p = tmp_path / "cut.co3"
        p.write_bytes(data[:cut])
        code, _, err = run_cli("inspect", p, capsys=capsys)
        assert code == 1 and err.startswith("co3: error:") and err.count("\n") == 1


# ------------------------------------------------------------------------------------------
# goldens of the LYS layout


@pytest.mark.parametrize("case", ["steps-default", "steps-fp4-huffman", "steps-fp8-ans-auto"])
def test_golden_steps(case, tmp_path, monkeypatch, capsys):
    from co3cli import __version__
    from co3cli.codec import decompress
    from conftest import run_cli
    from golden.make_golden import EPOCH, HERE, STEPS_CASES, STEPS_SOURCE
    from test_golden import _blocks as golden_blocks
    from test_golden import _header_json, _same_dump, compress_case

    decompress(HERE / f"{case}.co3", tmp_path / "out.h5")
    _same_dump(tmp_path / "out.h5", HERE / f"{case}.h5")
    _, blocks = _blocks(HERE / f"{case}.co3")
    # (the default, ctx, pools its small layers into one group: no step groups there)
    assert any(b.step_groups is not None for b in blocks.values()) or case == "steps-default"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    out = tmp_path / "out.co3"
    compress_case(STEPS_SOURCE, out, case, STEPS_CASES[case], capsys)
    assert golden_blocks(out) == golden_blocks(HERE / f"{case}.co3")
    import json

    if __version__ == json.loads(_header_json(HERE / f"{case}.co3"))["co3cli_version"]:
        assert out.read_bytes() == (HERE / f"{case}.co3").read_bytes()
