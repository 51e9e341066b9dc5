"""The co3 command line: pipelines, JSON output, exit codes, one-line errors, no partial files."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from co3cli.dump import Dump
from conftest import run_cli

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


co3 = run_cli


def shell(cmd, cwd):
    return subprocess.run(cmd, shell=True, cwd=cwd, env=ENV, capture_output=True, timeout=300)


def test_shell_pipeline_compress_decompress(dump_path, tmp_path):
    co3 = f"{sys.executable} -m co3cli"
    r = shell(f"{co3} compress - -o - --format fp4-co3 --coder ans < {dump_path} | "
              f"{co3} decompress - -o - > q.h5", tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    with Dump.open(tmp_path / "q.h5") as d, Dump.open(dump_path) as s:
        assert d.layers == s.layers
        assert d.attrs["quantized_format"] == "fp4-co3"
        x = s.read_layer("fc1.weight")
        y = d.read_layer("fc1.weight")
        assert y.shape == x.shape and np.abs(y - x).max() <= np.abs(x).max() / 3 * 0.5 * 1.0001


def test_commands_and_json(dump_path, tmp_path, capsys):
    out = tmp_path / "g.co3"
    code, o, e = co3("compress", dump_path, "-o", out, "--format", "fp8-e5m2", "--coder", "huffman",
                     "--json", "-q", capsys=capsys)
    assert code == 0, e
    assert json.loads(o)["bytes"] == out.stat().st_size
    code, o, e = co3("inspect", out, "--json", capsys=capsys)
    assert code == 0 and json.loads(o)["verified"] is True
    code, o, e = co3("report", out, "--json", "-q", capsys=capsys)
    rep = json.loads(o)
    assert code == 0 and {"layers", "total"} <= set(rep)
    for key in ("entries", "zero_fraction", "beta", "entropy_bpe", "cross_entropy_bpe",
                "huffman_bpe", "bpe"):
        assert key in rep["total"] and key in rep["layers"][0]
    code, o, e = co3("report", out, "--format", "fp4-co3", capsys=capsys)
    assert code == 1 and "--format only apply to a dump" in e
    code, o, e = co3("report", dump_path, "--format", "fp4-co3", "-q", capsys=capsys)
    assert code == 0 and "TOTAL" in o and "fp4-co3" in o
    code, o, e = co3("fit", dump_path, "--json", "-q", capsys=capsys)
    fits = json.loads(o)["fits"]
    assert code == 0 and fits[0]["models"]["gennorm-zi"]["params"]["beta"] > 0
    book = tmp_path / "book.json"
    code, o, e = co3("codebook", "build", dump_path, "-o", book, "--coder", "huffman", "-q", capsys=capsys)
    assert code == 0, e
    code, o, e = co3("codebook", "show", book, capsys=capsys)
    assert code == 0 and "fc1.weight" in o
    code, o, e = co3("compress", dump_path, "-o", tmp_path / "b.co3", "--codebook", book, "-q",
                     capsys=capsys)
    assert code == 0, e
    png = tmp_path / "r.png"
    code, o, e = co3("report", out, "--plot", png, "-q", capsys=capsys)
    if code == 0:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "matplotlib" in e


@pytest.mark.parametrize("args,code,needle", [
    (["compress", "missing.h5", "-o", "x.co3"], 1, "does not exist"),
    (["compress", "DUMP", "-o", "x.co3", "--format", "fp9.9"], 1, "format"),
    (["compress", "DUMP", "-o", "x.co3", "--coder", "lz77"], 1, "coder"),
    (["compress", "DUMP", "-o", "x.co3", "--scale", "maxabs"], 1, "scale rule"),
    (["compress", "DUMP", "-o", "x.co3", "--model", "cauchy"], 1, "model"),
    (["compress", "DUMP", "-o", "x.co3", "--coder", "huffman", "--precision", "16"], 1, "precision"),
    (["compress", "DUMP", "-o", "x.co3", "--bogus"], 2, "bogus"),
    (["decompress", "DUMP", "-o", "x.h5"], 1, "not a .co3 file"),
    (["compress", "BADH5", "-o", "x.co3"], 1, "HDF5"),
    (["fit", "DUMP", "--models", "normal,cauchy"], 1, "cauchy"),
    (["codebook", "show", "DUMP"], 1, "not a codebook"),
])
def test_errors_are_one_line_with_exit_codes(dump_path, tmp_path, capsys, monkeypatch, args, code, needle):
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(50))
    args = [str(dump_path) if a == "DUMP" else str(bad) if a == "BADH5" else a for a in args]
    monkeypatch.chdir(tmp_path)
    got, o, e = co3(*args, capsys=capsys)
    assert got == code
    assert needle.lower() in e.lower()
    if code == 1:
        assert e.startswith("co3: error:") and len(e.strip().splitlines()) == 1 and "Traceback" not in e
    assert not (tmp_path / "x.co3").exists() and not (tmp_path / "x.h5").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".co3-tmp")]


def test_help_has_examples(capsys):
    for cmd in (["compress"], ["decompress"], ["inspect"], ["report"], ["fit"], ["codebook", "build"],
                ["codebook", "show"], ["capture"], ["demo"]):
        code, o, e = co3(*cmd, "--help", capsys=capsys)
        assert code == 0 and "Example" in o, cmd


def test_help_does_not_import_heavy_modules():
    code = ("import sys; from co3cli.cli.app import main\n"
            "try:\n main(['--help'])\nexcept SystemExit: pass\n"
            "heavy = [m for m in ('torch', 'scipy', 'h5py', 'numba') if m in sys.modules]\n"
            "assert not heavy, heavy")
    r = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()


def test_demo_runs_end_to_end(tmp_path, capsys):
    code, o, e = co3("demo", "--out", tmp_path / "demo", "--steps", "10", "--task", "digits-mlp",
                     "--json", "-q", capsys=capsys)
    assert code == 0, e
    res = json.loads(o)
    assert len(res["results"]) == 5
    for r in res["results"]:
        assert r["verified_entries"] == r["entries"] > 0
        assert r["bpe"] >= r["payload_bpe"] > 0
    code, o, e = co3("demo", "--out", tmp_path / "d2", "--steps", "0", capsys=capsys)
    assert code == 1 and "--steps" in e and not (tmp_path / "d2").exists()
