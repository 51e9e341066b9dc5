"""``GradientRecorder``: the selected parameters' gradients of each recorded step, cast, checked
and handed to a ``co3cli.dump.StepWriter`` (directly, or through the background writer).

The options and the dump it writes are described in ``co3cli.recorder``.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from co3cli.checks import check_int, check_int_list
from co3cli.dump import StepWriter
from co3cli.dump.schema import STORAGE_DTYPES, STREAM_RE, attr_value
from co3cli.errors import InputError
from co3cli.recorder.background import BackgroundWriter
from co3cli.recorder.select import select
from co3cli.registry import one_of

DTYPES = tuple(STORAGE_DTYPES)  # float32, float16, bfloat16
NONFINITE_POLICIES = ("error", "skip", "record")
MISSING_POLICIES = ("error", "skip")
_RESERVED_ATTRS = ("schema", "layers", "streams", "reduction", "aliases", "absent")


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    return one_of(name, value, allowed)


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

        self._torch = torch
        if every is not None and steps is not None:
            raise InputError("give every=N or steps=[...], not both")
        if steps is not None:
            self._steps = frozenset(check_int_list("steps", steps, lo=0))
            self._every = None
        else:
            self._every, self._steps = check_int("every", 1 if every is None else every, 1), None
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
            or not all(isinstance(s, str) and STREAM_RE.match(s) for s in self.streams)
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
        background = background and not average  # epoch means are written by end_epoch
        self._bg = BackgroundWriter(self._writer, self._rows) if background else None

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

    def _stored(self, c: Any) -> np.ndarray:
        """A cast tensor as a writer's row (bfloat16: its uint16 bit patterns)."""
        if c.dtype == self._torch.bfloat16:
            return c.view(self._torch.int16).numpy().view(np.uint16)
        return c.numpy()

    def _rows(self, index: int, items: Iterable[tuple[tuple[str, str], Any]],
              dtype: str | None = None) -> dict | None:
        """The step's rows {dataset: row} cast to ``dtype`` (default: the storage type), or None
        when the NaN/Inf policy skips the step (counted in ``steps_skipped``)."""
        rows = {}
        for key, t in items:
            c = self._cast(t, dtype or self.dtype)
            if not self._finite_or_policy(index, key, c):
                self.steps_skipped["nonfinite"] += 1
                return None
            rows[self._datasets[key]] = self._stored(c)
        return rows

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
            self._next = check_int("step", step, 0)
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
            self._bg.submit(index, tensors, loss_v, lr_v)
            return True
        rows = self._rows(index, tensors.items())
        if rows is None:
            return False
        self._writer.write(index, rows, loss_v, lr_v)
        return True

    def _writer_failure(self) -> None:
        """If the writer failed and closed the dump: stop the background writer, raise its error."""
        if self._bg is not None and self._writer._closed:
            bg, self._bg = self._bg, None
            bg.abandon()

    def flush(self) -> None:
        """Wait until every step handed to ``step`` is committed (or raise its error)."""
        self._writer_failure()
        if self.closed:
            raise InputError(f"recorder for {self.path} is closed")
        if self._bg is not None:
            self._bg.flush()

    def _accumulate(self, index: int, tensors: dict, loss: float | None, lr: float | None) -> bool:
        arrays = self._rows(index, tensors.items(), "float32")
        if arrays is None:
            return False
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
        for key in attrs:
            if key in _RESERVED_ATTRS:
                raise InputError(f"attrs: {key!r} is reserved (written by the recorder)")
        self._late_attrs.update({k: attr_value(k, v) for k, v in attrs.items()})

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
            self._epoch_next = check_int("epoch", epoch, 0)
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
        rows = {name: self._stored(torch.from_numpy(acc / n).to(getattr(torch, self.dtype)))
                for name, acc in self._sums.items()}
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
                if self._bg is not None:  # (a writer failure during flush may have ended it)
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
