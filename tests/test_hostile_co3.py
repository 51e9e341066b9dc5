"""Hostile ``.co3`` files: valid CRCs, lying content. Every reader refuses each one early,
with one ``co3: error:`` line, no traceback, nothing left behind, bounded memory."""

import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import run_cli
from hostile import (CORPUS, LOSSLESS_LIES, base, base_groups, base_lossless, bomb_z, build,
                     build_groups, dumps, nested)

from co3cli.errors import Co3Error

READERS = [("inspect",), ("inspect", "--decode"), ("decompress", "-o", "OUT"), ("report",)]
ROOT = Path(__file__).resolve().parents[1]


# lies only a decoder (or the report's model fit) can see: plain inspect passes them
DECODE_ONLY = {"short_bodies.co3": 1, "spliced_layers.co3": 1, "bad_meta_fit.co3": 3,
               "group_short_bodies.co3": 1, "v15_stream_v4_table.co3": 1,
               "lossless3_low_state.co3": 1, "lossless3_words_lie.co3": 1,
               "lossless3_short_raw.co3": 1, "lossless3_long_raw.co3": 1}


def refused_everywhere(path, tmp_path, capsys):
    for cmd in READERS[DECODE_ONLY.get(Path(path).name, 0):]:
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        args = [str(out / "d.h5") if a == "OUT" else a for a in cmd]
        code, o, e = run_cli(args[0], path, *args[1:], capsys=capsys)
        assert "Traceback" not in e, (cmd, e)
        assert code == 1, (cmd, code, o, e)
        assert e.startswith("co3: error:") and e.count("\n") == 1, (cmd, e)
        assert os.listdir(out) == [], cmd


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_honest_file_from_the_builder_reads(tmp_path, capsys):
    p = write(tmp_path, "ok.co3", build())
    for cmd in (("inspect", "--decode"), ("report",)):
        code, o, e = run_cli(cmd[0], p, *cmd[1:], capsys=capsys)
        assert code == 0, e


def test_a_file_of_no_step_is_reported_as_such_in_one_line(tmp_path, capsys):
    """A header of no step passes the reader (its layers hold no chunk); ``report`` has nothing
    to measure and says so (it divided by zero: a traceback), ``decompress`` refuses it."""
    from hostile import assemble, dumps, header_block, layer_block

    h, parts = base(2)
    blob = assemble(header_block(zlib.compress(dumps(dict(h, steps=[], loss=[])), 9)),
                    [layer_block(i, meta, table, []) for i, (meta, table, _) in enumerate(parts)])
    p = write(tmp_path, "nosteps.co3", blob)
    for cmd, says in ((("report",), "no step"), (("decompress", "-o", str(tmp_path / "d.h5")),
                                                 "steps")):
        code, o, e = run_cli(cmd[0], p, *cmd[1:], capsys=capsys)
        assert code == 1 and "Traceback" not in e and e.count("\n") == 1 and says in e, (cmd, e)
    code, o, e = run_cli("inspect", p, "--decode", capsys=capsys)
    assert code == 0, e


def test_honest_group_file_from_the_builder_reads(tmp_path, capsys):
    p = write(tmp_path, "ok.co3", build_groups())
    for cmd in (("inspect", "--decode"), ("report",), ("decompress", "-o", str(tmp_path / "d.h5"))):
        code, o, e = run_cli(cmd[0], p, *cmd[1:], capsys=capsys)
        assert code == 0, e


def test_group_corpus_says_what_is_wrong():
    import io

    from co3cli.container import open_co3

    expect = {"group_in_v10.co3": "layer index is inconsistent",
              "group_count_lie.co3": "members declared", "group_member_lie.co3": "where the layer index",
              "group_nested_meta.co3": "levels deep", "group_meta_bomb.co3": "inflates to more than",
              "group_meta_not_zlib.co3": "unreadable metadata",
              "group_nan_scale.co3": "not a positive number",
              "group_body_overrun.co3": "overruns", "group_bad_layers_meta.co3": "per-layer metadata",
              "group_split_offsets.co3": "members declared"}
    for name, msg in expect.items():
        with pytest.raises(Co3Error, match=msg):
            list(open_co3(io.BytesIO((CORPUS / name).read_bytes())).layers())


