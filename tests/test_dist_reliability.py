"""The torchrun engine's processes: no orphans, a hung rank named, nothing depending on an idle
machine.

Every wait here is for something to happen (a metrics row, a process gone) with a deadline far
above what it takes on a loaded machine; the job-level bound is the engine's own ``--timeout``.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from co3cli import InputError  # noqa: E402
from co3cli.simulate.dist import launch  # noqa: E402
from co3cli.simulate.flconfig import FLConfig  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
ROOT = Path(__file__).resolve().parents[1]
LONG = FLConfig(task="digits-mlp", clients=4, rounds=100000, batch_size=8, eval_every=1000)
PATIENCE = 600.0  # seconds to wait for a job to get going; only reached when something is wrong


def rows(out: Path) -> int:
    """Finished rounds in ``out/metrics.csv`` (0 before it exists), as the engine counts them."""
    from co3cli.simulate.dist import _rounds_done

    return _rounds_done(out)


def wait_for_rows(out: Path, n: int, alive=lambda: True) -> None:
    deadline = time.monotonic() + PATIENCE
    while rows(out) < n:
        assert alive(), "the job ended before its first rounds"
        assert time.monotonic() < deadline, "the job made no progress"
        time.sleep(0.05)


def gone(pid: int) -> bool:
    """No such process, or only its zombie (reaped by whoever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def children(ppid: int) -> list[int]:
    """The rank processes whose parent is ``ppid`` (a /proc scan)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if int(stat[1]) == ppid and b"co3cli.simulate.dist" in cmd and stat[0] != "Z":
            pids.append(int(d))
    return sorted(pids)


@pytest.mark.slow  # ~4 s: the slow run (CI runs it)
def test_ranks_die_with_a_killed_launcher(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "co3cli", "simulate", "fl", "--task", "digits-mlp",
           "--clients", "4", "--rounds", "100000", "--batch-size", "8", "--eval-every", "1000",
           "--engine", "torchrun", "--nproc", "3", "--timeout", "60", "-o", str(out)]
    systmp = tmp_path / "tmp"  # the killed launcher cannot remove its temporary folder
    systmp.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), TMPDIR=str(systmp))
    launcher = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    ranks = []
    try:
        wait_for_rows(out, 2, alive=lambda: launcher.poll() is None)
        ranks = children(launcher.pid)
        assert len(ranks) == 3, ranks
        launcher.kill()
        launcher.wait()
        t0 = time.monotonic()
        while not all(gone(p) for p in ranks) and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        left = [p for p in ranks if not gone(p)]
        assert not left, f"ranks {left} outlived their launcher by 5 s"
        n = rows(out)
        time.sleep(1.0)
        assert rows(out) == n  # nobody appends to metrics.csv any more
    finally:
        for p in ranks + [launcher.pid]:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        launcher.wait()


@pytest.mark.slow  # ~15 s and ~10 s: the slow run (CI runs it)
@pytest.mark.parametrize("stopped", [1, 0])
def test_a_stopped_rank_is_named_and_the_job_ends(tmp_path, stopped):
    out, timeout = tmp_path / "run", 8
    seen = {}

    def stopper(procs):
        seen["procs"] = procs

        def run():
            try:
                wait_for_rows(out, 2, alive=lambda: all(p.poll() is None for p in procs))
            except AssertionError:
                return
            procs[stopped].send_signal(signal.SIGSTOP)
            seen["t"] = time.monotonic()

        threading.Thread(target=run, daemon=True).start()

    with pytest.raises(InputError) as info:
        launch(LONG, out, 3, timeout=timeout, on_start=stopper)
    assert "t" in seen, f"the job ended before rank {stopped} was stopped: {info.value}"
    took = time.monotonic() - seen["t"]
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert msg.startswith(f"rank {stopped} stopped answering (no message for {timeout} s); "), msg
    assert "metrics.csv holds the" in msg
    assert took < timeout + 10, took
    assert all(p.poll() is not None for p in seen["procs"])  # every rank is gone


def test_ranks_need_no_file_in_the_temporary_folder_but_the_store(tmp_path):
    # a temp cleaner (or a test sharing TMPDIR) may remove files from the launcher's folder
    # while the ranks are still starting: nothing a rank reads may live there
    def sweep(procs):
        store = Path(procs[0].args[procs[0].args.index("--store") + 1])
        for f in store.parent.iterdir():
            if f.suffix == ".json":
                f.unlink()

    cfg = FLConfig(task="digits-mlp", clients=2, rounds=2, batch_size=8, eval_every=2)
    res = launch(cfg, tmp_path / "r", 2, on_start=sweep)
    assert res.rounds_done == 2


def test_a_rank_that_fails_to_start_takes_the_started_ones_down(tmp_path, monkeypatch):
    started = []
    real = subprocess.Popen

    def popen(*a, **kw):
        if len(started) == 2:
            raise OSError(11, "Resource temporarily unavailable")
        p = real(*a, **kw)
        started.append(p)
        return p

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(InputError, match=r"^cannot start rank 2: Resource temporarily"):
        launch(LONG, tmp_path / "r", 3, timeout=30)
    assert len(started) == 2 and all(p.poll() is not None for p in started)
