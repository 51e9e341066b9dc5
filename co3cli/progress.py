"""Progress on stderr for every command: a bar on a terminal, a heartbeat line elsewhere.

::

    progress_bar(enabled, desc, total=, unit=)        the one helper of every command
        enabled, stderr a terminal   -> a tqdm bar (rate, ETA, the command's postfix)
        enabled, stderr a file/pipe  -> Heartbeat: one line every CO3_HEARTBEAT seconds
                                        (default 20), and a last one at the end if it spoke:
            co3: fl co3: round 40/200 (20 %), loss 0.412, bpe 1.146, acc 0.8812, 31 s elapsed, ETA 2 min 4 s
        not enabled (-q)             -> a silent bar (iterates, prints nothing)
    progress_iter(it, enabled, desc)  ``it`` itself when not enabled, else through a progress_bar

A run shorter than the interval prints nothing, as a piped ``zstd`` or ``rsync`` would; a long
run redirected to a log file says where it is (``-q`` keeps it silent). ``CO3_HEARTBEAT=0``
prints a line at every update (the tests use it). The bar and the heartbeat share one interface,
tqdm's: ``update(n)``, ``set_postfix(dict | **kw, refresh=)``, ``close()``, ``disable``, iteration
and ``with``.
"""

from __future__ import annotations

import os
import sys
import time

from co3cli.errors import InputError

HEARTBEAT_ENV = "CO3_HEARTBEAT"
HEARTBEAT_S = 20.0  # seconds between two heartbeat lines, by default


def heartbeat_interval() -> float:
    """Seconds between heartbeat lines: ``$CO3_HEARTBEAT`` or 20."""
    raw = os.environ.get(HEARTBEAT_ENV)
    if raw is None or raw.strip() == "":
        return HEARTBEAT_S
    try:
        value = float(raw.strip().removesuffix("s"))
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise InputError(f"{HEARTBEAT_ENV}={raw!r} must be a number of seconds >= 0")
    return value


def duration(seconds: float) -> str:
    """``4.2 s``, ``42 s``, ``2 min 4 s``, ``1 h 05 min``: a span for a log line."""
    if seconds < 9.95:
        return f"{max(seconds, 0.0):.1f} s"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Heartbeat:
    """tqdm's interface, printing one plain line to stderr at most every ``interval`` seconds.

    The line holds the count (of ``total``, with the percentage), the postfix last set, the time
    elapsed and, with a total, the ETA from the mean rate so far. ``close`` prints a last line
    (``done``) only if an earlier one was printed, so short runs stay silent.
    """

    disable = False  # callers skip formatting their postfix for a disabled (silent) bar

    def __init__(self, desc: str, *, total=None, unit: str = "step", iterable=None,
                 interval: float | None = None, stream=None):
        self.desc, self.unit, self.iterable = desc, unit, iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total = total
        self.interval = heartbeat_interval() if interval is None else interval
        self.stream = stream
        self.n = 0
        self.postfix: dict = {}
        self.t0 = self.last = time.monotonic()
        self.lines = 0
        self.closed = False

    def __iter__(self):
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self._emit(now)

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        self.postfix = {**(ordered_dict or {}), **kwargs}

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.lines:
            self._emit(time.monotonic(), done=True)

    def line(self, now: float, done: bool = False) -> str:
        """The heartbeat line at time ``now`` (monotonic)."""
        elapsed = now - self.t0
        count = f"{self.unit} {self.n}"
        if self.total:
            count += f"/{self.total} ({100 * self.n / self.total:.0f} %)"
        parts = [count] + [f"{k} {v}" for k, v in self.postfix.items()]
        parts.append(f"{duration(elapsed)} elapsed")
        if done:
            parts.append("done")
        elif self.total and self.n:
            parts.append(f"ETA {duration(elapsed / self.n * max(self.total - self.n, 0))}")
        return f"co3: {self.desc}: " + ", ".join(parts)

    def _emit(self, now: float, done: bool = False) -> None:
        stream = self.stream or sys.stderr
        print(self.line(now, done), file=stream, flush=True)
        self.lines += 1


def progress_bar(enabled: bool, desc: str, *, total=None, unit: str = "layer", iterable=None,
                 leave: bool = True):
    """A tqdm bar on stderr when ``enabled`` and stderr is a terminal, a :class:`Heartbeat`
    when ``enabled`` and it is not, a silent one otherwise (it still iterates)."""
    from tqdm import tqdm

    terminal = _stderr_is_terminal()
    if enabled and not terminal and sys.stderr is not None:
        return Heartbeat(desc, total=total, unit=unit, iterable=iterable)
    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=leave,
                disable=not (enabled and terminal))


def progress_iter(it, enabled: bool, desc: str, total=None, unit: str = "layer"):
    """``it`` with a :func:`progress_bar` (``it`` itself when not ``enabled``)."""
    return progress_bar(True, desc, total=total, unit=unit, iterable=it) if enabled else it


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return False
