"""Capture real gradients from training into a ``co3.gradients/1`` dump, step by step.

::

    built-in task (co3cli.tasks: bundled  ------+
    or synthetic data)                          +--> train loop (one thread) --> p.grad of the
    your code: --entry module:make_job ---------+    selected layers every `every` steps (or the
    (co3cli.jobs.capture_entry)                      mean over each epoch) --GradientRecorder
                                                     (co3cli.recorder) --> dump.h5

The gradients are recorded through ``co3cli.recorder.GradientRecorder`` (the same recorder as
for your own loops; see co3cli.dump for the schema): a dump at a path is written in place and
flushed after each row, so a killed run leaves a valid dump of the rows committed so far; ``-``
(stdout) or a file object is recorded to a temporary file in the temp directory and copied out
at the end. A parameter without a gradient is never recorded as zeros: a frozen one
(``requires_grad=False``) is left out and listed in the root attribute ``absent``; a trainable
one whose ``.grad`` is None at a recorded step is an error naming it (select the layers with
``layers``, or freeze it). Tied parameters are recorded once (root attribute ``aliases``).

The built-in tasks (``co3cli.tasks.TASKS``: digits and MNIST-5k MLPs and CNNs, a ResNet on
synthetic CIFAR-like images) are ReLU networks, so that, as in real training, part of every
gradient is exactly zero; all run offline.

``capture`` is deterministic: the seed fixes the weight initialisation (drawn inside
``torch.random.fork_rng``, so the caller's global RNG is untouched), the train/test split and
the minibatch order (a private ``torch.Generator``). Training uses one CPU thread by default.
Steps are numbered from 0; step ``s`` is recorded when ``s % every == 0``, with the gradient of
that step's minibatch loss taken before the optimizer update::

    summary = capture("digits-mlp", "dump.h5", steps=60, every=5)

``epoch_average=True`` records instead the mean of each epoch's minibatch gradients, one row per
epoch (epoch ``e`` recorded when ``e % every == 0``; the ``steps`` dataset then holds epoch
indices and ``loss`` the epoch's mean loss). The root attribute ``reduction`` says which a dump
holds: ``"per-step"`` or ``"epoch-mean"``. Memory is bounded by one step (plus one running sum
per selected layer when averaging): rows go to disk as they are made.

``on_nonfinite`` decides what a NaN/Inf gradient in a selected layer does: ``"error"`` stops with
an error naming the step and the layer (the partial dump is removed), ``"skip"`` leaves that step
out of the dump (training goes on), ``"record"`` writes it as it is. The number of recorded steps
(epoch means: of averaged steps) with NaN/Inf -- skipped, or written as they are -- is stored as
the root attribute ``nonfinite_steps`` (the one name for it; the recorder's in-memory
``steps_skipped["nonfinite"]`` counts only the skipped ones). Any error while recording (disk
full -- checked before each row, since HDF5 handles a full disk badly --, NaN/Inf, a bad job)
removes the partial dump; on Ctrl-C a dump at a path keeps its committed rows.

Your own training code runs through the same loop: ``co3cli.jobs.capture_entry`` (the job
contract is in ``co3cli.jobs``; ``examples/my_job.py`` is a complete job). Each step is
``optimizer.zero_grad(); loss_fn(model(x), y).backward(); record; optimizer.step()``.

Besides the schema's provenance attributes (``task``, ``model`` = the model id, ``optimizer``,
``lr``, ``seed``, versions, ``created``, ``config`` = the capture arguments as JSON) the dump
records ``dataset``, ``synthetic`` (true when the data are synthetic), ``model_repr``,
``momentum``, ``batch_size``, ``every``, ``reduction``, ``on_nonfinite``, ``steps_trained``,
``epochs_trained``, ``nonfinite_steps``, ``n_train``, ``n_test``, ``final_loss`` and
``test_accuracy`` (NaN for ``--entry`` jobs, which have no test split); those known only at
the end of training are written when the recorder closes (``GradientRecorder.set_attrs``). The
recorder adds ``recorder``, ``layers``, ``reduction``, ``absent``/``aliases`` (when there are
such parameters) and an ``lr`` dataset (the optimizer's lr at each recorded row).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from co3cli import __version__
from co3cli.checks import check_int
from co3cli.dump.output import check_space, copy_to_stream, gzip_in_place, human_bytes, os_reason
from co3cli.dump.schema import describe_target
from co3cli.errors import InputError
from co3cli.progress import progress_bar
from co3cli.recorder import NONFINITE_POLICIES, GradientRecorder
from co3cli.registry import one_of
from co3cli.tasks import (
    TorchThreads, build_model, check_optimizer, epoch_batches, get_task, load_task_data,
    make_optimizer,
)
from co3cli.tasks import evaluate as tasks_evaluate


@dataclass(frozen=True)
class CaptureSummary:
    """What ``capture`` did: the recorded layers, entries, and how training went.

    ``steps_recorded`` counts the dump's rows: steps, or epochs when ``reduction`` is
    ``"epoch-mean"``. ``file_bytes`` is the size of the dump written.
    """

    task: str
    out: str
    steps_trained: int
    steps_recorded: int
    layers: tuple[str, ...]
    entries_per_step: int
    total_entries: int
    final_loss: float
    test_accuracy: float
    seconds: float
    epochs_trained: int = 0
    reduction: str = "per-step"
    nonfinite_steps: int = 0
    file_bytes: int = 0

    def __str__(self) -> str:
        rows = "epochs" if self.reduction == "epoch-mean" else "steps"
        acc = "" if math.isnan(self.test_accuracy) else f", test accuracy {self.test_accuracy:.3f}"
        bad = f", {self.nonfinite_steps} non-finite steps" if self.nonfinite_steps else ""
        return (f"{self.steps_trained} steps trained ({self.epochs_trained} epoch(s)), "
                f"{self.steps_recorded} {rows} recorded ({self.reduction}), "
                f"{len(self.layers)} layers, {self.total_entries} entries, "
                f"{human_bytes(self.file_bytes)}, final loss {self.final_loss:.4f}{acc}{bad}, "
                f"{self.seconds:.1f} s")


def check_run_options(steps, epochs, every, seed, on_nonfinite) -> tuple[int | None, int | None]:
    """Check the run options; returns ``(steps, epochs)`` (100 steps when neither is given)."""
    if steps is not None and epochs is not None:
        raise InputError(f"give steps or epochs, not both (steps={steps!r}, epochs={epochs!r})")
    if steps is None and epochs is None:
        steps = 100
    if steps is not None:
        steps = check_int("steps", steps, 1)
    if epochs is not None:
        epochs = check_int("epochs", epochs, 1)
    check_int("every", every, 1)
    check_int("seed", seed, 0)
    one_of("on_nonfinite", on_nonfinite, NONFINITE_POLICIES)
    return steps, epochs


def _train(model, batches, loss_fn, opt, rec, *, steps, epochs, every, on_nonfinite, row_bytes,
           bar, on_step, describe):
    """The loop shared by tasks and entries; returns (steps, epochs, last loss, non-finite steps).

    ``rec`` is the ``GradientRecorder``: per step it is given step ``s`` when ``s % every == 0``;
    with ``rec.average`` it is given every step of epoch ``e`` when ``e % every == 0`` and the
    epoch's mean is written by ``rec.end_epoch(epoch=e)``.
    """
    step = epoch = recorded_nonfinite = 0
    loss_value = float("nan")
    last_post = -math.inf
    model.train()
    while (epochs is None or epoch < epochs) and (steps is None or step < steps):
        seen = 0
        record_epoch = rec.average and epoch % every == 0
        for batch in batches(epoch):
            if steps is not None and step >= steps:
                break
            x, y = _unpack(batch, step, describe)
            opt.zero_grad(set_to_none=False)
            loss = loss_fn(model(x), y)
            if not (hasattr(loss, "backward") and getattr(loss, "ndim", None) == 0):
                raise InputError(f"{describe}: loss_fn must return a scalar tensor, "
                                 f"got {type(loss).__name__} {tuple(getattr(loss, 'shape', ()))}")
            loss.backward()
            loss_value = float(loss.item())
            if record_epoch or (not rec.average and step % every == 0):
                recorded_nonfinite += _record(rec, model, step, loss_value, opt, on_nonfinite,
                                              row_bytes)
            if on_step is not None:
                on_step(step, model, loss_value)
            opt.step()
            step += 1
            seen += 1
            bar.update(1)
            now = time.monotonic()
            if not bar.disable and now - last_post > 0.5:
                _postfix(bar, loss_value, rec)
                last_post = now
        if seen == 0:
            raise InputError(
                f"{describe}: the data yielded no batches in epoch {epoch} (step {step}); "
                "give a re-iterable such as a DataLoader or a list, not a one-shot generator"
            )
        if record_epoch and rec.steps_accumulated:  # an epoch whose steps were all skipped: no row
            check_space(rec.path, row_bytes)
            rec.end_epoch(epoch=epoch)
        epoch += 1
    with _nonfinite_hint(lr_of(opt)):
        rec.flush()  # the background writer's last steps: committed, or their error raised
    if not bar.disable:
        _postfix(bar, loss_value, rec)
    return step, epoch, loss_value, rec.steps_skipped["nonfinite"] + recorded_nonfinite


def _record(rec, model, step: int, loss_value: float, opt, on_nonfinite: str,
            row_bytes: int) -> int:
    """Hand step ``step`` to the recorder; NaN/Inf errors say how to go on from the CLI too.

    Returns 1 when ``on_nonfinite`` is ``"record"`` and the step recorded NaN/Inf (the
    recorder counts only the steps it skips), else 0.
    """
    lr = lr_of(opt)
    if not rec.average:
        check_space(rec.path, row_bytes)
    with _nonfinite_hint(lr):
        rec.step(loss=loss_value, step=step)
        if on_nonfinite == "error" and not math.isfinite(loss_value):
            rec.flush()  # the background writer's NaN/Inf gradient error names the layer
    if on_nonfinite == "error" and not math.isfinite(loss_value):
        raise InputError(
            f"step {step}: the loss is {loss_value} (lr {lr:.4g}); lower the learning "
            "rate, or use on_nonfinite (--on-nonfinite) 'skip' or 'record'"
        )
    if on_nonfinite == "record":
        import torch

        params = dict(model.named_parameters(remove_duplicate=False))
        if any(not bool(torch.isfinite(params[n].grad).all()) for n in rec.layers):
            return 1
    return 0


def lr_of(opt) -> float:
    """The optimizer's learning rate (first param group; NaN if it has none)."""
    return float(opt.param_groups[0].get("lr", float("nan")))


