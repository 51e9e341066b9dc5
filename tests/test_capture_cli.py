"""``co3 capture`` on the command line: pipelines, --entry, summaries, progress, one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from co3cli.dump import Dump  # noqa: E402
from conftest import run_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
CO3 = f"{sys.executable} -m co3cli"


def shell(cmd, cwd):
    return subprocess.run(cmd, shell=True, cwd=cwd, env=ENV, capture_output=True, timeout=300)


def _one_line_error(code, err, *parts):
    assert code == 1, err
    assert err.startswith("co3: error:") and len(err.strip().splitlines()) == 1, err
    for part in parts:
        assert part in err, err


def test_pipe_capture_into_report(tmp_path):
    r = shell(f"{CO3} capture --task digits-mlp --steps 100 -o - | "
              f"{CO3} report - --format fp8-e5m2 --json", tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    rep = json.loads(r.stdout)
    assert "fp8-e5m2" in r.stdout.decode()
    assert [lay["name"] for lay in rep["layers"]] == ["fc1.weight", "fc1.bias", "fc2.weight",
                                                      "fc2.bias"]
    assert "captured digits-mlp -> -: 100 steps trained" in r.stderr.decode()


def test_pipe_capture_into_compress_then_inspect(tmp_path):
    r = shell(f"{CO3} capture --task digits-cnn --steps 20 --every 5 -q -o - | "
              f"{CO3} compress - -o run.co3 -q > /dev/null && "
              f"{CO3} inspect run.co3 --json", tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr.decode() == ""
    info = json.loads(r.stdout)
    assert info["verified"] and len(info["header"]["steps"]) == 4
    assert [lay["name"] for lay in info["layers"]][0] == "conv1.weight"


def test_entry_example_through_the_cli_is_deterministic(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the module form imports from the current directory
    for name, entry in (("a", f"{ROOT}/examples/my_job.py:make_job"),
                        ("b", "examples.my_job:make_job")):
        code, o, e = run_cli("capture", "--entry", entry, "--steps", "40", "--every", "4",
                             "-o", tmp_path / f"{name}.h5", "--json", capsys=capsys)
        assert code == 0, e
        s = json.loads(o)
        assert s["steps_recorded"] == 10 and s["test_accuracy"] is None
        assert s["file_bytes"] == os.path.getsize(tmp_path / f"{name}.h5")
    with Dump.open(tmp_path / "a.h5") as a, Dump.open(tmp_path / "b.h5") as b:
        assert a.layers == b.layers == ["0.weight", "0.bias", "2.weight", "2.bias"]
        for layer in a.layers:
            np.testing.assert_array_equal(a.read_layer(layer), b.read_layer(layer))
        assert a.attrs["reduction"] == "per-step" and a.attrs["seed"] == 0


def test_epoch_average_json_summary_and_quiet(tmp_path, capsys):
    out = tmp_path / "d.h5"
    code, o, e = run_cli("capture", "--entry", f"{ROOT}/examples/my_job.py:make_job",
                         "--epochs", "2", "--epoch-average", "-o", out, "--json", "-q",
                         capsys=capsys)
    assert code == 0, e
    s = json.loads(o)
    assert s["reduction"] == "epoch-mean" and s["steps_recorded"] == 2
    assert s["steps_trained"] == 56 and s["epochs_trained"] == 2
    for key in ("layers", "total_entries", "file_bytes", "seconds"):
        assert key in s
    with Dump.open(out) as d:
        assert d.attrs["reduction"] == "epoch-mean" and d.steps.tolist() == [0, 1]
    code, o, e = run_cli("capture", "--task", "digits-mlp", "--steps", "3", "-o", out,
                         capsys=capsys)
    assert code == 0 and e == ""
    assert o.startswith("captured digits-mlp -> ") and "3 steps recorded (per-step), 4 layers" in o
    assert "KiB" in o and " s\n" in o


def test_huge_lr_is_one_line_error_naming_step_and_layer(tmp_path, capsys):
    out = tmp_path / "d.h5"
    code, o, e = run_cli("capture", "--task", "digits-mlp", "--steps", "5", "--lr", "1e30",
                         "-o", out, capsys=capsys)
    _one_line_error(code, e, "step 1", "'fc1.weight'", "non-finite", "--on-nonfinite")
    assert list(tmp_path.iterdir()) == []
    code, o, e = run_cli("capture", "--task", "digits-mlp", "--steps", "5", "--lr", "1e30",
                         "--on-nonfinite", "skip", "-o", out, "--json", capsys=capsys)
    assert code == 0 and json.loads(o)["nonfinite_steps"] == 4


@pytest.mark.parametrize(
    "args, parts",
    [
        (["--task", "digits-mlp", "--entry", "x:y"], ["give --task or --entry, not both"]),
        (["--entry", "examples/my_job.py:make_job", "--batch-size", "8"], ["--batch-size"]),
        (["--entry", "examples/my_job.py:make_job", "--lr", "0.1"],
         ["brings its own optimizer, so lr cannot be given"]),
        (["--entry", "nosuchmod_q:make"], ["cannot import module 'nosuchmod_q'"]),
        (["--entry", "examples/my_job.py:nope"], ["has no attribute 'nope'"]),
        (["--steps", "3", "--epochs", "1"], ["give steps or epochs, not both"]),
        (["--on-nonfinite", "ignore"], ["on_nonfinite='ignore' is not one of"]),
        (["--task", "cifar"], ["unknown capture task 'cifar'", "synthetic-cifar-resnet"]),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, capsys, monkeypatch, args, parts):
    monkeypatch.chdir(ROOT)
    code, o, e = run_cli("capture", *args, "-o", tmp_path / "d.h5", capsys=capsys)
    _one_line_error(code, e, *parts)
    assert list(tmp_path.iterdir()) == []


def test_unwritable_output_is_one_line_error(tmp_path, capsys):
    code, o, e = run_cli("capture", "--steps", "2", "-o", tmp_path / "nodir" / "d.h5",
                         capsys=capsys)
    _one_line_error(code, e, "cannot write dump", "does not exist")
    code, o, e = run_cli("capture", "--steps", "2", "-o", tmp_path, capsys=capsys)
    _one_line_error(code, e, "is a directory")
    assert list(tmp_path.iterdir()) == []


def test_disk_full_is_one_line_error_and_leaves_nothing(tmp_path, capsys):
    """A real ENOSPC: a 1 MiB tmpfs when we may mount one, else skipped."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
                                            str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        code, o, e = run_cli("capture", "--task", "digits-mlp", "--steps", "200",
                             "-o", mnt / "d.h5", capsys=capsys)
        _one_line_error(code, e, "no space left on device", "the partial dump was removed")
        assert os.listdir(mnt) == []
        code, o, e = run_cli("capture", "--steps", "100", "--every", "20", "-o", mnt / "d.h5",
                             capsys=capsys)
        assert code == 0 and os.listdir(mnt) == ["d.h5"]
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


