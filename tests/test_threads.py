"""``threads``: the same bytes for any thread count, the serial error, nothing left behind.

Layers run as jobs on a pool and a layer's rows are shared among threads in chunks
(``co3cli.workers.Workers``, ``map_rows``, ``pipeline``); the file must not depend on either.
``CHUNK_ENTRIES`` and ``INFLIGHT_BYTES`` are shrunk or grown here so that small dumps take every
path: rows in chunks of a few entries, many layers in flight, or one at a time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from co3cli import workers
from co3cli.codec import compress, decompress
from co3cli.workers import Workers, map_rows
from co3cli.dump import Dump, write_dump
from co3cli.errors import InputError
from conftest import run_cli, synthetic_layers

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def many(tmp_path):
    """A multi-layer dump: the conftest layers (a bias, one entry, all zeros) plus 6 more."""
    rng = np.random.default_rng(7)
    layers = synthetic_layers(rng, steps=5)
    for i in range(6):
        n = 500 * (i + 1)
        x = (rng.standard_normal((5, n)) * 10.0 ** -(i % 3 + 2)).astype(np.float32)
        x[rng.random(x.shape) < 0.1] = 0.0
        layers[f"block{i}.weight"] = (x, (n // 50, 50))
    path = tmp_path / "many.h5"
    write_dump(path, layers, steps=np.arange(5) * 10, loss=np.float32([3, 2, 1.5, 1.2, 1]))
    return path


@pytest.fixture(params=["chunked", "whole"])
def regime(request, monkeypatch):
    """chunked: rows in chunks of 64+ entries, layers one at a time; whole: every layer a job
    of its own, all in flight at once."""
    monkeypatch.setattr(workers, "SMALL_LAYER_BYTES", 0)  # every layer a job on the pool
    if request.param == "chunked":
        monkeypatch.setattr(workers, "CHUNK_ENTRIES", 64)
        monkeypatch.setattr(workers, "INFLIGHT_BYTES", 0)
    else:
        monkeypatch.setattr(workers, "CHUNK_ENTRIES", 1 << 40)
        monkeypatch.setattr(workers, "INFLIGHT_BYTES", 1 << 40)
    return request.param


@pytest.mark.parametrize("coder,scale", [("ans", None), ("huffman", "gennorm-mse"),
                                         ("ctx", None)])
def test_compress_bytes_do_not_depend_on_threads(many, tmp_path, monkeypatch, regime, coder, scale):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    blobs = {}
    for t in (1, 2, 3):
        out = tmp_path / f"t{t}.co3"
        res = compress(many, out, coder=coder, scale=scale, threads=t)
        blobs[t] = out.read_bytes()
        assert res.nbytes == len(blobs[t])
        with Dump.open(many) as d:
            assert [lay["name"] for lay in res.layers] == d.layers
    assert blobs[2] == blobs[1] and blobs[3] == blobs[1]


def test_decompress_does_not_depend_on_threads(many, tmp_path, monkeypatch, regime):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    compress(many, tmp_path / "g.co3", threads=1)
    dumps = {}
    for t in (1, 2):
        decompress(tmp_path / "g.co3", tmp_path / f"d{t}.h5", threads=t)
        with Dump.open(tmp_path / f"d{t}.h5") as d:
            dumps[t] = {n: (d.read_layer(n).view(np.uint32), d.h5[f"co3/scales/{n}"][...])
                        for n in d.layers}
    assert list(dumps[1]) == list(dumps[2])
    for n, (values, scales) in dumps[1].items():
        np.testing.assert_array_equal(values, dumps[2][n][0])
        np.testing.assert_array_equal(scales, dumps[2][n][1])
    assert (tmp_path / "d1.h5").read_bytes() == (tmp_path / "d2.h5").read_bytes()


def test_default_is_every_core_and_threads_are_checked(many, tmp_path):
    assert workers.default_threads() == len(os.sched_getaffinity(0))
    assert workers.check_threads(None) == workers.default_threads()
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(InputError, match=r"threads=.* must be an integer >= 1"):
            compress(many, tmp_path / "x.co3", threads=bad)
    with pytest.raises(InputError, match="threads=0"):
        decompress(tmp_path / "missing.co3", tmp_path / "x.h5", threads=0)
    assert os.listdir(tmp_path) == ["many.h5"]


def test_cli_threads(many, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    for t in ("1", "2"):
        code, _, err = run_cli("compress", many, "-o", tmp_path / f"c{t}.co3", "--threads", t,
                               "-q", capsys=capsys)
        assert code == 0, err
        code, _, err = run_cli("decompress", tmp_path / f"c{t}.co3", "-o", tmp_path / f"d{t}.h5",
                               "--threads", t, "-q", capsys=capsys)
        assert code == 0, err
    assert (tmp_path / "c1.co3").read_bytes() == (tmp_path / "c2.co3").read_bytes()
    assert (tmp_path / "d1.h5").read_bytes() == (tmp_path / "d2.h5").read_bytes()
    code, _, err = run_cli("compress", many, "-o", tmp_path / "c0.co3", "--threads", "0",
                           capsys=capsys)
    assert code == 1 and err.strip() == "co3: error: threads=0 must be an integer >= 1"
    assert not (tmp_path / "c0.co3").exists()


def _poison_quantize(monkeypatch, bad: dict):
    """Make quantizing a row whose first entry is a key of ``bad`` raise InputError(value)."""
    import co3cli.quantize as q

    real = q.quantize

    def quantize(x, *a, **k):
        msg = bad.get(float(x[0]))
        if msg is not None:
            time.sleep(0.01 if "early" in msg else 0.0)
            raise InputError(msg)
        return real(x, *a, **k)

    monkeypatch.setattr(q, "quantize", quantize)
    return bad


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_first_error_in_layer_order_and_no_output(tmp_path, monkeypatch, regime, threads):
    """A worker's error in layer 2 wins over a later layer's (and over a NaN read after it),
    whatever finishes first; the output never appears."""
    rng = np.random.default_rng(3)
    layers = {}
    for i in range(6):
        x = (rng.standard_normal((4, 3000)) * 1e-3).astype(np.float32)
        x[:, 0] = 0.5
        layers[f"l{i}"] = (x, (3000,))
    layers["l2"][0][3, 0] = 7.0  # row 3 of layer 2: a worker raises
    layers["l3"][0][1, 0] = 8.0  # row 1 of layer 3: raises too, sooner (no sleep)
    layers["l5"][0][0, 5] = np.nan  # read error in the main thread
    write_dump(tmp_path / "bad.h5", layers, steps=np.arange(4))
    bad = _poison_quantize(monkeypatch, {7.0: "layer 2 (early)", 8.0: "layer 3"})
    out = tmp_path / "out"
    out.mkdir()
    alone = {"small_layers": False}  # each layer its own unit (a group's layers are read together)
    with pytest.raises(InputError, match=r"^layer 2 \(early\)$"):
        compress(tmp_path / "bad.h5", out / "x.co3", threads=threads, **alone)
    assert os.listdir(out) == []
    bad.clear()
    with pytest.raises(InputError, match=r"'grads/l5' has 1 non-finite value"):
        compress(tmp_path / "bad.h5", out / "x.co3", threads=threads, **alone)
    assert os.listdir(out) == []


def test_corrupt_chunk_same_error_any_threads(many, tmp_path, monkeypatch, regime):
    """A chunk that does not decode (its CRC made right again) gives the same one-line error
    with 1 or 2 threads, and no output."""
    import zlib

    from co3cli.container import open_co3

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    compress(many, tmp_path / "g.co3", coder="ans", threads=1)
    raw = bytearray((tmp_path / "g.co3").read_bytes())
    with open(tmp_path / "g.co3", "rb") as f:
        co3 = open_co3(f)
        i = co3.layer_names.index("block5.weight")
        start = co3.offsets[i]
        stop = co3.offsets[i + 1] if i + 1 < len(co3.offsets) else co3._end
    raw[stop - 40] ^= 0xFF  # inside the last step's body
    raw[stop - 4:stop] = zlib.crc32(bytes(raw[start:stop - 4])).to_bytes(4, "little")
    raw[-11:-7] = zlib.crc32(bytes(raw[:-11])).to_bytes(4, "little")  # the file CRC
    (tmp_path / "bad.co3").write_bytes(bytes(raw))
    errors = set()
    for t in (1, 2):
        with pytest.raises(Exception) as e:
            decompress(tmp_path / "bad.co3", tmp_path / f"d{t}.h5", threads=t)
        errors.add((type(e.value).__name__, str(e.value)))
        assert not (tmp_path / f"d{t}.h5").exists()
    assert len(errors) == 1, errors


def test_workers_run_in_order_nested_without_deadlock():
    """Jobs that fan out into tasks of the same pool finish (a waiting job takes back what no
    thread started) and every result lands in order."""
    with Workers(2) as w:
        def job(k):
            return w.run([lambda k=k, i=i: (k, i, threading.get_ident()) for i in range(50)])

        futs = [w.submit(job, k) for k in range(20)]
        for k, fut in enumerate(futs):
            assert [r[:2] for r in fut.result(timeout=60)] == [(k, i) for i in range(50)]


def test_workers_first_error_in_order():
    def fail(i, delay):
        def task():
            time.sleep(delay)
            raise ValueError(f"task {i}")
        return task

    with Workers(3) as w:
        tasks = [lambda: 0, fail(1, 0.05), fail(2, 0.0), lambda: 3]
        with pytest.raises(ValueError, match="task 1"):
            w.run(tasks)
    one = Workers(1)
    assert one.run([lambda: 1, lambda: 2]) == [1, 2]
    assert one.submit(lambda x: x + 1, 1).result() == 2
    with pytest.raises(ValueError, match="inline"):
        one.submit(lambda: (_ for _ in ()).throw(ValueError("inline"))).result()


@pytest.mark.parametrize("steps,numel,threads", [(1, 10**6, 2), (7, 10**5, 2), (16, 20, 4),
                                                  (100, 1 << 16, 3), (0, 5, 2)])
def test_map_rows_covers_rows_in_order(steps, numel, threads):
    with Workers(threads) as w:
        parts = map_rows(w, steps, numel, lambda lo, hi: (lo, hi))
    assert parts[0][0] == 0 and parts[-1][1] == steps
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(parts, parts[1:]))
    assert len(parts) <= max(1, 4 * threads)
    assert map_rows(None, steps, numel, lambda lo, hi: (lo, hi)) == [(0, steps)]


def _interrupt_env(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="needs Linux O_TMPFILE")
def test_ctrl_c_with_threads_stops_and_leaves_nothing(tmp_path):
    """SIGINT while two threads code: exit 130 as with one thread (no traceback), soon, and
    no file left."""
    rng = np.random.default_rng(0)
    layers = {f"l{i}": ((rng.standard_normal((20, 50_000)) * 1e-3).astype(np.float32), (50_000,))
              for i in range(8)}
    write_dump(tmp_path / "d.h5", layers, steps=np.arange(20))
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "tmp").mkdir()
    cmd = [sys.executable, "-m", "co3cli", "compress", str(tmp_path / "d.h5"), "-o",
           str(out / "o.co3"), "--threads", "2", "--coder", "ctx", "-q"]
    proc = subprocess.Popen(cmd, env=_interrupt_env(tmp_path), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:  # until it writes its output
        try:
            if any(os.readlink(f"/proc/{proc.pid}/fd/{fd}").startswith(f"{out}/")
                   for fd in os.listdir(f"/proc/{proc.pid}/fd")):
                break
        except OSError:
            pass
        time.sleep(0.01)
    time.sleep(0.3)
    if proc.poll() is not None:
        pytest.skip("the command finished before the interrupt")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
    assert time.monotonic() - t0 < 10
    assert os.listdir(out) == [] and os.listdir(tmp_path / "tmp") == []