@contextlib.contextmanager
def _nonfinite_hint(lr: float):
    """Add how to go on (from the CLI too) to the recorder's NaN/Inf gradient errors."""
    try:
        yield
    except InputError as exc:
        if "non-finite" not in str(exc):
            raise
        head = str(exc).split(";")[0]
        raise InputError(
            f"{head} (lr {lr:.4g}); lower the learning rate, or use "
            "on_nonfinite (--on-nonfinite) 'skip' or 'record'"
        ) from None


def _postfix(bar, loss_value: float, rec) -> None:
    """Show the loss and the bytes written so far (the dump's size on disk) on the bar."""
    bar.set_postfix(loss=f"{loss_value:.4f}", written=human_bytes(rec.bytes_written),
                    refresh=False)


def _unpack(batch: Any, step: int, describe: str) -> tuple[Any, Any]:
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    raise InputError(f"{describe}: batch {step} of the data is a {type(batch).__name__}, "
                     "not an (x, y) pair")


def run_job(out, attrs, model, opt, loss_fn, batches, *, task, t0, after, layers, steps, epochs,
            every, epoch_average, on_nonfinite, compression, progress, on_step, total,
            desc) -> CaptureSummary:
    """Train ``model`` on ``batches(epoch)``, recording through a ``GradientRecorder`` into ``out``.

    ``attrs`` are the dump's root attributes; ``after(model)`` returns more, known only after
    training (``test_accuracy`` among them). A path is written in place (crash-safe: a killed
    run leaves a valid dump of the committed steps); ``-`` or a file object is recorded to a
    temporary file, copied out at the end. On an error the partial dump is removed (on Ctrl-C
    a dump at a path keeps its committed steps). ``task`` and ``t0`` go to the summary.
    """
    if compression not in (None, "gzip"):
        raise InputError(f"compression={compression!r} is not one of None, 'gzip'")
    to_stream = not isinstance(out, (str, os.PathLike)) or os.fspath(out) == "-"
    if to_stream and not (out == "-" or hasattr(out, "write")):
        raise InputError(f"dump output {out!r} is not a path, '-' or a binary file object")
    if to_stream:
        fd, path = tempfile.mkstemp(prefix="co3-dump-", suffix=".h5")
        os.close(fd)
    else:
        path = os.fspath(out)
    label = describe_target(out)
    rec = None
    try:
        rec = GradientRecorder(model, path, every=1 if epoch_average else every, layers=layers,
                               optimizer=opt, attrs=attrs, on_nonfinite=on_nonfinite,
                               average=epoch_average)
        numel = dict(model.named_parameters(remove_duplicate=False))
        row_bytes = sum(max(2 * 4 * numel[n].numel(), 1 << 15) for n in rec.layers)
        with progress_bar(progress, desc, total=total, unit="step") as bar:
            n_steps, n_epochs, loss_value, nonfinite = _train(
                model, batches, loss_fn, opt, rec, steps=steps, epochs=epochs, every=every,
                on_nonfinite=on_nonfinite, row_bytes=row_bytes, bar=bar, on_step=on_step,
                describe=desc)
        skipped = rec.steps_skipped["nonfinite"]
        if rec.steps_recorded == 0:
            raise InputError(
                f"{desc}: no step was recorded ({skipped} step(s) with "
                "non-finite gradients were skipped)" if skipped else
                f"{desc}: no step was recorded"
            )
        extra = after(model)
        rec.set_attrs(steps_trained=n_steps, epochs_trained=n_epochs, nonfinite_steps=nonfinite,
                      final_loss=loss_value, **extra)
        with _nonfinite_hint(lr_of(opt)):
            rec.close()
        if compression == "gzip":
            gzip_in_place(path)
        nbytes = copy_to_stream(path, out) if to_stream else os.path.getsize(path)
    except BrokenPipeError:
        raise  # the reader went away (``co3 capture -o - | head``): not a write error
    except BaseException as exc:
        if rec is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    rec.close()
                except Exception:  # noqa: BLE001 - already failing; the file goes below
                    pass
            if to_stream or not isinstance(exc, KeyboardInterrupt):
                Path(path).unlink(missing_ok=True)
        cause = exc.__cause__ if isinstance(exc, InputError) else exc
        if isinstance(cause, OSError) and (cause is exc or cause.errno == errno.ENOSPC):
            raise InputError(f"cannot write dump {label}: {os_reason(cause)}") from exc
        raise
    finally:
        if to_stream:
            Path(path).unlink(missing_ok=True)
    return _summary(task, out, n_steps, n_epochs, loss_value, rec, model, nbytes, t0,
                    extra["test_accuracy"], epoch_average, nonfinite)


