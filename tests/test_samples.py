"""The bundled sample data: package data found via importlib.resources; export_samples; co3 samples."""

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import co3cli
from co3cli import data
from co3cli.cli.samples import samples_cli
from co3cli.data import SAMPLE_DATA_DIR, SAMPLE_FILES, export_samples
from co3cli.dump import Dump
from co3cli.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def bundled(name):
    return (SAMPLE_DATA_DIR / name).read_bytes()


def test_sample_data_is_package_data():
    assert Path(str(SAMPLE_DATA_DIR)) == Path(co3cli.__file__).parent / "sample_data"
    assert SAMPLE_FILES == ("digits.npz", "mnist5k.npz", "digits-mlp.h5", "mnist5k-mlp.h5")
    # every file of the folder is declared package data, so sdists and wheels carry it
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = conf["package-data"]["co3cli.sample_data"]
    shipped = {p.name for p in Path(str(SAMPLE_DATA_DIR)).iterdir()
               if p.suffix != ".py" and p.name != "__pycache__"}
    assert shipped == set(SAMPLE_FILES) | {"README.md"}
    assert all(any(fnmatch(name, g) for g in globs) for name in shipped)


def test_export_copies_every_file_and_keeps_identical_ones(tmp_path, monkeypatch):
    dest = tmp_path / "a" / "b"  # created, parents too
    paths = export_samples(dest)
    assert paths == [dest / name for name in SAMPLE_FILES]
    assert sorted(p.name for p in dest.iterdir()) == sorted(SAMPLE_FILES)  # no temporary left
    for p in paths:
        assert p.read_bytes() == bundled(p.name)
    with Dump.open(dest / "mnist5k-mlp.h5") as d:
        assert d.attrs["task"] == "mnist5k-mlp"
    mtimes = [p.stat().st_mtime_ns for p in paths]
    (dest / "digits.npz").unlink()
    assert export_samples(str(dest)) == paths  # identical files are fine; the missing one is back
    assert [p.stat().st_mtime_ns for p in paths[1:]] == mtimes[1:]
    assert (dest / "digits.npz").read_bytes() == bundled("digits.npz")
    monkeypatch.chdir(tmp_path)
    assert export_samples() == [Path("sample_data") / name for name in SAMPLE_FILES]
    assert (tmp_path / "sample_data" / "mnist5k.npz").read_bytes() == bundled("mnist5k.npz")


def test_export_refuses_to_overwrite_a_different_file(tmp_path):
    dest = tmp_path / "s"
    dest.mkdir()
    (dest / "mnist5k-mlp.h5").write_bytes(b"my own dump")
    changed = bytearray(bundled("digits.npz"))
    changed[-1] ^= 1  # same size, one bit off
    (dest / "digits.npz").write_bytes(bytes(changed))
    (dest / "mnist5k.npz").mkdir()
    with pytest.raises(InputError, match=r"'.*s' already holds digits.npz, mnist5k.npz, "
                                         r"mnist5k-mlp.h5, different from the bundled file\(s\); "
                                         r"nothing was copied"):
        export_samples(dest)
    assert (dest / "mnist5k-mlp.h5").read_bytes() == b"my own dump"
    assert not (dest / "digits-mlp.h5").exists()  # nothing copied
    (dest / "x").write_text("")
    with pytest.raises(InputError, match="sample folder '.*x' exists and is not a folder"):
        export_samples(dest / "x")


def test_export_reports_a_broken_installation(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "SAMPLE_DATA_DIR", tmp_path / "empty")
    with pytest.raises(InputError, match=r"bundled sample file\(s\) digits.npz, mnist5k.npz, "
                                         r"digits-mlp.h5, mnist5k-mlp.h5 missing .* reinstall"):
        export_samples(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def samples_app():
    app = typer.Typer()
    app.command("samples")(samples_cli)
    app.command("other")(lambda: None)  # two commands: 'samples' stays a subcommand
    return app


def test_samples_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    r = runner.invoke(samples_app(), ["samples"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [
        f"{Path('sample_data') / name}  ({len(bundled(name)):,} bytes)" for name in SAMPLE_FILES
    ]
    r = runner.invoke(samples_app(), ["samples", "elsewhere", "--quiet"])
    assert r.exit_code == 0 and r.output == ""
    assert (tmp_path / "elsewhere" / "digits-mlp.h5").read_bytes() == bundled("digits-mlp.h5")
    (tmp_path / "elsewhere" / "digits-mlp.h5").write_bytes(b"changed")
    r = runner.invoke(samples_app(), ["samples", "elsewhere", "-q"])
    assert isinstance(r.exception, InputError) and "digits-mlp.h5" in str(r.exception)
    r = runner.invoke(samples_app(), ["samples", "--help"])
    assert r.exit_code == 0 and "DEST" in r.output and "bundled" in r.output