def test_v15_corpus_says_what_is_wrong():
    """``.co3`` 1.5 (the text-model header, block sizes in the trailer, groups as one stream):
    each lie named in one line."""
    import io

    from co3cli.codec import decode_values
    from co3cli.container import open_co3
    from co3cli.container.decode import read_co3_setup
    from hostile import V15_SAYS

    for name, msg in V15_SAYS.items():
        with pytest.raises(Co3Error, match=msg):
            c = open_co3(io.BytesIO((CORPUS / name).read_bytes()))
            grid, coder = read_co3_setup(c.header)
            for b in c.layers():
                lay = c.header["layers"][b.index]
                decode_values(b, grid, coder, lay["numel"], lay["shape"])


def test_lossless_corpus_says_what_is_wrong(tmp_path, capsys):
    """The version-3 lies (a table or a chunk): ``decompress`` names what is wrong, in one
    line; the honest file they come from decodes."""
    p = write(tmp_path, "ok.co3", build(*base_lossless()))
    code, o, e = run_cli("decompress", p, "-o", str(tmp_path / "ok.h5"), capsys=capsys)
    assert code == 0, e
    for name, (_, _, msg) in LOSSLESS_LIES.items():
        code, o, e = run_cli("decompress", CORPUS / f"lossless3_{name}.co3", "-o",
                             str(tmp_path / "x.h5"), capsys=capsys)
        assert code == 1 and msg in e and e.count("\n") == 1, (name, e)


def test_header_bomb_refused(tmp_path, capsys):
    h, parts = base()
    p = write(tmp_path, "bomb.co3", build(h, parts, header_z=bomb_z(dumps(h), pad_mib=40)))
    code, o, e = run_cli("inspect", p, capsys=capsys)
    assert code == 1 and "inflates to more than" in e, e
    refused_everywhere(p, tmp_path, capsys)


@pytest.mark.parametrize("value", [2**70, "a\0b"])
def test_source_attrs_hdf5_cannot_hold_refused_by_decompress(tmp_path, capsys, value):
    """A header's source attribute no dump can have (an integer beyond 64 bits, a string with
    a NUL): ``decompress`` refuses it in one line and leaves nothing (it raised TypeError /
    ValueError from h5py); the readers that write no dump take the file."""
    h, parts = base()
    p = write(tmp_path, "attr.co3", build(dict(h, source={"task": "x", "bad": value}), parts))
    for cmd in (("inspect", "--decode"), ("report",)):
        code, o, e = run_cli(cmd[0], p, *cmd[1:], capsys=capsys)
        assert code == 0, e
    out = tmp_path / "out"
    out.mkdir()
    code, o, e = run_cli("decompress", p, "-o", out / "d.h5", capsys=capsys)
    assert code == 1 and e.startswith("co3: error:") and e.count("\n") == 1, e
    assert "attribute 'bad'" in e and os.listdir(out) == []


