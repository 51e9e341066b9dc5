"""Threads for the codec: a worker pool whose first error (in submission order) is the one
raised, rows of a layer shared among threads, and the read-ahead pipeline of layers.

Threads (``threads``, default: every core this process may run on; 1: no threads, all inline)::

    main thread:  read layer i ──submit──▶ pool ··· result of layer i-k ──▶ write, in layer order
    pool:         layer job: rows [scale + quantize + count] ─▶ fit + table ─▶ rows [encode]
                  (a layer's rows are cut into chunks that other threads take; decode likewise)

The main thread alone touches HDF5 and the output file; workers only compute (the numba kernels
release the GIL, as numpy does). Layers read but not yet written hold at most ``INFLIGHT_BYTES``
of float32 beyond the first, so a big layer is coded alone (its rows shared among the threads)
and memory stays that of one layer at a time. Every row is coded by the same function whatever
the thread count, and layers are written in order, so the output is byte-identical for any
``threads``; the first error in layer (and row) order is the one raised, as with one thread.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from co3cli.checks import check_int

INFLIGHT_BYTES = 32 << 20  # float32 bytes of layers read and not yet written, beyond the first
CHUNK_ENTRIES = 1 << 16  # a layer's rows are shared among threads in chunks of at least this
SMALL_LAYER_BYTES = 1 << 18  # smaller layers are coded by the main thread (their cost is
# Python under the GIL: on a thread they only contend for it)


def default_threads() -> int:
    """Every core this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def check_threads(threads) -> int:
    """``threads`` checked (an integer >= 1); None: :func:`default_threads`."""
    return default_threads() if threads is None else check_int("threads", threads, lo=1)


class _Stopped(Exception):
    """A task that found its pool closing (its result is never read)."""


class Workers:
    """``threads`` threads that code layers and chunks of rows (1: none, everything inline).

    :meth:`submit` starts a job and returns its future; :meth:`run` runs zero-argument tasks and
    returns their results in order: the caller runs the first itself, then takes back every
    later one no thread has started, and only then waits for those others run; so a job waiting
    on its tasks never deadlocks the pool (it waits only on running tasks, which wait on
    nothing) and no thread idles while work is queued. The error raised is the first in order,
    the one a serial loop would raise (after a failure no further task is taken back).
    :meth:`close` cancels what has not started and waits for what runs.
    """

    def __init__(self, threads: int = 1):
        self.threads = check_int("threads", threads, lo=1)
        self._pool = None
        if self.threads > 1:
            _heap_for_threads()
            self._pool = ThreadPoolExecutor(self.threads, "co3-worker")
        self._stop = threading.Event()

    def submit(self, fn, *args) -> Future:
        if self._pool is not None:
            return self._pool.submit(fn, *args)
        fut = Future()
        try:
            fut.set_result(fn(*args))
        except Exception as e:  # raised by fut.result(), in order, like a worker's
            fut.set_exception(e)
        return fut

    def run(self, tasks: list) -> list:
        if self._stop.is_set():
            raise _Stopped()
        if self._pool is None or len(tasks) < 2:
            return [task() for task in tasks]
        futs = [self._pool.submit(task) for task in tasks[1:]]
        done: dict[int, tuple[bool, object]] = {}  # index -> (ok, result or exception)

        def settle(i, fn):
            try:
                done[i] = (True, fn())
            except Exception as e:  # noqa: BLE001 - re-raised below, in order
                done[i] = (False, e)

        try:
            settle(0, tasks[0])
            for i, fut in enumerate(futs, 1):  # take back all that no thread has started
                if not done[max(done)][0] or self._stop.is_set():
                    break
                if fut.cancel():
                    settle(i, tasks[i])
            for i, fut in enumerate(futs, 1):  # then wait for those that others run
                if i not in done and fut.cancel() is False:
                    settle(i, fut.result)
        finally:
            for fut in futs:
                fut.cancel()
        for i in range(len(tasks)):
            if i in done and not done[i][0]:
                raise done[i][1]
        if len(done) < len(tasks):
            raise _Stopped()
        return [done[i][1] for i in range(len(tasks))]

    def close(self) -> None:
        self._stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def map_rows(workers: Workers | None, steps: int, numel: int, fn) -> list:
    """``[fn(lo, hi), ...]`` over contiguous row ranges covering ``range(steps)``, in order:
    one range without workers (or for a small layer), else chunks of at least
    ``CHUNK_ENTRIES`` entries, up to four per thread."""
    n = 1 if workers is None else min(steps, 4 * workers.threads, steps * numel // CHUNK_ENTRIES)
    if n <= 1:
        return [fn(0, steps)]
    cuts = [steps * k // n for k in range(n + 1)]
    return workers.run([lambda lo=lo, hi=hi: fn(lo, hi) for lo, hi in zip(cuts, cuts[1:])])


def _heap_for_threads() -> None:
    """Make glibc ``malloc`` map every block of ``MMAP_THRESHOLD`` bytes or more on its own
    (``mallopt(M_MMAP_THRESHOLD)``, once per process; elsewhere nothing), so freeing it gives
    it back to the system.

    Each thread allocates from an arena of its own and memory freed in one arena is not reused
    by another; with glibc's default (a threshold that rises to the largest block freed, up to
    32 MiB) the big per-layer buffers would stay in every worker's arena in turn, and peak
    memory would grow with the layer count. Fixing the threshold also ends that adjustment for
    the rest of the process (blocks of 4 MiB or more are mapped fresh: a page fault per 4 KiB,
    about 1 % of coding them)."""
    global _heap_set
    if _heap_set:
        return
    _heap_set = True
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # not glibc
        pass


_heap_set = False
MMAP_THRESHOLD = 4 << 20


_INLINE = Workers(1)


def pipeline(items, read, work, write, nbytes, workers: Workers) -> None:
    """``write(work(read(item)))`` for each item, written in order; ``work`` runs on the
    workers while the main thread reads ahead and writes, with at most ``INFLIGHT_BYTES``
    (``nbytes(item)`` each) read and not yet written beyond the oldest (none with one thread);
    an item under ``SMALL_LAYER_BYTES`` is worked in the main thread, in turn. An error
    reading an item is raised after the items before it (theirs first)."""
    budget = INFLIGHT_BYTES if workers.threads > 1 else 0
    pending: deque = deque()
    held = 0
    for item in items:
        size = nbytes(item)
        while pending and (held + size > budget or pending[0][0].done()):
            fut, done = pending.popleft()  # the oldest: when the budget is full, or finished
            write(fut.result())
            held -= done
            del fut
        try:
            data = read(item)
        except Exception as e:
            fut = Future()
            fut.set_exception(e)
            pending.append((fut, 0))
            break
        job = workers.submit if size >= SMALL_LAYER_BYTES else _INLINE.submit
        pending.append((job(work, data), size))
        held += size
        del data
    while pending:
        write(pending.popleft()[0].result())
