"""co3cli.fileio.Scratch: anonymous while writing, named only once published; the fallback."""

from __future__ import annotations

import errno
import io
import os
import sys

import numpy as np
import pytest

from co3cli import fileio
from co3cli.errors import InputError
from co3cli.fileio import Scratch, output_file, output_path

linux = pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="needs O_TMPFILE")


@linux
def test_output_file_has_no_name_while_writing(tmp_path):
    target = tmp_path / "out.bin"
    with output_file(target) as f:
        f.write(b"x" * 100_000)
        f.flush()
        assert os.listdir(tmp_path) == []  # nothing beside the target, not even a temp name
    assert target.read_bytes() == b"x" * 100_000
    assert os.listdir(tmp_path) == ["out.bin"]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


@linux
def test_publish_replaces_an_existing_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with output_path(target) as p:
        with open(p, "w") as f:
            f.write("new")
        assert target.read_text() == "old"
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_failed_block_leaves_old_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with output_file(target) as f:
            f.write(b"partial")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_fallback_without_o_tmpfile(tmp_path, monkeypatch):
    real_open = os.open

    def no_tmpfile(path, flags, *a, **k):
        if hasattr(os, "O_TMPFILE") and flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", no_tmpfile)
    with Scratch(tmp_path) as s:
        assert s.name is not None and os.path.exists(s.name)
        assert s.name in fileio._NAMED
        name = s.name
    assert not os.path.exists(name) and name not in fileio._NAMED
    target = tmp_path / "o.bin"
    with output_file(target) as f:
        f.write(b"abc")
    assert target.read_bytes() == b"abc"
    assert os.listdir(tmp_path) == ["o.bin"]
    s = Scratch(tmp_path)
    fileio._remove_named()  # what atexit does
    assert not os.path.exists(s.name)
    s.close()


def test_enospc_names_the_output(tmp_path, monkeypatch):
    class Full(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Scratch, "fileobj", lambda self, mode="r+b": io.BufferedWriter(Full()))
    target = tmp_path / "out.co3"
    with pytest.raises(InputError, match=r"^cannot write '.*out\.co3': No space left on device$"):
        with output_file(target) as f:
            f.write(b"x" * (1 << 20))
    assert os.listdir(tmp_path) == []


@linux
def test_dump_writer_and_spool_are_anonymous(tmp_path, monkeypatch):
    from co3cli.dump import Dump, DumpWriter

    with DumpWriter(tmp_path / "d.h5") as w:
        w.add_layer("w", np.ones((2, 3), np.float32), (3,))
        w.set_steps([0, 1])
        assert os.listdir(tmp_path) == []
    data = (tmp_path / "d.h5").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    (tmp_path / "t").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    with Dump.open("-") as d:
        assert d.read_layer("w").shape == (2, 3)
        assert os.listdir(tmp_path / "t") == []
