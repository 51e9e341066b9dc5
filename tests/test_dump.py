"""The co3.gradients/1 dump: round trips, step-by-step writing, and every validation failure."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from co3cli.data import SAMPLE_DATA_DIR
from co3cli.dump import SCHEMA, Dump, DumpWriter, StepWriter, write_dump
from co3cli.errors import InputError


def _layers(steps: int = 3, seed: int = 0) -> dict[str, tuple[np.ndarray, tuple[int, ...]]]:
    rng = np.random.default_rng(seed)
    return {
        # deliberately not in sorted order: the reader must keep this order
        "fc2.weight": (rng.standard_normal((steps, 12)).astype(np.float32), (3, 4)),
        "fc1.weight": (rng.standard_normal((steps, 20)).astype(np.float32), (4, 5)),
        "fc1.bias": (rng.standard_normal((steps, 4)).astype(np.float32), (4,)),
        "scale": (rng.standard_normal((steps, 1)).astype(np.float32), ()),
    }


def _valid(path: Path, steps: int = 3) -> Path:
    write_dump(
        path,
        _layers(steps),
        steps=np.arange(0, 10 * steps, 10),
        loss=np.linspace(2, 1, steps),
        attrs={"task": "unit", "seed": 7, "config": {"a": 1}},
    )
    return path


def _no_leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# -- round trips ----------------------------------------------------------------------------
def test_round_trip_whole_layers(tmp_path):
    path = _valid(tmp_path / "d.h5")
    src = _layers()
    with Dump.open(path) as d:
        assert d.layers == list(src)
        assert d.steps.dtype == np.int64 and d.steps.tolist() == [0, 10, 20]
        np.testing.assert_array_equal(d.loss, np.linspace(2, 1, 3).astype(np.float32))
        for name, (data, shape) in src.items():
            assert d.shape(name) == shape
            assert d.numel(name) == data.shape[1]
            assert d.nbytes(name) == data.size * 4
            g = d.read_layer(name)
            assert g.dtype == np.float32
            np.testing.assert_array_equal(g, data)
        assert d.total_entries == sum(a.size for a, _ in src.values())
        attrs = d.attrs
        assert attrs["schema"] == SCHEMA
        assert attrs["task"] == "unit" and attrs["seed"] == 7 and isinstance(attrs["seed"], int)
        assert attrs["co3cli_version"] and attrs["created"].endswith("+00:00")
        assert d.config == {"a": 1}
    assert _no_leftovers(tmp_path) == ["d.h5"]


def test_round_trip_step_by_step_read_from_file_object(tmp_path):
    rng = np.random.default_rng(1)
    grads = [{"w": rng.standard_normal((2, 3)), "b": rng.standard_normal(3)} for _ in range(5)]
    path = tmp_path / "s.h5"
    w = StepWriter(path, {"w": (2, 3), "b": (3,)}, attrs={"task": "stream"})
    for i, g in enumerate(grads):
        w.write(100 + i, {k: v.reshape(-1).astype(np.float32) for k, v in g.items()},
                loss=float(i))
    w.close()
    buf = io.BytesIO(path.read_bytes())
    with Dump.open(buf) as d:
        assert d.layers == ["w", "b"]
        assert d.shape("w") == (2, 3) and d.shape("b") == (3,)
        assert d.steps.tolist() == [100, 101, 102, 103, 104]
        assert d.loss.tolist() == [0, 1, 2, 3, 4]
        np.testing.assert_array_equal(
            d.read_layer("w"), np.stack([g["w"].reshape(-1) for g in grads]).astype(np.float32)
        )
        spool = d._spool
        assert spool.exists()
    assert not spool.exists()  # the spooled copy is removed on close


def test_stdout_and_stdin(tmp_path, monkeypatch):
    out = io.TextIOWrapper(io.BytesIO())
    monkeypatch.setattr(sys, "stdout", out)
    write_dump("-", _layers(), steps=[1, 2, 3])
    data = out.buffer.getvalue()
    assert data[:8] == b"\x89HDF\r\n\x1a\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    with Dump.open("-") as d:
        assert d.label == "<stdin>" and d.loss is None
        np.testing.assert_array_equal(d.read_layer("fc1.bias"), _layers()["fc1.bias"][0])


def test_nested_names_sorted_without_layers_attr_and_unknown_groups_ignored(tmp_path):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = "co3.gradients/1.4"  # a minor version is still major version 1
        f.attrs["something_new"] = 3
        for name in ["raw/fc1.weight", "raw/b", "a"]:
            ds = f.create_dataset(f"grads/{name}", data=np.ones((2, 6), np.float32))
            ds.attrs["shape"] = np.array([2, 3])
        f["steps"] = np.array([0, 1])
        f.create_dataset("co3/scales/a", data=np.ones(2))
    with Dump.open(path) as d:
        assert d.layers == ["a", "raw/b", "raw/fc1.weight"]
        assert d.attrs["something_new"] == 3


def test_layers_attr_order_then_unlisted_sorted(tmp_path):
    path = _valid(tmp_path / "d.h5")
    with h5py.File(path, "a") as f:
        f.attrs["layers"] = json.dumps(["fc1.bias", "scale"])
    with Dump.open(path) as d:
        assert d.layers == ["fc1.bias", "scale", "fc1.weight", "fc2.weight"]


# -- validation at open -----------------------------------------------------------------------
def _mutated(tmp_path: Path, mutate) -> Path:
    path = _valid(tmp_path / "bad.h5")
    with h5py.File(path, "a") as f:
        mutate(f)
    return path


def _replace(f, name, data, shape=None):
    del f[name]
    ds = f.create_dataset(name, data=data)
    if shape is not None:
        ds.attrs["shape"] = np.asarray(shape, np.int64)


CASES = {
    "missing schema": (lambda f: f.attrs.__delitem__("schema"), "'schema' is missing"),
    "wrong schema": (
        lambda f: f.attrs.__setitem__("schema", "something/1"),
        "unsupported schema 'something/1'",
    ),
    "future version": (
        lambda f: f.attrs.__setitem__("schema", "co3.gradients/2"),
        "unsupported schema 'co3.gradients/2'",
    ),
    "missing grads": (lambda f: f.__delitem__("grads"), "group 'grads' is missing"),
    "grads not a group": (
        lambda f: (f.__delitem__("grads"), f.create_dataset("grads", data=1)),
        "group 'grads' is missing",
    ),
    "empty grads": (
        lambda f: [f["grads"].__delitem__(k) for k in list(f["grads"])],
        "holds no datasets",
    ),
    "missing steps": (lambda f: f.__delitem__("steps"), "dataset 'steps' is missing"),
    "float steps": (lambda f: _replace(f, "steps", np.zeros(3)), "'steps' must be 1-D integers"),
    "2-D steps": (
        lambda f: _replace(f, "steps", np.zeros((3, 1), np.int64)),
        "'steps' must be 1-D integers",
    ),
    "empty steps": (lambda f: _replace(f, "steps", np.zeros(0, np.int64)), "'steps' is empty"),
    "loss length": (
        lambda f: _replace(f, "loss", np.zeros(2, np.float32)),
        "'loss' has 2 entries but 'steps' has 3",
    ),
    "layer rows": (
        lambda f: _replace(f, "grads/fc1.bias", np.zeros((2, 4), np.float32), (4,)),
        "'grads/fc1.bias' has 2 rows but 'steps' has 3",
    ),
    "wrong numel": (
        lambda f: f["grads/fc1.weight"].attrs.__setitem__("shape", np.array([4, 6])),
        "'grads/fc1.weight' has 20 entries per row but its 'shape' attribute (4, 6) has 24",
    ),
    "empty layer": (
        lambda f: _replace(f, "grads/fc1.bias", np.zeros((3, 0), np.float32), (0,)),
        "layer 'fc1.bias' is empty",
    ),
    "1-D layer": (
        lambda f: _replace(f, "grads/fc1.bias", np.zeros(3, np.float32), (3,)),
        "'grads/fc1.bias' must be 2-D",
    ),
    "no shape attr": (
        lambda f: f["grads/fc1.bias"].attrs.__delitem__("shape"),
        "'grads/fc1.bias' has no 'shape' attribute",
    ),
    "complex layer": (
        lambda f: _replace(f, "grads/fc1.bias", np.zeros((3, 4), np.complex64), (4,)),
        "'grads/fc1.bias' has dtype complex64",
    ),
    "layers attr names missing": (
        lambda f: f.attrs.__setitem__("layers", json.dumps(["nope"])),
        "lists ['nope'] but there is no such dataset",
    ),
    "layers attr not json": (
        lambda f: f.attrs.__setitem__("layers", "fc1"),
        "'layers' is not a JSON list",
    ),
    "layer 64 folders deep": (
        lambda f: f.create_dataset("grads/" + "a/" * 64 + "b", data=np.zeros((3, 4), np.float32)
                                   ).attrs.__setitem__("shape", np.array([4])),
        "has 64 folders (limit 63)",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_structure_rejected(tmp_path, case):
    mutate, message = CASES[case]
    path = _mutated(tmp_path, mutate)
    with pytest.raises(InputError) as info:
        Dump.open(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_not_hdf5_truncated_missing_and_empty_stdin(tmp_path, monkeypatch):
    text = tmp_path / "notes.h5"
    text.write_text("just some text\n")
    with pytest.raises(InputError, match=r"notes\.h5 is not a readable HDF5 file: "):
        Dump.open(text)
    good = _valid(tmp_path / "good.h5").read_bytes()
    for cut in (len(good) // 2, len(good) - 100, 600):
        trunc = tmp_path / f"trunc{cut}.h5"
        trunc.write_bytes(good[:cut])
        with pytest.raises(InputError, match=rf"trunc{cut}\.h5 is not a readable HDF5 file: "):
            with Dump.open(trunc) as d:
                for name in d.layers:
                    d.read_layer(name)
    with pytest.raises(InputError, match="does not exist"):
        Dump.open(tmp_path / "nothing.h5")
    with pytest.raises(InputError, match="is a directory"):
        Dump.open(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    with pytest.raises(InputError, match="<stdin> is empty"):
        Dump.open("-")


def test_bad_policy_and_unknown_layer(tmp_path):
    path = _valid(tmp_path / "d.h5")
    with pytest.raises(InputError, match="nonfinite='skip' is not one of error, zero"):
        Dump.open(path, nonfinite="skip")
    with Dump.open(path) as d, pytest.raises(InputError, match="no layer 'fc9.weight'"):
        d.read_layer("fc9.weight")


# -- non-finite values ------------------------------------------------------------------------
def _with_nonfinite(tmp_path: Path) -> tuple[Path, np.ndarray]:
    data = np.arange(5 * 6, dtype=np.float32).reshape(5, 6)
    data[2, 1] = np.nan
    data[2, 4] = np.inf
    data[4, 0] = -np.inf
    path = tmp_path / "nan.h5"
    write_dump(
        path,
        {"w": (data, (2, 3)), "ok": (np.ones((5, 2), np.float32), (2,))},
        steps=np.arange(5) * 7,
    )
    return path, data


def test_nonfinite_error_names_dataset_step_and_count(tmp_path):
    path, _ = _with_nonfinite(tmp_path)
    with Dump.open(path) as d:
        d.read_layer("ok")
        with pytest.raises(InputError) as info:
            d.read_layer("w")
    msg = str(info.value)
    assert "'grads/w'" in msg and "3 non-finite" in msg
    assert "step index 2 (step 14)" in msg and "nan.h5" in msg


def test_nonfinite_zero_replaces_and_counts(tmp_path):
    path, data = _with_nonfinite(tmp_path)
    with Dump.open(path, nonfinite="zero") as d:
        g = d.read_layer("w")
        d.read_layer("ok")
        assert d.nonfinite_counts == {"w": 3, "ok": 0}
    expected = np.where(np.isfinite(data), data, 0)
    np.testing.assert_array_equal(g, expected)


# -- failed writes leave nothing behind ---------------------------------------------------------
def test_exception_inside_writer_leaves_no_file(tmp_path):
    target = tmp_path / "out.h5"
    with pytest.raises(RuntimeError):
        with DumpWriter(target, {"task": "x"}) as w:
            w.add_layer("a", np.ones((2, 3), np.float32), (3,))
            raise RuntimeError("training crashed")
    assert _no_leftovers(tmp_path) == []


def test_failed_write_keeps_existing_target(tmp_path):
    target = _valid(tmp_path / "out.h5")
    before = target.read_bytes()
    with pytest.raises(InputError, match="no steps were recorded"):
        with DumpWriter(target, {}) as w:
            w.add_layer("a", np.ones((2, 3), np.float32), (3,))
    assert target.read_bytes() == before
    assert _no_leftovers(tmp_path) == ["out.h5"]


def test_failed_stdout_write_writes_nothing(tmp_path, monkeypatch):
    out = io.TextIOWrapper(io.BytesIO())
    monkeypatch.setattr(sys, "stdout", out)
    with pytest.raises(InputError, match="no layers were written"):
        with DumpWriter("-", {}):
            pass
    assert out.buffer.getvalue() == b""


WRITER_ERRORS = {
    "rows mismatch": (
        lambda w: (
            w.add_layer("a", np.ones((2, 3)), (3,)),
            w.add_layer("b", np.ones((3, 3)), (3,)),
        ),
        "layer 'b' has 3 rows/steps but earlier data has 2",
    ),
    "numel mismatch": (
        lambda w: w.add_layer("a", np.ones((2, 3)), (2, 2)),
        "3 columns but shape (2, 2) has 4",
    ),
    "empty layer": (lambda w: w.add_layer("a", np.ones((2, 0)), (0,)), "layer 'a' is empty"),
    "1-D data": (lambda w: w.add_layer("a", np.ones(3), (3,)), "must be 2-D"),
    "duplicate": (
        lambda w: (
            w.add_layer("a", np.ones((2, 3)), (3,)),
            w.add_layer("a", np.ones((2, 3)), (3,)),
        ),
        "'a' was already written",
    ),
    "bad name": (
        lambda w: w.add_layer("/a", np.ones((2, 3)), (3,)),
        "not a valid relative HDF5 path",
    ),
    "NUL in a name": (
        lambda w: w.add_layer("\0a", np.ones((2, 3)), (3,)),
        "not a valid relative HDF5 path",
    ),
    "steps vs rows": (
        lambda w: (w.add_layer("a", np.ones((2, 3)), (3,)), w.set_steps([1, 2, 3])),
        "steps has 3 rows/steps but earlier data has 2",
    ),
    "bad attr": (None, "attribute 'x': cannot store a value of type object"),
}


@pytest.mark.parametrize("value, says", [(2**64, "an integer beyond 64 bits"),
                                          (-2**63 - 1, "an integer beyond 64 bits"),
                                          ("a\0b", "a string with a NUL")])
def test_attrs_hdf5_cannot_hold_are_refused_in_one_line(tmp_path, value, says):
    """HDF5 holds 64-bit integers and C strings (h5py raised TypeError / ValueError)."""
    with pytest.raises(InputError, match=f"attribute 'x': {says}"):
        DumpWriter(tmp_path / "out.h5", {"x": value})
    assert _no_leftovers(tmp_path) == []
    write_dump(tmp_path / "ok.h5", {"a": (np.ones((1, 2), np.float32), (2,))}, steps=[0],
               attrs={"x": 2**64 - 1, "y": -2**63, "z": "a b"})


@pytest.mark.parametrize("case", sorted(WRITER_ERRORS))
def test_writer_errors_leave_no_file(tmp_path, case):
    action, message = WRITER_ERRORS[case]
    with pytest.raises(InputError) as info:
        if action is None:
            DumpWriter(tmp_path / "out.h5", {"x": object()})
        else:
            with DumpWriter(tmp_path / "out.h5", {}) as w:
                action(w)
    assert message in str(info.value)
    assert _no_leftovers(tmp_path) == []


ONE = np.ones(3, np.float32)
STEP_WRITER_ERRORS = {  # step by step: the committed steps before the bad one stay valid
    "changed layers": (
        lambda w: (w.write(0, {"a": ONE}), w.write(1, {"b": ONE})),
        "step 1 gives layers ['b'], expected ['a']",
    ),
    "changed shape": (
        lambda w: (w.write(0, {"a": ONE}), w.write(1, {"a": np.ones(4, np.float32)})),
        "layer 'a' row must be float32 (3,), got float32 (4,)",
    ),
    "loss sometimes": (
        lambda w: (w.write(0, {"a": ONE}, 1.0), w.write(1, {"a": ONE})),
        "loss was given for the earlier steps; give loss on every recorded step or on none",
    ),
}


@pytest.mark.parametrize("case", sorted(STEP_WRITER_ERRORS))
def test_step_writer_errors_keep_the_committed_steps(tmp_path, case):
    action, message = STEP_WRITER_ERRORS[case]
    w = StepWriter(tmp_path / "out.h5", {"a": (3,)})
    with pytest.raises(InputError) as info:
        action(w)
    w.close()
    assert message in str(info.value)
    assert _no_leftovers(tmp_path) == ["out.h5"]
    with Dump.open(tmp_path / "out.h5") as d:
        assert d.steps.tolist() == [0] and d.read_layer("a").tolist() == [[1, 1, 1]]


def test_writer_rejects_missing_directory_and_bad_compression(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        DumpWriter(tmp_path / "no" / "such" / "dir.h5", {})
    with pytest.raises(InputError, match="compression='lzf'"):
        DumpWriter(tmp_path / "x.h5", {}, compression="lzf")
    assert _no_leftovers(tmp_path) == []


def test_extra_groups_via_h5_handle_and_gzip(tmp_path):
    sizes = {}
    for compression in (None, "gzip"):
        path = tmp_path / f"{compression}.h5"
        with DumpWriter(path, {"task": "x"}, compression=compression) as w:
            w.add_layer("a", np.zeros((4, 1000), np.float32), (1000,), attrs={"note": "zeros"})
            w.set_steps([0, 1, 2, 3])
            w.h5.create_dataset("co3/scales/a", data=np.ones(4))
        sizes[compression] = path.stat().st_size
    assert sizes["gzip"] < sizes[None] - 12000  # 16,000 bytes of zeros compress to little
    with Dump.open(path) as d:
        assert d.layers == ["a"]
        assert d.h5["grads/a"].attrs["note"] == "zeros"
        np.testing.assert_array_equal(d.read_layer("a"), np.zeros((4, 1000), np.float32))


@pytest.mark.parametrize("name", ["digits-mlp.h5", "mnist5k-mlp.h5"])
def test_bundled_dumps_are_valid(name):
    path = SAMPLE_DATA_DIR / name
    with Dump.open(path) as d:
        assert d.attrs["schema"] == SCHEMA and d.attrs["task"] == name[:-3]
        biggest = max(d.layers, key=d.numel)
        g = d.read_layer(biggest)
        assert np.isfinite(g).all() and (g == 0).any()  # real ReLU gradients: exact zeros
        if name == "mnist5k-mlp.h5":
            assert d.numel(biggest) >= 10**5 and d.total_entries >= 10**6


def test_writer_checks_data_written_through_h5_handle(tmp_path):
    path = tmp_path / "d.h5"
    with DumpWriter(path, {}) as w:  # an extension writing grads/<stream>/<param> itself
        w.add_layer("b", np.ones((2, 3), np.float32), (3,))
        w.h5.create_dataset("grads/raw/a", data=np.ones((2, 3), np.float32)).attrs["shape"] = [3]
        w.set_steps([5, 6])
    with Dump.open(path) as d:
        assert d.layers == ["b", "raw/a"]
    with pytest.raises(InputError, match=r"d2\.h5: dataset 'grads/raw/a' has 3 entries per row"):
        with DumpWriter(tmp_path / "d2.h5", {}) as w:
            w.h5.create_dataset("grads/raw/a", data=np.ones((2, 3), np.float32)).attrs["shape"] = [
                4
            ]
            w.h5["steps"] = np.arange(2)
    assert _no_leftovers(tmp_path) == ["d.h5"]


def test_add_layer_stores_bfloat16_and_float16_words(tmp_path):
    """``stored=`` writes bfloat16 (uint16 bit patterns) or float16 words as they are, marked
    with their ``dtype`` attribute; words of another type are refused in one line."""
    import h5py

    from co3cli.dump import Dump, DumpWriter

    bits = np.array([[0x3F80, 0xBF80, 0x4049, 0x0001]], dtype=np.uint16)  # 1, -1, 3.14, tiny
    half = np.array([[1.0, -0.0, 65504.0, 6e-8]], dtype=np.float16)
    with DumpWriter(tmp_path / "d.h5") as w:
        w.add_layer("b", bits, (4,), stored="bfloat16")
        w.add_layer("h", half, (4,), stored="float16")
        w.set_steps(np.array([0]))
        with pytest.raises(InputError, match="stored=bfloat16 needs uint16 words, got float32"):
            w.add_layer("x", bits.astype(np.float32), (4,), stored="bfloat16")
        with pytest.raises(InputError, match="stored='int8' is not one of"):
            w.add_layer("y", half, (4,), stored="int8")
    with h5py.File(tmp_path / "d.h5") as f:
        assert np.array_equal(f["grads/b"][()], bits) and f["grads/b"].attrs["dtype"] == "bfloat16"
        assert "description" in f["grads/b"].attrs
        assert np.array_equal(f["grads/h"][()].view(np.uint16), half.view(np.uint16))
    with Dump.open(tmp_path / "d.h5") as d:
        assert d.read_layer("b")[0, 0] == 1.0 and d.read_layer("h")[0, 2] == 65504.0
