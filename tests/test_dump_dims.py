"""Dumps explain themselves to generic readers (``co3cli.dump.dims``): a root ``description``,
one on bfloat16 layers, dimension scales ``step`` x ``entry_<numel>``; the schema stays
``co3.gradients/1`` (old dumps read, new dumps read the old way, scales are never layers)."""

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from co3cli.dump import Dump, StepWriter, write_dump
from co3cli.dump.dims import BF16_DESCRIPTION, DESCRIPTION, is_dimension_scale
from conftest import run_cli

GOLDEN = Path(__file__).parent / "golden"


def _layers(rng, steps=3):
    g = rng.standard_normal((steps, 12)).astype(np.float32)
    return {"fc.weight": (g, (3, 4)), "fc.bias": (g[:, :3].copy(), (3,)),
            "raw/fc2.weight": (g.copy(), (12,))}


def _old_reader_layers(path):
    """What a reader that takes every dataset under ``grads`` for a layer (co3cli 0.1.0) sees."""
    with h5py.File(path, "r") as f:
        found = []
        f["grads"].visititems(lambda n, o: found.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in found:  # each one a layer: 2-D, with its 'shape' attribute
            assert f["grads"][n].ndim == 2 and "shape" in f["grads"][n].attrs, n
        return sorted(found)


def _check_dims(path, nrows):
    with h5py.File(path, "r") as f:
        assert f.attrs["description"] == DESCRIPTION
        assert "len(steps)" in f.attrs["description"] and "co3 compress" in f.attrs["description"]
        assert np.array_equal(f["step"][()], f["steps"][:nrows])
        f["grads"].visititems(lambda n, o: _check_layer(f, n, o, nrows))
        for key in ("steps", "loss"):
            if key in f:
                assert f[key].dims[0][0].name == "/step"
        for name in f:
            if name.startswith("entry_"):
                assert is_dimension_scale(f[name])
                assert f[name].id.get_storage_size() == 0  # a dimension without data


def _check_layer(f, name, ds, nrows):
    if not isinstance(ds, h5py.Dataset):
        return
    assert ds.dims[0][0].name == "/step" and ds.dims[0].label == "step"
    assert ds.dims[1][0].name == f"/entry_{ds.shape[1]}" and ds.dims[1].label == "entry"
    assert ds.shape[0] == nrows


def test_whole_dump_describes_itself(tmp_path):
    path = tmp_path / "d.h5"
    layers = _layers(np.random.default_rng(0))
    write_dump(path, layers, steps=[0, 10, 20], loss=[3.0, 2.0, 1.0])
    _check_dims(path, 3)
    assert _old_reader_layers(path) == sorted(layers)
    with Dump.open(path) as d:
        assert d.layers == list(layers) and d.steps.tolist() == [0, 10, 20]
        assert "description" not in d.attrs  # the boilerplate is not provenance
        for name, (g, _) in layers.items():
            assert np.array_equal(d.read_layer(name), g)


def test_own_description_is_kept(tmp_path):
    path = tmp_path / "d.h5"
    write_dump(path, _layers(np.random.default_rng(0)), steps=[0, 1, 2],
               attrs={"description": "my run"})
    with Dump.open(path) as d:
        assert d.attrs["description"] == "my run"


def test_step_writer_bf16_and_resume(tmp_path):
    path = tmp_path / "s.h5"
    rng = np.random.default_rng(1)
    rows = lambda: {"w": rng.integers(0, 1 << 16, 12, dtype=np.uint16)}  # noqa: E731
    w = StepWriter(path, {"w": (3, 4)}, dtype="bfloat16")
    for step in range(3):
        w.write(step, rows(), loss=1.0)
    w.close()
    _check_dims(path, 3)
    with h5py.File(path, "r") as f:
        assert f["grads/w"].attrs["description"] == BF16_DESCRIPTION
        assert "uint16" in BF16_DESCRIPTION and "<< 16" in BF16_DESCRIPTION
    w = StepWriter(path, {"w": (3, 4)}, dtype="bfloat16", resume=True)
    for step in range(3, 5):
        w.write(step, rows(), loss=1.0)
    w.close()
    _check_dims(path, 5)
    with Dump.open(path) as d:
        assert d.steps.tolist() == [0, 1, 2, 3, 4] and d.read_layer("w").shape == (5, 12)


def test_killed_writer_dump_has_no_scales_and_reads(tmp_path):
    path = tmp_path / "k.h5"
    w = StepWriter(path, {"w": (12,)})
    w.write(0, {"w": np.ones(12, np.float32)})
    w.h5.flush()  # as a kill leaves it: preallocated rows, no close
    with Dump.open(path) as d:
        assert d.nsteps == 1
    w.close()
    _check_dims(path, 1)


def _old_layout(path, steps=3, growable=True):
    """A dump as co3cli 0.1.0 wrote it: no description, no dimension scales."""
    kw = dict(maxshape=(None, 12), chunks=(1, 12)) if growable else {}
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = "co3.gradients/1"
        ds = f.create_dataset("grads/w", data=np.ones((steps, 12), np.float32), **kw)
        ds.attrs["shape"] = np.asarray([12], np.int64)
        ds.attrs["dtype"] = "float32"
        f.create_dataset("steps", data=np.arange(steps, dtype=np.int64),
                         **(dict(maxshape=(None,), chunks=(256,)) if growable else {}))
        f.attrs["reduction"] = "per-step"
        f.attrs["layers"] = '["w"]'
    return path


def test_old_dumps_read_and_gain_scales_on_resume(tmp_path, capsys):
    golden = tmp_path / "golden.h5"
    shutil.copy(GOLDEN / "v1.2" / "fp4-ans.h5", golden)  # written before dimension scales
    with h5py.File(golden, "r") as f:
        assert "step" not in f and "description" not in f.attrs  # really the old layout
    with Dump.open(golden) as d:
        assert d.layers and d.read_layer(d.layers[0]).shape[0] == d.nsteps
    code, out, err = run_cli("fit", golden, capsys=capsys)
    assert code == 0, err
    old = _old_layout(tmp_path / "old.h5")
    w = StepWriter(old, {"w": (12,)}, resume=True)
    w.write(3, {"w": np.zeros(12, np.float32)})
    w.close()
    with h5py.File(old, "r") as f:
        assert f["grads/w"].dims[0][0].name == "/step"
        assert f["step"][()].tolist() == [0, 1, 2, 3]


def test_dimension_scale_inside_grads_is_not_a_layer(tmp_path):
    """As xarray writes a group: its dimensions are datasets beside the variables."""
    path = _old_layout(tmp_path / "x.h5", growable=False)
    with h5py.File(path, "a") as f:
        dim = f.create_dataset("grads/entry", shape=(12,), dtype=np.float32)
        dim.make_scale("entry")
        f["grads/w"].dims[1].attach_scale(dim)
    with Dump.open(path) as d:
        assert d.layers == ["w"]


def test_gzip_rewrite_keeps_the_scales(tmp_path):
    from co3cli.dump.output import gzip_in_place

    path = tmp_path / "g.h5"
    write_dump(path, _layers(np.random.default_rng(2)), steps=[0, 1, 2], loss=[1.0, 1.0, 1.0])
    gzip_in_place(str(path))
    _check_dims(path, 3)
    with h5py.File(path, "r") as f:
        assert f["grads/fc.weight"].compression == "gzip"
    with Dump.open(path) as d:
        assert len(d.layers) == 3


def test_root_name_taken_leaves_no_scales(tmp_path):
    from co3cli.dump import DumpWriter

    path = tmp_path / "t.h5"
    with DumpWriter(path) as w:
        w.add_layer("w", np.ones((2, 12), np.float32), (12,))
        w.set_steps([0, 1])
        w.h5.create_dataset("step", data=np.zeros(3))  # the caller's own dataset
    with h5py.File(path, "r") as f:
        assert not is_dimension_scale(f["step"]) and len(f["grads/w"].dims[0]) == 0
    with Dump.open(path) as d:
        assert d.layers == ["w"]


def test_commands_take_a_new_dump(tmp_path, capsys):
    path = tmp_path / "d.h5"
    write_dump(path, _layers(np.random.default_rng(3)), steps=[0, 1, 2])
    code, _, err = run_cli("compress", path, "-o", tmp_path / "d.co3", "-q", capsys=capsys)
    assert code == 0, err
    code, out, err = run_cli("inspect", tmp_path / "d.co3", capsys=capsys)
    assert code == 0 and "fc.weight" in out, err
    code, _, err = run_cli("decompress", tmp_path / "d.co3", "-o", tmp_path / "back.h5",
                           capsys=capsys)
    assert code == 0, err
    _check_dims(tmp_path / "back.h5", 3)


def test_xarray_shows_named_dims(tmp_path):
    xr = pytest.importorskip("xarray", reason="xarray is not installed")
    pytest.importorskip("h5netcdf", reason="h5netcdf (xarray's HDF5 engine) is not installed")
    path = tmp_path / "d.h5"
    write_dump(path, _layers(np.random.default_rng(4)), steps=[0, 10, 20], loss=[1.0, 2.0, 3.0])
    root = xr.open_dataset(path, engine="h5netcdf")
    assert root["step"].values.tolist() == [0, 10, 20] and root["loss"].dims == ("step",)
    grads = xr.open_dataset(path, engine="h5netcdf", group="grads")
    assert grads["fc.weight"].dims == ("step", "entry_12")
    assert not any(d.startswith("phony_dim") for d in grads.dims)
    raw = xr.open_dataset(path, engine="h5netcdf", group="grads/raw")
    assert raw["fc2.weight"].dims == ("step", "entry_12")


@pytest.mark.slow  # ~8 s
def test_a_dump_of_more_layers_than_a_scale_can_list_round_trips(tmp_path, capsys):
    """HDF5 keeps a scale's back-references in one object-header attribute (64 KiB: ~4,090
    datasets): a dump of 5,000 layers (a mixture-of-experts model's) is written without
    scales, and ``co3 decompress`` writes its file back (it failed with a traceback)."""
    rng = np.random.default_rng(5)
    layers = {f"e{i}.bias": (rng.standard_normal((2, 1 + i % 3)).astype(np.float32),
                             (1 + i % 3,)) for i in range(5000)}
    path = tmp_path / "d.h5"
    write_dump(path, layers, steps=[0, 1])
    with h5py.File(path, "r") as f:
        assert "step" not in f and len(f["grads/e0.bias"].dims[0]) == 0
    code, _, err = run_cli("compress", path, "-o", tmp_path / "d.co3", "-q", "--threads", "1",
                           "-f", "fp8-e4m3", capsys=capsys)
    assert code == 0, err
    code, _, err = run_cli("decompress", tmp_path / "d.co3", "-o", tmp_path / "back.h5",
                           capsys=capsys)
    assert code == 0, err
    with Dump.open(tmp_path / "back.h5") as d:
        assert d.layers == list(layers)
