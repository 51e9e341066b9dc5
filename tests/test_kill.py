"""Killed commands leave nothing behind; a full disk names the user's output.

``kill -9`` at a seeded random moment while ``co3 compress`` / ``decompress`` / ``report`` (and a
``compress - -o - | decompress -`` pipeline) write: afterwards the output folder and the private
``TMPDIR`` of the run hold nothing new (no ``.co3-tmp-*``, ``.NAME.*.tmp``, ``co3-spool-*``):
``co3cli.fileio.Scratch`` files are anonymous (``O_TMPFILE``), so the kernel drops them with the
process. A disk that fills up (a tiny tmpfs) gives one line naming the output the user asked for.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not hasattr(os, "O_TMPFILE") or not os.path.isdir("/proc/self/fd"),
                                reason="needs Linux O_TMPFILE and /proc")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A ~32 MB dump and its .co3, in a folder of their own."""
    from co3cli.codec import compress
    from co3cli.dump import write_dump

    src = tmp_path_factory.mktemp("src")
    rng = np.random.default_rng(0)
    layers = {f"l{i}": ((rng.standard_normal((20, 50_000)) * 1e-3).astype(np.float32), (50_000,))
              for i in range(8)}
    write_dump(src / "d.h5", layers, steps=np.arange(20))
    compress(src / "d.h5", src / "d.co3")
    return src


def _env(tmpdir: Path) -> dict:
    env = dict(os.environ, TMPDIR=str(tmpdir), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    out, tmpdir = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmpdir.mkdir()
    return out, tmpdir


def _writing(pid: int, folders) -> bool:
    """Whether ``pid`` has a file open in one of ``folders`` (a temp file or the output)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if any(link.startswith(f"{f}/") for f in folders):
            return True
    return False


def _kill_while_writing(cmd, env, folders, rng) -> bool:
    """Start ``cmd``, wait until it writes in ``folders``, then ``kill -9`` it a random moment
    later; True when it was killed (False: it finished first)."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while proc.poll() is None and not _writing(proc.pid, folders) and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.5))
    killed = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return killed


def _kill_pipeline(src: Path, out: Path, env, rng) -> bool:
    py = sys.executable
    sh = (f"'{py}' -m co3cli compress - -o - -q < '{src / 'd.h5'}' | "
          f"'{py}' -m co3cli decompress - -o '{out / 'r.h5'}' -q")
    proc = subprocess.Popen(["sh", "-c", sh], env=env, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.8, 3.5))
    killed = proc.poll() is None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the pipeline finished first
        pass
    proc.wait()
    return killed


def _command(which: str, src: Path, out: Path) -> tuple[list[str], str | None]:
    py = [sys.executable, "-m", "co3cli"]
    if which == "compress":
        return py + ["compress", str(src / "d.h5"), "-o", str(out / "o.co3"), "-q"], "o.co3"
    if which == "decompress":
        return py + ["decompress", str(src / "d.co3"), "-o", str(out / "r.h5"), "-q"], "r.h5"
    return py + ["report", str(src / "d.h5"), "-q"], None


def _check_clean(out: Path, tmpdir: Path, killed: bool, target: str | None) -> None:
    """Nothing in TMPDIR; in the output folder nothing, or the target complete and valid (the
    kill can land after the target was published: never a partial or a hidden file)."""
    left_tmp = sorted(os.listdir(tmpdir))
    left_out = sorted(os.listdir(out))
    assert left_tmp == [], f"TMPDIR keeps {left_tmp}"
    assert left_out in ([], [target] if target else []), f"output folder keeps {left_out}"
    if target and not killed:  # it finished before the kill: the whole output is there
        assert left_out == [target], "the run finished but its output is missing"
    if left_out:
        _check_complete(out / target)


def _check_complete(path: Path) -> None:
    if path.suffix == ".co3":
        from co3cli.container import open_co3

        with open(path, "rb") as f:
            open_co3(f, str(path))  # verifies every checksum and the trailer
    else:
        from co3cli.dump import Dump

        with Dump.open(path) as d:
            for name in d.layers:
                d.read_layer(name)


def _run_kills(which: str, seed: int, inputs: Path, tmp_path: Path) -> None:
    rng = random.Random(seed)
    out, tmpdir = _folders(tmp_path)
    env = _env(tmpdir)
    if which == "pipeline":
        killed = _kill_pipeline(inputs, out, env, rng)
        target = "r.h5"
    else:
        cmd, target = _command(which, inputs, out)
        killed = _kill_while_writing(cmd, env, [out, tmpdir], rng)
    _check_clean(out, tmpdir, killed, target)


@pytest.mark.parametrize("which", ["compress", "decompress", "report", "pipeline"])
def test_kill_leaves_nothing(which, inputs, tmp_path):
    _run_kills(which, 11, inputs, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("which", ["compress", "decompress", "report", "pipeline"])
def test_kill_leaves_nothing_many(which, seed, inputs, tmp_path):
    _run_kills(which, 100 + seed, inputs, tmp_path)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 2 MiB tmpfs (root only; skipped elsewhere)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("which", ["compress", "decompress", "pipeline"])
def test_disk_full_names_the_output(which, inputs, tiny_disk, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    py = [sys.executable, "-m", "co3cli"]
    if which == "compress":
        target = tiny_disk / "out.co3"
        r = subprocess.run(py + ["compress", str(inputs / "d.h5"), "-o", str(target), "-q"],
                           env=_env(tmpdir), cwd=ROOT, capture_output=True, text=True)
    elif which == "decompress":
        target = tiny_disk / "out.h5"
        r = subprocess.run(py + ["decompress", str(inputs / "d.co3"), "-o", str(target), "-q"],
                           env=_env(tmpdir), cwd=ROOT, capture_output=True, text=True)
    else:  # the stdin spool is on the full disk; the output is stdout
        target = None
        with open(inputs / "d.co3", "rb") as f:
            r = subprocess.run(py + ["decompress", "-", "-o", str(tmp_path / "r.h5"), "-q"],
                               env=_env(tiny_disk), cwd=ROOT, stdin=f, capture_output=True,
                               text=True)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0
    assert len(lines) == 1, r.stderr
    if target is not None:
        assert lines[0] == f"co3: error: cannot write '{target}': No space left on device"
    else:
        assert lines[0] == (f"co3: error: cannot copy .co3 file from stdin to the temp dir "
                            f"'{tiny_disk}': No space left on device")
        assert not (tmp_path / "r.h5").exists()
    assert os.listdir(tiny_disk) == []
    assert os.listdir(tmpdir) == []