@pytest.mark.slow  # ~7 s: the slow run (CI runs it)
def test_progress_bar_only_on_a_terminal(tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 120 columns
    try:
        p = subprocess.run([sys.executable, "-m", "co3cli", "capture", "--steps", "30",
                            "-o", str(tmp_path / "d.h5")], stderr=slave, stdout=subprocess.PIPE,
                           env=ENV, timeout=120)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    err = b"".join(chunks).decode(errors="replace")
    assert p.returncode == 0
    assert "digits-mlp" in err and "30/30" in err and "step/s" in err, err
    assert "loss=" in err and "written=" in err and "KiB" in err, err
    r = shell(f"{CO3} capture --steps 30 -o d2.h5", tmp_path)  # stderr is a pipe: no bar
    assert r.returncode == 0 and r.stderr == b""


def test_docs_capture_examples(tmp_path, monkeypatch):
    """README's capture section: its Python block runs, its `co3 capture` lines use real options."""
    import re

    import typer.main

    from co3cli.cli.app import app

    text = (ROOT / "README.md").read_text()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    blocks = [c for c in re.findall(r"```python\n(.*?)```", text, re.S) if "capture_entry" in c]
    assert len(blocks) == 1
    ns = {}
    exec(compile(blocks[0], "README.md", "exec"), ns)
    with Dump.open(ns["out"]) as d:
        assert d.steps.tolist() == [0, 5, 10, 15]
    cmd = typer.main.get_command(app).commands["capture"]
    known = {o for p in cmd.params for o in p.opts}
    lines = re.findall(r"^co3 capture (.*?)(?: \||$)", text, re.M)
    assert len(lines) >= 6
    for line in lines:
        used = set(re.findall(r"(?:^| )(--?[a-z][a-z-]*)", line))
        assert used <= known, (line, used - known)


FROZEN_JOB = '''
import torch


def make_job(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    model[0].requires_grad_(False)  # a frozen layer: recorded as absent, never as zeros
    x, y = torch.randn(16, 4), torch.arange(16) % 3
    return {"model": model, "data": [(x[i:i + 4], y[i:i + 4]) for i in range(0, 16, 4)],
            "loss_fn": torch.nn.functional.cross_entropy}
'''


def test_entry_with_a_frozen_layer_through_the_cli(tmp_path, capsys):
    job = tmp_path / "frozen_job.py"
    job.write_text(FROZEN_JOB)
    out = tmp_path / "d.h5"
    code, o, e = run_cli("capture", "--entry", f"{job}:make_job", "--steps", "6", "-o", out,
                         "--json", capsys=capsys)
    assert code == 0, e
    s = json.loads(o)
    assert s["layers"] == ["2.weight", "2.bias"] and s["steps_recorded"] == 6
    with Dump.open(out) as d:
        assert d.layers == ["2.weight", "2.bias"] and set(d.h5["grads"]) == {"2.weight", "2.bias"}
        assert set(json.loads(d.attrs["absent"])) == {"0.weight", "0.bias"}
        assert d.attrs["steps_trained"] == 6 and np.isfinite(d.attrs["final_loss"])
    # the same through -o - (recorded to a temporary file, copied to stdout)
    r = shell(f"{CO3} capture --entry {job}:make_job --steps 6 -o - --quiet > {tmp_path}/s.h5",
              tmp_path)
    assert r.returncode == 0, r.stderr
    with Dump.open(out) as a, Dump.open(tmp_path / "s.h5") as b:
        assert a.layers == b.layers and a.attrs["absent"] == b.attrs["absent"]
        for name in a.layers:
            np.testing.assert_array_equal(a.read_layer(name), b.read_layer(name))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5", "frozen_job.py", "s.h5"]