def _summary(desc, out, n_steps, n_epochs, loss_value, rec, model, file_bytes, t0,
             accuracy, epoch_average, nonfinite) -> CaptureSummary:
    params = dict(model.named_parameters(remove_duplicate=False))
    per_step = sum(params[n].numel() for n in rec.layers)
    rows = rec.steps_recorded
    return CaptureSummary(
        task=desc,
        out=describe_target(out) if not isinstance(out, str) else out,
        steps_trained=n_steps,
        steps_recorded=rows,
        layers=tuple(rec.layers),
        entries_per_step=per_step,
        total_entries=per_step * rows,
        final_loss=loss_value,
        test_accuracy=accuracy,
        seconds=time.perf_counter() - t0,
        epochs_trained=n_epochs,
        reduction="epoch-mean" if epoch_average else "per-step",
        nonfinite_steps=nonfinite,
        file_bytes=file_bytes,
    )


def capture(
    task: str,
    out: str | Any | BinaryIO,
    steps: int | None = None,
    batch_size: int = 64,
    lr: float | None = None,
    momentum: float = 0.0,
    optimizer: str = "sgd",
    seed: int = 0,
    every: int = 1,
    layers: str = "*",
    progress: bool = True,
    *,
    epochs: int | None = None,
    epoch_average: bool = False,
    on_nonfinite: str = "error",
    test_fraction: float = 0.2,
    threads: int | None = 1,
    compression: str | None = None,
    on_step: Callable[[int, Any, float], None] | None = None,
) -> CaptureSummary:
    """Train ``task`` for ``steps`` steps (default 100) or ``epochs`` epochs and write the dump.

    ``out`` is a path, ``-`` (stdout) or a binary file object. ``lr`` defaults to 0.1 for SGD
    and 1e-3 for Adam; ``momentum`` applies to SGD only. ``layers`` is a glob (or
    comma-separated globs) over parameter names such as ``fc1.weight``. An epoch is one pass
    over the train split in shuffled minibatches (the last partial batch is dropped).
    ``epoch_average`` and ``on_nonfinite``: see the module docstring. ``threads`` sets torch's
    intra-op threads during the run (restored afterwards; ``None`` leaves them alone).
    ``compression="gzip"`` rewrites the finished dump with gzip-compressed layers (the dump is
    recorded uncompressed first: the recorder's in-place writes rule out compression).
    ``on_step(step, model, loss)`` is called at every step after the backward pass and before the
    optimizer update (``p.grad`` holds that step's gradient). Progress goes to stderr with tqdm
    when ``progress`` is true and stderr is a terminal.
    """
    import torch
    import torch.nn.functional as F

    spec = get_task(task)
    optimizer, lr, momentum = check_optimizer(optimizer, lr, momentum)
    steps, epochs = check_run_options(steps, epochs, every, seed, on_nonfinite)
    batch_size = check_int("batch_size", batch_size, 1)

    config = dict(task=task, steps=steps, epochs=epochs, batch_size=batch_size, lr=lr,
                  momentum=momentum, optimizer=optimizer, seed=seed, every=every, layers=layers,
                  test_fraction=test_fraction, epoch_average=bool(epoch_average),
                  on_nonfinite=on_nonfinite)
    t0 = time.perf_counter()
    with TorchThreads(threads):
        train, test = load_task_data(task, test_fraction, seed)
        model = build_model(task, seed)
        opt = make_optimizer(model.parameters(), optimizer, lr, momentum)
        gen = torch.Generator().manual_seed(seed)
        n = len(train)
        bs = min(batch_size, n)
        per_epoch = n // bs

        def batches(epoch):  # the last partial batch of each epoch is dropped
            return epoch_batches(train, bs, gen)

        def evaluate(model):
            return {"test_accuracy": tasks_evaluate(model, test.x, test.y, batch=128)[1]}

        attrs = dict(
            task=task, dataset=spec.dataset, synthetic=spec.synthetic, model=spec.model,
            model_repr=repr(model), optimizer=optimizer, lr=lr, momentum=momentum, seed=seed,
            batch_size=bs, every=every, on_nonfinite=on_nonfinite, steps_per_epoch=per_epoch,
            n_train=n, n_test=len(test),
            co3cli_version=__version__, torch_version=str(torch.__version__),
            config=json.dumps(config, sort_keys=True),
        )
        total = steps if steps is not None else epochs * per_epoch
        return run_job(
            out, attrs, model, opt, F.cross_entropy, batches, task=task, t0=t0, after=evaluate,
            layers=layers, steps=steps, epochs=epochs, every=every, epoch_average=epoch_average,
            on_nonfinite=on_nonfinite, compression=compression, progress=progress,
            on_step=on_step, total=total, desc=task)


def summary_dict(summary: CaptureSummary) -> dict[str, Any]:
    """``summary`` as a plain dict (for JSON output; NaN becomes null)."""
    d = asdict(summary)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}
