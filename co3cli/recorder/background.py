"""The recorder's background writer: recorded steps are cast, checked and written on a thread.

::

    main thread: rec.step() --submit(index, tensors)--> hand over each tensor: borrowed (no copy)
        or copied --> the writer thread: rows(index, items) (cast, NaN/Inf policy)
        --> StepWriter.stage --> commit now (nothing borrowed), or at the next step / flush /
        close once the borrowed tensors are checked unmodified (autograd's version counter)

A CPU tensor is handed over without a copy ("borrowed") when the previous recorded step's tensor
for that key had other storage (``zero_grad(set_to_none=True)``, torch's default: nothing writes
to the old ``.grad`` again); otherwise (first step, a ``.grad`` reused in place, a non-CPU
tensor) it is copied. A step with borrowed tensors is staged, not committed, until the next
``submit``/``flush`` checks on the main thread that no borrowed tensor was modified in place
since; a modified one is an error and the step is dropped, never written wrong. So a killed run
loses at most the last two steps handed over. In-place writes that bypass the version counter
(through ``.data`` or ``.numpy()`` views) are not detected: such loops record with
``GradientRecorder(..., background=False)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from co3cli.errors import InputError

Key = tuple[str, str]  # (stream, parameter name)


class BackgroundWriter:
    """Write the steps handed to ``submit`` through ``writer`` (a ``StepWriter``) on a thread.

    ``rows(index, items)`` runs on the thread: it turns ``[(key, tensor)]`` into the step's
    ``{dataset: row}``, or returns None to leave the step out (the NaN/Inf policy). Errors of the
    thread (NaN/Inf, I/O) are raised by the next ``submit``, ``flush`` or ``abandon``.
    """

    def __init__(self, writer: Any, rows: Callable[[int, list[tuple[Key, Any]]], dict | None]):
        self._writer = writer
        self._rows = rows
        self._worker = _Worker()
        # the borrowed tensors of the staged step awaiting their in-place check, the previous
        # step's tensor per key, the keys whose tensor is reused in place (always copied)
        self._awaiting: tuple[int, list[tuple[Key, Any, int]]] | None = None
        self._prev: dict[Key, Any] = {}
        self._copy_keys: set[Key] = set()

    @property
    def copied_keys(self) -> frozenset[Key]:
        """The keys whose tensor is reused in place (so copied at every step, never borrowed)."""
        return frozenset(self._copy_keys)

    def settle(self) -> bool:
        """Wait for the thread; raise its error; True if a staged step passed its check."""
        error = self._worker.wait()
        awaiting, self._awaiting = self._awaiting, None
        if error is not None:
            raise error
        if awaiting is None:
            return False
        index, borrowed = awaiting
        changed = [key for key, t, version in borrowed if t._version != version]
        if changed:
            s, name = changed[0]
            what = "p.grad" if s == "raw" else f"stream {s!r}"
            raise InputError(
                f"step {index}: {what} of layer {name!r} was modified in place after rec.step() "
                "(e.g. clip_grad_norm_ after recording) while the background writer read it; "
                "the step was not written. Record after the change, or use background=False"
            )
        return True

    def flush(self) -> None:
        """Wait until every step submitted is committed (or raise its error)."""
        if self.settle():
            self._writer.commit()

    def abandon(self) -> None:
        """After the writer failed and closed the dump: stop the thread and raise its error."""
        error = self._worker.wait()
        self._awaiting = None
        self._worker.stop()
        if error is not None:
            raise error

    def stop(self) -> None:
        """Stop the thread (after ``flush``)."""
        self._worker.stop()

    def _hand_over(self, key: Key, t: Any, borrowed: list) -> Any:
        if t.device.type != "cpu":
            return t.to("cpu")  # a copy; no reference to the device tensor is kept
        prev = self._prev.get(key)
        self._prev[key] = t
        if prev is None or key in self._copy_keys:
            return t.clone()
        if prev.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
            self._copy_keys.add(key)  # the same tensor every step: written to in place
            return t.clone()
        borrowed.append((key, t, t._version))
        return t

    def submit(self, index: int, tensors: dict[Key, Any], loss: float | None,
               lr: float | None) -> None:
        """Hand step ``index`` to the thread (committing the previous one once checked)."""
        commit_prev = self.settle()
        try:
            self._writer.check_series(loss is not None, lr is not None)  # raise here, not later
            borrowed: list = []
            items = [(key, self._hand_over(key, t, borrowed)) for key, t in tensors.items()]
        except BaseException:
            if commit_prev:  # the previous step passed its check: keep it
                self._writer.commit()
            raise
        if borrowed:
            self._awaiting = (index, borrowed)
        self._worker.submit(self._job, commit_prev, index, items, loss, lr, not borrowed)

    def _job(self, commit_prev, index, items, loss, lr, commit_now) -> None:
        """Runs on the thread."""
        if commit_prev:
            self._writer.commit()
        rows = self._rows(index, items)
        if rows is None:  # left out: its borrowed tensors need no check
            self._awaiting = None
            return
        self._writer.stage(index, rows, loss, lr)
        if commit_now:
            self._writer.commit()


class _Worker:
    """One daemon thread running submitted jobs in order, at most one at a time in flight."""

    def __init__(self):
        import queue
        import threading

        self._jobs: Any = queue.SimpleQueue()
        self._done = threading.Semaphore(0)
        self._busy = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="co3-recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, args = job
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                self._error = exc
            self._done.release()

    def submit(self, fn, *args) -> None:
        assert not self._busy, "wait() before submitting the next job"
        self._busy = True
        self._jobs.put((fn, args))

    def wait(self) -> BaseException | None:
        """Block until the job in flight (if any) is done; return its exception, if any."""
        if self._busy:
            self._done.acquire()
            self._busy = False
        error, self._error = self._error, None
        return error

    def stop(self) -> None:
        self.wait()
        self._jobs.put(None)
        self._thread.join()
