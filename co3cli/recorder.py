"""Record a training loop's gradients into a ``co3.gradients/1`` dump, from your own code.

::

    your loop: loss.backward() --rec.step(loss=loss)--> p.grad of the selected parameters
        --cast (float32 | float16 | bfloat16), NaN/Inf policy--> StepWriter.write --> dump.h5

    from co3cli import GradientRecorder
    with GradientRecorder(model, "dump.h5", every=10, layers="*.weight") as rec:
        for x, y in loader:
            loss = loss_fn(model(x), y); opt.zero_grad(); loss.backward()
            rec.step(loss=loss)          # records p.grad on every 10th call (steps 0, 10, ...)
            opt.step()

The dump is written incrementally to its final path and flushed after each recorded step, so
a killed run leaves a valid dump of the steps committed so far (with the default background
writer, ``background=True``, all but at most the last two handed over; see ``_settle`` for how
``.grad`` tensors are borrowed without a copy and checked; ``co3cli.dump.StepWriter``
and the schema extensions ``streams``, ``reduction``, ``aliases``, ``absent`` and the layer
attribute ``dtype`` in ``co3cli.dump``). Memory is bounded: each gradient is copied to the CPU
once, written and dropped (``average=True`` keeps one float64 sum per parameter).

Options, each an explicit recorded choice (``config`` root attribute):

* selection: ``layers`` = comma-separated globs over parameter names (``"*.weight,fc2.*"``) or
  ``"re:<regex>"`` (``re.fullmatch``); ``every=N`` (steps ``s % N == 0``) or ``steps=[...]``.
* ``dtype``: storage type, ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``.
* ``on_nonfinite``: NaN/Inf in a recorded value: ``"error"`` (default), ``"skip"`` the step
  (counted in ``steps_skipped``) or ``"record"`` as is.
* ``on_missing``: a selected trainable parameter whose ``.grad`` is None: ``"error"`` (default)
  or ``"skip"`` the step. Zeros are never written in its place. Frozen parameters
  (``requires_grad=False``) are not recorded; the root attribute ``absent`` lists them.
* tied parameters (one tensor under several names) are recorded once under the first name;
  the root attribute ``aliases`` maps each other name to it.
* ``streams=("raw", "decoded")``: several values per parameter (what a compressor
  transmitted, ...): ``rec.step(streams={"decoded": {name: tensor}})``; ``raw`` is ``p.grad``.
* ``average=True``: ``step`` accumulates, ``end_epoch`` writes the epoch mean as one row
  (``steps`` = epoch numbers, ``reduction="epoch-mean"``).
* ``background=True`` (default): ``step`` hands the step to a writer thread and returns; the
  writer's errors (NaN/Inf, I/O, a borrowed tensor modified in place) are raised by the next
  ``step``, ``flush`` or ``close``. ``background=False`` writes inside ``step``. In-place
  writes that bypass autograd's version counter (through ``.data`` or ``.numpy()`` views) after
  ``step`` are not detected: use ``background=False`` in such loops.
* ``resume=True``: append to an existing dump with the same layout (without it, an existing
  file at ``path`` is replaced).

Step indices count ``step`` calls from 0 (on resume: from the last committed step + 1), or are
given explicitly with ``rec.step(step=...)`` (epoch indices: ``rec.end_epoch(epoch=...)``).
``rec.set_attrs(final_loss=..., ...)`` adds root attributes known only at the end of training;
they are written when the recorder closes (and only if the dump holds a step).
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from co3cli.errors import InputError

DTYPES = ("float32", "float16", "bfloat16")
NONFINITE_POLICIES = ("error", "skip", "record")
MISSING_POLICIES = ("error", "skip")
_RESERVED_ATTRS = ("schema", "layers", "streams", "reduction", "aliases", "absent")
_STREAM_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise InputError(f"{name}={value!r} is not one of {', '.join(map(repr, allowed))}")
    return value


def _matcher(layers: str):
    if not isinstance(layers, str) or not layers.strip():
        raise InputError(f"layers={layers!r} must be a non-empty glob list or 're:<regex>'")
    if layers.startswith("re:"):
        try:
            rx = re.compile(layers[3:])
        except re.error as exc:
            raise InputError(f"layers={layers!r} is not a valid regular expression: {exc}") from exc
        return lambda n: rx.fullmatch(n) is not None
    patterns = [p.strip() for p in layers.split(",") if p.strip()]
    if not patterns:
        raise InputError(f"layers={layers!r} holds no glob pattern")
    return lambda n: any(fnmatch.fnmatchcase(n, p) for p in patterns)


def select(model: Any, layers: str) -> tuple[list[tuple[str, Any]], dict[str, str], dict[str, str]]:
    """The parameters ``layers`` selects: ``(recorded [(name, p)], aliases, absent)``.

    A tensor reachable under several names (tied) is selected when any name matches and is
    recorded under its first name; ``aliases`` maps its other names to that one. Frozen
    parameters go to ``absent`` ({name: reason}) instead of ``recorded``.
    """
    match = _matcher(layers)
    names: dict[int, list[str]] = {}
    params: dict[int, Any] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
        params[id(p)] = p
    recorded, aliases, absent = [], {}, {}
    for key, all_names in names.items():
        if not any(match(n) for n in all_names):
            continue
        first, p = all_names[0], params[key]
        if not p.requires_grad:
            absent[first] = "frozen (requires_grad=False)"
            continue
        recorded.append((first, p))
        aliases.update({alias: first for alias in all_names[1:]})
    if not recorded:
        listed = ", ".join(n for ns in names.values() for n in ns)
        why = f" (all frozen: {', '.join(absent)})" if absent else ""
        raise InputError(
            f"layers={layers!r} selects no trainable parameter{why}; parameters: {listed}"
        )
    return recorded, aliases, absent


class GradientRecorder:
    """Record ``p.grad`` of selected parameters of ``model`` into the dump ``path``.

    See the module docstring for the options. Use as a context manager (it closes on
    exceptions too; committed steps stay valid) or call ``close()``.
    """

    def __init__(
        self,
        model: Any,
        path: str | os.PathLike,
        *,
        every: int | None = None,
        steps: Iterable[int] | None = None,
        layers: str = "*",
        dtype: str = "float32",
        streams: Iterable[str] = ("raw",),
        optimizer: Any = None,
        attrs: Mapping[str, Any] | None = None,
        on_nonfinite: str = "error",
        on_missing: str = "error",
        average: bool = False,
        resume: bool = False,
        background: bool = True,
    ):
        import torch

        from co3cli.dump import StepWriter

        self._torch = torch
        if every is not None and steps is not None:
            raise InputError("give every=N or steps=[...], not both")
        if steps is not None:
            step_list = list(steps)
            if not step_list or not all(
                isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0
                for s in step_list
            ):
                raise InputError(f"steps={steps!r} must be a non-empty list of integers >= 0")
            self._steps = frozenset(int(s) for s in step_list)
            self._every = None
        else:
            every = 1 if every is None else every
            if isinstance(every, bool) or not isinstance(every, int) or every < 1:
                raise InputError(f"every={every!r} must be an integer >= 1")
            self._every, self._steps = every, None
        self.dtype = _choice("dtype", dtype, DTYPES)
        self.on_nonfinite = _choice("on_nonfinite", on_nonfinite, NONFINITE_POLICIES)
        self.on_missing = _choice("on_missing", on_missing, MISSING_POLICIES)
        if not isinstance(average, bool):
            raise InputError(f"average={average!r} must be True or False")
        self.average = average
        if not isinstance(background, bool):
            raise InputError(f"background={background!r} must be True or False")
        self.streams = tuple(streams) if not isinstance(streams, str) else (streams,)
        if (
            not self.streams
            or len(set(self.streams)) != len(self.streams)
            or not all(isinstance(s, str) and _STREAM_RE.match(s) for s in self.streams)
        ):
            raise InputError(
                f"streams={streams!r} must be distinct names of letters, digits, '_', '.', '-'"
            )
        nested = self.streams != ("raw",)
        if optimizer is not None and not hasattr(optimizer, "param_groups"):
            raise InputError(f"optimizer={optimizer!r} has no param_groups (not a torch optimizer)")
        self._optimizer = optimizer
        for key in attrs or {}:
            if key in _RESERVED_ATTRS:
                raise InputError(f"attrs: {key!r} is reserved (written by the recorder)")

        self._selected, self._aliases, self._absent = select(model, layers)
        self._datasets = {
            (s, n): (f"{s}/{n}" if nested else n) for s in self.streams for n, _ in self._selected
        }
        config = dict(
            every=self._every, steps=sorted(self._steps) if self._steps else None, layers=layers,
            dtype=dtype, streams=list(self.streams), on_nonfinite=on_nonfinite,
            on_missing=on_missing, average=average,
        )
        root: dict[str, Any] = dict(
            model=type(model).__name__, recorder="co3cli.GradientRecorder",
            config=json.dumps(config, sort_keys=True),
        )
        if optimizer is not None:
            root["optimizer"] = type(optimizer).__name__
        if self._every is not None:
            root["every"] = self._every
        if self._aliases:
            root["aliases"] = dict(self._aliases)
        if self._absent:
            root["absent"] = dict(self._absent)
        root.update(attrs or {})
        self._writer = StepWriter(
            path,
            {self._datasets[(s, n)]: tuple(p.shape)
             for s in self.streams for n, p in self._selected},
            dtype=self.dtype,
            streams=list(self.streams) if nested else None,
            reduction="epoch-mean" if average else "per-step",
            attrs=root,
            resume=resume,
        )
        self.path = self._writer.path
        last = self._writer.h5["steps"][-1] if self._writer.nrows else -1
        self._epoch_next = int(last) + 1  # next epoch index (average=True)
        self._next = 0 if average else int(last) + 1  # next step index
        self.steps_skipped = {"nonfinite": 0, "missing": 0}
        self._sums: dict[str, np.ndarray] = {}
        self._nsum = 0
        self._loss_sum: float | None = 0.0
        self._last_lr: float | None = None
        self._late_attrs: dict[str, Any] = {}
        # background writing (see _submit): the writer thread, the borrowed tensors of the
        # staged step awaiting their in-place check, the previous step's tensor per key
        self._bg = _Worker() if background and not average else None
        self._awaiting: tuple[int, list[tuple[tuple[str, str], Any, int]]] | None = None
        self._prev: dict[tuple[str, str], Any] = {}
        self._copy_keys: set[tuple[str, str]] = set()

    # -- properties ---------------------------------------------------------------------------
    @property
    def steps_recorded(self) -> int:
        """Rows committed to the dump (including those of a resumed file); waits for the writer."""
        self._writer_failure()
        if not self.closed:
            self.flush()
        return self._writer.nrows

    @property
    def bytes_written(self) -> int:
        """Size of the dump file on disk now."""
        return self._writer.nbytes

    @property
    def layers(self) -> list[str]:
        """Names of the recorded parameters (tied ones once, frozen ones not)."""
        return [n for n, _ in self._selected]

    @property
    def closed(self) -> bool:
        return self._writer._closed

    def __enter__(self) -> GradientRecorder:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close()
        return False

    # -- recording ----------------------------------------------------------------------------
    def _wanted(self, step: int) -> bool:
        return step in self._steps if self._steps is not None else step % self._every == 0

    def _gather(self, step: int, streams: Mapping[str, Mapping[str, Any]] | None):
        """{(stream, name): tensor} for this step, or None when on_missing='skip' applies."""
        extra = dict(streams or {})
        if "raw" in extra:
            raise InputError("streams: 'raw' is p.grad and is taken from the model; do not pass it")
        wanted = [s for s in self.streams if s != "raw"]
        unknown = [s for s in extra if s not in self.streams]
        if unknown:
            raise InputError(
                f"streams: {unknown} are not among the recorder's {list(self.streams)}"
            )
        lacking = [s for s in wanted if s not in extra]
        if lacking:
            raise InputError(f"step {step}: streams {lacking} were not given (pass streams=...)")
        out = {}
        for s in self.streams:
            for name, p in self._selected:
                if s == "raw":
                    t = p.grad
                    if t is None:
                        if self.on_missing == "skip":
                            return None
                        raise InputError(
                            f"step {step}: parameter {name!r} has no gradient (.grad is None); "
                            "use on_missing='skip' to skip such steps, or freeze it "
                            "(requires_grad=False) to leave it out"
                        )
                else:
                    if name not in extra[s]:
                        raise InputError(f"step {step}: stream {s!r} has no tensor for {name!r}")
                    t = self._torch.as_tensor(extra[s][name])
                if tuple(t.shape) != tuple(p.shape):
                    raise InputError(
                        f"step {step}: stream {s!r} {name!r} has shape {tuple(t.shape)}, "
                        f"expected {tuple(p.shape)}"
                    )
                out[(s, name)] = t.detach()
        return out

    def _cast(self, t: Any, dtype: str) -> Any:
        torch = self._torch
        return t.to("cpu", getattr(torch, dtype)).reshape(-1)

    def _finite_or_policy(self, step: int, key: tuple[str, str], c: Any) -> bool:
        if self.on_nonfinite == "record":
            return True
        # A sum is finite only if every term is (NaN/Inf propagate), and costs a fifth of
        # isfinite().all(); only a non-finite sum (maybe a mere overflow) needs the exact test.
        if math.isfinite(float(c.sum())) or bool(self._torch.isfinite(c).all()):
            return True
        if self.on_nonfinite == "skip":
            return False
        s, name = key
        hint = " (float16 overflows above 65504)" if c.dtype == self._torch.float16 else ""
        raise InputError(
            f"step {step}: {'gradient' if s == 'raw' else f'stream {s!r}'} of layer {name!r} "
            f"has non-finite values (NaN/Inf){hint}; on_nonfinite='skip' or 'record' to go on"
        )

    @staticmethod
    def _value(x: Any, what: str) -> float | None:
        if x is None:
            return None
        try:
            v = float(x.detach()) if hasattr(x, "detach") else float(x)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InputError(f"{what}={x!r} is not a number") from exc
        return v

    def _lr(self, lr: Any) -> float | None:
        if lr is None and self._optimizer is not None:
            lr = self._optimizer.param_groups[0]["lr"]
        return self._value(lr, "lr")

    def step(
        self,
        loss: Any = None,
        lr: Any = None,
        *,
        streams: Mapping[str, Mapping[str, Any]] | None = None,
        step: int | None = None,
    ) -> bool:
        """Handle one training step (call after ``backward()``, before ``optimizer.step()``).

        Records (or, with ``average=True``, accumulates) the selected gradients when the step
        index is selected; returns whether it did. ``lr`` defaults to the optimizer's
        (first param group) when one was given. ``step`` overrides the running step index.
        """
        self._writer_failure()
        if self.closed:
            raise InputError(f"recorder for {self.path} is closed")
        if step is not None:
            if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
                raise InputError(f"step={step!r} must be an integer >= 0")
            self._next = int(step)
        index = self._next
        self._next += 1
        if not self._wanted(index):
            return False
        tensors = self._gather(index, streams)
        if tensors is None:
            self.steps_skipped["missing"] += 1
            return False
        loss_v, lr_v = self._value(loss, "loss"), self._lr(lr)
        if self.average:
            return self._accumulate(index, tensors, loss_v, lr_v)
        if self._bg is not None:
            self._submit(index, tensors, loss_v, lr_v)
            return True
        rows = {}
        for key, t in tensors.items():
            c = self._cast(t, self.dtype)
            if not self._finite_or_policy(index, key, c):
                self.steps_skipped["nonfinite"] += 1
                return False
            if self.dtype == "bfloat16":
                rows[self._datasets[key]] = c.view(self._torch.int16).numpy().view(np.uint16)
            else:
                rows[self._datasets[key]] = c.numpy()
        self._writer.write(index, rows, loss_v, lr_v)
        return True

    # -- background writing ----------------------------------------------------------------
    # step() hands the step to a writer thread and returns; the thread casts, checks NaN/Inf,
    # writes and commits while training goes on. A CPU tensor is handed over without a copy
    # ("borrowed") when the previous recorded step's tensor for that key had other storage
    # (zero_grad(set_to_none=True), torch's default: nothing writes to the old .grad again);
    # otherwise (first step, a .grad reused in place, a non-CPU tensor) it is copied. A step
    # with borrowed tensors is staged, not committed, until the next step()/flush()/close()
    # checks on the main thread that no borrowed tensor was modified in place since (autograd's
    # version counter); a modified one is an error and the step is dropped, never written wrong.
    def _settle(self) -> bool:
        """Wait for the writer; raise its error; True if a staged step passed its check."""
        error = self._bg.wait()
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

    def _writer_failure(self) -> None:
        """If the writer failed and closed the dump: stop it and raise its error."""
        if self._bg is not None and self._writer._closed:
            error = self._bg.wait()
            self._awaiting = None
            self._bg.stop()
            self._bg = None
            if error is not None:
                raise error

    def _hand_over(self, key: tuple[str, str], t: Any, borrowed: list) -> Any:
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

    def _submit(self, index: int, tensors: dict, loss: float | None, lr: float | None) -> None:
        commit_prev = self._settle()
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
        self._bg.submit(self._write_job, commit_prev, index, items, loss, lr, not borrowed)

    def _write_job(self, commit_prev, index, items, loss, lr, commit_now) -> None:
        """Runs on the writer thread."""
        if commit_prev:
            self._writer.commit()
        rows = {}
        for key, t in items:
            c = self._cast(t, self.dtype)
            if not self._finite_or_policy(index, key, c):
                self.steps_skipped["nonfinite"] += 1
                self._awaiting = None
                return
            rows[self._datasets[key]] = (
                c.view(self._torch.int16).numpy().view(np.uint16)
                if self.dtype == "bfloat16"
                else c.numpy()
            )
        self._writer.stage(index, rows, loss, lr)
        if commit_now:
            self._writer.commit()

    def flush(self) -> None:
        """Wait until every step handed to ``step`` is committed to the dump (or raise its error)."""
        self._writer_failure()
        if self.closed:
            raise InputError(f"recorder for {self.path} is closed")
        if self._bg is not None and self._settle():
            self._writer.commit()

    def _accumulate(self, index: int, tensors: dict, loss: float | None, lr: float | None) -> bool:
        arrays = {}
        for key, t in tensors.items():
            c = self._cast(t, "float32")
            if not self._finite_or_policy(index, key, c):
                self.steps_skipped["nonfinite"] += 1
                return False
            arrays[self._datasets[key]] = c.numpy()
        for name, a in arrays.items():
            acc = self._sums.get(name)
            if acc is None:
                self._sums[name] = a.astype(np.float64)
            else:
                np.add(acc, a, out=acc)
        self._nsum += 1
        self._loss_sum = None if (loss is None or self._loss_sum is None) else self._loss_sum + loss
        self._last_lr = lr
        return True

    @property
    def steps_accumulated(self) -> int:
        """Steps summed since the last ``end_epoch`` (``average=True``; 0 otherwise)."""
        return self._nsum

    def set_attrs(self, **attrs: Any) -> None:
        """Root attributes written when the recorder closes (e.g. ``final_loss``).

        Later calls add to (or replace) earlier ones. The recorder's own attributes
        (``schema``, ``layers``, ``streams``, ``reduction``, ``aliases``, ``absent``) are refused.
        """
        if self.closed:
            raise InputError(f"recorder for {self.path} is closed")
        from co3cli.dump.schema import attr_value as _attr_value

        for key in attrs:
            if key in _RESERVED_ATTRS:
                raise InputError(f"attrs: {key!r} is reserved (written by the recorder)")
        self._late_attrs.update({k: _attr_value(k, v) for k, v in attrs.items()})

    def end_epoch(self, loss: Any = None, lr: Any = None, *, epoch: int | None = None) -> int:
        """Write the mean of the gradients accumulated since the last call (``average=True``).

        The row's step index is the epoch number (0, 1, ... counting ``end_epoch`` calls, or
        ``epoch`` when given). ``loss`` defaults to the mean of the steps' losses when every
        step gave one; ``lr`` to the last step's. Returns the number of steps averaged.
        """
        if not self.average:
            raise InputError("end_epoch() needs GradientRecorder(..., average=True)")
        if self.closed:
            raise InputError(f"recorder for {self.path} is closed")
        if epoch is not None:
            if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
                raise InputError(f"epoch={epoch!r} must be an integer >= 0")
            self._epoch_next = int(epoch)
        if self._nsum == 0:
            raise InputError(
                f"epoch {self._epoch_next}: no step was accumulated; nothing to average"
            )
        torch = self._torch
        n = self._nsum
        loss_v = self._value(loss, "loss")
        if loss_v is None and self._loss_sum is not None:
            loss_v = self._loss_sum / n
        lr_v = self._lr(lr) if lr is not None else self._last_lr
        rows = {}
        for name, acc in self._sums.items():
            mean = torch.from_numpy(acc / n).to(getattr(torch, self.dtype))
            rows[name] = (
                mean.view(torch.int16).numpy().view(np.uint16)
                if self.dtype == "bfloat16"
                else mean.numpy()
            )
        self._writer.write(self._epoch_next, rows, loss_v, lr_v)
        self._epoch_next += 1
        self._sums, self._nsum, self._loss_sum, self._last_lr = {}, 0, 0.0, None
        return n

    def close(self) -> None:
        """Finish the dump (idempotent). An unfinished epoch's sums are dropped, with a warning.

        With the background writer, the steps handed over are committed first; an error of
        theirs (NaN/Inf, I/O, a tensor modified in place) is raised after the dump is closed
        with the steps committed before it.
        """
        self._writer_failure()
        if self.closed:
            return
        error = None
        if self._bg is not None:
            try:
                self.flush()
            except InputError as exc:
                error = exc
            finally:
                self._bg.stop()
                self._bg = None
            if self.closed:  # the writer failed and closed the dump
                raise error
        if self._nsum:
            warnings.warn(
                f"GradientRecorder: {self._nsum} accumulated step(s) of an unfinished epoch were "
                "not written (call end_epoch() first)",
                stacklevel=2,
            )
            self._sums, self._nsum = {}, 0
        if self._late_attrs and self._writer.nrows:
            try:
                for key, value in self._late_attrs.items():
                    self._writer.h5.attrs[key] = value
            except (OSError, RuntimeError) as exc:  # h5py raises both
                self._writer._fail()
                raise InputError(f"cannot finish dump {self.path}: {exc}") from exc
        self._writer.close()
        if error is not None:
            raise error


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
