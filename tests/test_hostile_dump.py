"""Hostile dumps: layer datasets of a type the file does not declare.

Policy (``co3cli.dump`` docstring): a layer without a ``dtype`` attribute must be float32;
float16 / float64 are read (as float32) only when the attribute names them; integer datasets
are refused (except uint16 declared ``dtype="bfloat16"``). Every refusal is one line through
the CLI, exit 1, no traceback, no output left behind.
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from co3cli.dump import Dump
from conftest import run_cli


def _dump(path, data, dtype_attr=None):
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = "co3.gradients/1"
        ds = f.create_dataset("grads/w", data=data)
        ds.attrs["shape"] = np.asarray([data.shape[1]], np.int64)
        if dtype_attr is not None:
            ds.attrs["dtype"] = dtype_attr
        f.create_dataset("steps", data=np.arange(data.shape[0], dtype=np.int64))
    return path


def _grads(dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 50)) * 1e-3
    x[rng.random(x.shape) < 0.2] = 0.0
    return x.astype(dtype)


def _refused(tmp_path, src, capsys, *needles):
    out = tmp_path / "out"
    out.mkdir()
    for args in (("compress", src, "-o", out / "x.co3"),
                 ("codebook", "build", src, "-o", out / "b.json", "-q")):
        code, _, err = run_cli(*args, capsys=capsys)
        assert "Traceback" not in err, err
        assert code == 1, (code, err)
        assert err.startswith("co3: error:") and err.count("\n") == 1, err
        for n in needles:
            assert n in err, (n, err)
        assert os.listdir(out) == []


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "uint16"])
def test_integer_layer_refused(tmp_path, capsys, dtype):
    data = np.arange(150, dtype=dtype).reshape(3, 50)
    src = _dump(tmp_path / "int.h5", data)
    _refused(tmp_path, src, capsys, "'grads/w'", dtype, "integer")


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_undeclared_float_refused_with_fix(tmp_path, capsys, dtype):
    src = _dump(tmp_path / "f.h5", _grads(dtype))
    _refused(tmp_path, src, capsys, "'grads/w'", dtype, f"dtype='{dtype}'")


def test_integer_declared_as_float_refused(tmp_path, capsys):
    src = _dump(tmp_path / "f.h5", np.ones((3, 50), np.int32), dtype_attr="float32")
    _refused(tmp_path, src, capsys, "'grads/w'", "int32")


def test_dtype_attr_not_a_string_refused(tmp_path, capsys):
    src = _dump(tmp_path / "f.h5", _grads(np.float32), dtype_attr=np.array([1, 2]))
    _refused(tmp_path, src, capsys, "'grads/w'", "dtype")


@pytest.mark.parametrize("dtype", ["float64", "float16", "float32"])
def test_declared_float_read_as_float32(tmp_path, capsys, dtype):
    data = _grads(dtype)
    src = _dump(tmp_path / "f.h5", data, dtype_attr=dtype)
    with Dump.open(src) as d:
        g = d.read_layer("w")
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, data.astype(np.float32))
    code, _, err = run_cli("compress", src, "-o", tmp_path / "x.co3", capsys=capsys)
    assert code == 0, err


def test_undeclared_float32_and_bfloat16_still_read(tmp_path):
    data = _grads(np.float32)
    with Dump.open(_dump(tmp_path / "a.h5", data)) as d:
        np.testing.assert_array_equal(d.read_layer("w"), data)
    bits = (data.view(np.uint32) >> 16).astype(np.uint16)
    with Dump.open(_dump(tmp_path / "b.h5", bits, dtype_attr="bfloat16")) as d:
        g = d.read_layer("w")
    np.testing.assert_array_equal(g, (bits.astype(np.uint32) << 16).view(np.float32))


def test_a_layer_name_that_is_not_utf8_is_refused_in_one_line(tmp_path, capsys):
    # h5py hands such a name over as bytes (once a TypeError from the header's JSON)
    from co3cli.dump import write_dump

    src = tmp_path / "d.h5"
    write_dump(src, {"w": (np.ones((2, 12), np.float32), (3, 4))}, steps=np.arange(2))
    with h5py.File(src, "r+") as f:
        f["grads"].move("w", b"bad\xffname")
        del f.attrs["layers"]
    code, _, err = run_cli("compress", src, "-o", tmp_path / "x.co3", capsys=capsys)
    assert code == 1 and "is not UTF-8" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.co3").exists()