def test_deep_layer_paths_are_checked_in_linear_time_and_memory():
    """Whether a layer's name nests under another's is found without building every folder
    of every name (a name of n components of c bytes made c * n**2 / 2 bytes of them: a 1 MB
    layer line of 500,000, a few hundred bytes of 1.5 header, asked for 250 GB)."""
    import tracemalloc

    from co3cli.container.header import header_problem

    h = dict(base()[0], steps=[0])
    deep = "/".join(["a" * 10_000] * 60)
    tracemalloc.start()
    try:
        ok = header_problem(dict(h, layers=[{"name": deep, "numel": 1, "shape": [1]}]))
        nested = header_problem(dict(h, layers=[{"name": deep, "numel": 1, "shape": [1]},
                                                {"name": deep[:20_001], "numel": 1, "shape": [1]}]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ok is None and "is also a folder" in nested
    assert peak < 6 << 20, peak  # (every folder: 18 MB)
    for layers, says in ((["a", "a/a/a"], "layer 1: name 'a/a/a'"),
                         (["a/a/a", "a/a"], "layer name 'a/a' is also a folder"),
                         (["a.b", "a/c", "a"], "layer name 'a' is also a folder"),
                         (["a", "a.b", "a/c"], "layer 2: name 'a/c' repeats or nests"),
                         (["a", "b", "a"], "layer 2: name 'a' repeats"),
                         (["a-b/c", "a/b", "a-b"], "layer name 'a-b' is also a folder")):
        lays = [{"name": n, "numel": 1, "shape": [1]} for n in layers]
        assert says in (header_problem(dict(h, layers=lays)) or ""), (layers, says)
    for layers in (["a", "ab/c", "a.b/c", "a b"], ["a/b", "a/c/d", "a/cd"]):
        lays = [{"name": n, "numel": 1, "shape": [1]} for n in layers]
        assert header_problem(dict(h, layers=lays)) is None, layers


def test_a_layer_name_of_more_folders_than_hdf5_walks_fast_is_refused():
    """HDF5 (h5py's ``visititems``) walks a name of n folders in ~n**2 steps: decompressing a
    3 KB file whose one layer had 4,000 took 26 s (100,000: hours); at most 64."""
    from co3cli.container.header import header_problem
    from co3cli.dump.schema import MAX_NAME_PARTS, check_layer_name

    h = dict(base()[0], steps=[0])
    for n, ok in ((MAX_NAME_PARTS, True), (MAX_NAME_PARTS + 1, False)):
        name = "/".join(["a"] * n)
        problem = header_problem(dict(h, layers=[{"name": name, "numel": 1, "shape": [1]}]))
        assert (problem is None) == ok and (ok or "folders" in problem), problem
        if ok:
            assert check_layer_name(name) == name
        else:
            with pytest.raises(Co3Error, match="folders"):
                check_layer_name(name)


def test_declared_steps_beyond_file_refused(tmp_path, capsys):
    h, parts = base()
    p = write(tmp_path, "steps.co3", build(dict(h, steps=[0] * 1_000_000), parts))
    code, o, e = run_cli("inspect", p, capsys=capsys)
    assert code == 1 and "more chunks than" in e, e


@pytest.mark.parametrize("where", ["meta", "header"])
def test_deep_nesting_refused(tmp_path, capsys, where):
    h, parts = base()
    if where == "meta":
        data = build(h, [(nested(100_000),) + parts[0][1:]] + parts[1:])
    else:
        data = build(h, parts, header_raw=dumps(h)[:-1] + b',"y":' + nested(100_000) + b"}")
    p = write(tmp_path, "deep.co3", data)
    code, o, e = run_cli("inspect", p, capsys=capsys)
    assert code == 1 and "levels deep" in e, e
    refused_everywhere(p, tmp_path, capsys)


@pytest.mark.parametrize("p2", [30, 40])
def test_lying_numel_refused_by_inspect(tmp_path, capsys, p2):
    h, parts = base()
    lay = [dict(h["layers"][0], shape=[1 << p2], numel=1 << p2)] + h["layers"][1:]
    p = write(tmp_path, "numel.co3", build(dict(h, layers=lay), parts))
    code, o, e = run_cli("inspect", p, capsys=capsys)
    assert code == 1 and "out of memory" not in e and ("block can hold" in e or "limit" in e
                                                             or "1..2147483648" in e), e


def test_million_dims_refused_by_inspect(tmp_path, capsys):
    h, parts = base()
    lay = [dict(h["layers"][0], shape=[1] * 1_000_000 + [128])] + h["layers"][1:]
    p = write(tmp_path, "dims.co3", build(dict(h, layers=lay), parts))
    code, o, e = run_cli("inspect", p, capsys=capsys)
    assert code == 1 and "dimensions" in e, e


def test_inspect_decode_finds_short_bodies(tmp_path, capsys):
    h, parts = base()
    chunks = [(s, b[: len(b) // 2]) for s, b in parts[0][2]]
    p = write(tmp_path, "short.co3", build(h, [(parts[0][0], parts[0][1], chunks)] + parts[1:]))
    code, o, e = run_cli("inspect", p, capsys=capsys)
    assert code == 0  # plain inspect does not decode
    code, o, e = run_cli("inspect", p, "--decode", capsys=capsys)
    assert code == 1 and e.count("\n") == 1, e


def test_inspect_co3_decode_library():
    from co3cli.inspection import inspect_co3

    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "ok.co3"
        p.write_bytes(build())
        assert inspect_co3(p, decode=True).verified


CORPUS_FILES = sorted(CORPUS.glob("*.co3"))


def test_corpus_is_small():
    assert len(CORPUS_FILES) >= 10
    assert sum(p.stat().st_size for p in CORPUS_FILES) < 3 << 20


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
def test_corpus_refused_by_every_reader(path, tmp_path, capsys):
    refused_everywhere(path, tmp_path, capsys)


def test_bomb_peak_memory_in_a_subprocess():
    code = ("import resource, sys\n"
            "from co3cli.cli.app import main\n"
            "try:\n    main(['inspect', sys.argv[1]])\nexcept SystemExit as e:\n    rc = e.code\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')]\n"
            "print(hwm[0].split()[1] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
            " rc)\n")
    r = subprocess.run([sys.executable, "-c", code, str(CORPUS / "header_bomb.co3")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    rss_kib, rc = r.stdout.split()
    assert rc == "1" and "Traceback" not in r.stderr, r.stderr
    assert int(rss_kib) < 300 * 1024, rss_kib


FUZZ = int(os.environ.get("CO3_FUZZ_LONG", "0") == "1")
_H, _PARTS = base()
_GOOD = build(_H, _PARTS)


@settings(max_examples=2000 if FUZZ else 60, deadline=None, derandomize=not FUZZ,
          suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzz_layout(data):
    """Lies in every field of the layout, with correct CRCs: a Co3Error or a clean read."""
    h = dict(_H)
    parts = [list(p) for p in _PARTS]
    kind = data.draw(st.sampled_from(["steps", "numel", "shape", "name", "meta", "table", "body",
                                      "meta_len", "table_len", "body_len", "header"]))
    kw = {}
    if kind == "steps":
        h["steps"] = data.draw(st.lists(st.integers(-2**70, 2**70), max_size=40))
    elif kind in ("numel", "shape"):
        lay = dict(h["layers"][0])
        lay["numel"] = data.draw(st.integers(-5, 2**45))
        lay["shape"] = data.draw(st.lists(st.integers(-2, 2**40), max_size=6)) if kind == "shape" \
            else [lay["numel"]]
        h["layers"] = [lay] + h["layers"][1:]
    elif kind == "name":
        h["layers"] = [dict(h["layers"][0], name=data.draw(st.text(max_size=8)))] + h["layers"][1:]
    elif kind in ("meta", "table", "body"):
        blob = data.draw(st.binary(max_size=64))
        if kind == "meta":
            parts[0][0] = blob
        elif kind == "table":
            parts[0][1] = blob
        else:
            parts[0][2] = [(s, blob) for s, _ in parts[0][2]]
    elif kind == "header":
        raw = data.draw(st.one_of(st.binary(max_size=64), st.just(nested(5000))))
        blob = build(h, [tuple(p) for p in parts], header_raw=raw)
        return _check(blob)
    else:
        n = data.draw(st.integers(0, 2**32 - 1))
        if kind == "body_len":
            kw["body_lens"] = [n, n]
        else:
            kw[kind] = n
    _check(build(h, [tuple(p) for p in parts], **kw))


_GPARTS = base_groups()
_GOOD_GROUPS = build_groups(_GPARTS)


@settings(max_examples=1000 if FUZZ else 40, deadline=None, derandomize=not FUZZ,
          suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzz_group_layout(data):
    """Lies in every field of a group block and of the index pointing at it (correct CRCs)."""
    h, meta, table, members, lone = _GPARTS
    members = [list(m) for m in members]
    kind = data.draw(st.sampled_from(["n", "gaps", "meta", "table", "body", "meta_len",
                                      "table_len", "body_len", "offsets", "minor", "numel"]))
    kw, header = {}, None
    if kind in ("n", "meta_len", "table_len"):
        kw[kind] = data.draw(st.integers(0, 2**32 - 1))
    elif kind == "gaps":
        kw["gaps"] = data.draw(st.lists(st.integers(0, 2**40), min_size=len(members),
                                        max_size=len(members)))
    elif kind == "body_len":
        kw["body_lens"] = data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=2))
    elif kind in ("meta", "table"):
        blob = data.draw(st.binary(max_size=64))
        if kind == "meta" and data.draw(st.booleans()):  # well-formed zlib, lying JSON inside
            blob = zlib.compress(data.draw(st.one_of(st.binary(max_size=64), st.just(nested(5000)),
                                                     st.just(b'{"layers":{"0":1}}'))))
        meta, table = (blob, table) if kind == "meta" else (meta, blob)
    elif kind == "body":
        k = data.draw(st.integers(0, len(members) - 1))
        members[k][1] = [(s, data.draw(st.binary(max_size=16))) for s, _ in members[k][1]]
    elif kind == "offsets":
        good = open_offsets(_GOOD_GROUPS)
        kw["offsets"] = data.draw(st.lists(st.sampled_from(good + [0, 1, 2**40]), min_size=11,
                                           max_size=11))
    elif kind == "minor":
        kw["minor"] = data.draw(st.integers(0, 2**16 - 1))
    else:
        lay = [dict(x) for x in h["layers"]]
        k = data.draw(st.integers(0, len(lay) - 1))
        lay[k]["numel"] = data.draw(st.integers(1, 2**20))
        lay[k]["shape"] = [lay[k]["numel"]]
        header = dict(h, layers=lay)
    _check(build_groups((h, meta, table, [tuple(m) for m in members], lone), header=header, **kw))


_XREF = None


@settings(max_examples=1000 if FUZZ else 40, deadline=None, derandomize=not FUZZ,
          suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzz_xref_layout(data):
    """Lies in every field of an ``LYX`` block and of its chain (correct CRCs): a Co3Error or
    a clean read, through every decoder (whole with a ReferenceCache, per step, a step
    alone)."""
    from hostile import assemble, header_block, layer_block, xref_block, xref_parts

    global _XREF
    if _XREF is None:
        _XREF = xref_parts()
    h, parts, (meta, table, chunks), again = _XREF
    kind = data.draw(st.sampled_from(["source", "index", "meta_len", "table_len", "body_len",
                                      "meta", "table", "version", "body", "chain", "steps"]))
    index, source, lies, chain = 2, 0, {}, 0
    steps = len(h["steps"])
    if kind == "source":
        source = data.draw(st.one_of(st.sampled_from([1, 2, 3, 2**31, 2**32 - 1]),
                                     st.integers(0, 2**32 - 1)))
    elif kind == "index":
        index = data.draw(st.integers(0, 2**32 - 1))
    elif kind in ("meta_len", "table_len"):
        lies[kind] = data.draw(st.integers(0, 2**32 - 1))
    elif kind == "body_len":
        lies["body_lens"] = data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=2,
                                               max_size=2))
    elif kind == "meta":
        meta = data.draw(st.binary(max_size=64))
    elif kind == "table":
        table = data.draw(st.binary(max_size=64))
    elif kind == "version":
        table = bytes([data.draw(st.integers(0, 255))]) + table[1:]
    elif kind == "body":
        chunks = [(s, data.draw(st.binary(max_size=24))) for s, _ in chunks]
    elif kind == "chain":
        chain = data.draw(st.integers(1, 6))
    else:
        steps = data.draw(st.integers(0, 3))
    lays = h["layers"] + [{"name": f"fc{k}.weight", "shape": [8, 16], "numel": 128}
                          for k in range(2, 3 + chain)]
    blocks = [layer_block(0, *parts[0]), layer_block(1, *parts[1]),
              xref_block(index, source, meta, table, chunks, **lies)]
    blocks += [xref_block(k, k - 1, meta, table, again) for k in range(3, 3 + chain)]
    head = dict(h, layers=lays, steps=list(range(steps)))
    _check(assemble(header_block(zlib.compress(dumps(head), 9)), blocks), every_path=True)


def open_offsets(blob: bytes) -> list[int]:
    import io

    from co3cli.container import open_co3

    return sorted(set(open_co3(io.BytesIO(blob)).offsets))


def _check(blob, every_path=False):
    import io

    from co3cli.codec import iter_decode_block, read_co3_setup
    from co3cli.container import open_co3
    from co3cli.container.decode import ReferenceCache, decode_block, decode_step

    try:
        co3 = open_co3(io.BytesIO(blob))
        grid, coder = read_co3_setup(co3.header)
        refs = ReferenceCache(co3) if every_path else None
        for block in co3.layers():
            lay = co3.header["layers"][block.index]
            for _ in iter_decode_block(block, grid, coder, lay["numel"], lay["shape"]):
                pass
            if every_path:
                decode_block(block, grid, coder, lay["numel"], lay["shape"], refs)
                for t in range(len(block.scales)):
                    decode_step(block, grid, coder, lay["numel"], lay["shape"], t)
                refs.done(block.index)
    except Co3Error:
        pass
