"""Capture real gradients from training into a ``co3.gradients/1`` dump, step by step.

::

    built-in task (bundled data or synthetic)  --+
                                                 +--> train loop (one thread) --> p.grad of the
    your code: --entry module:make_job ----------+    selected layers every `every` steps (or the
                                                      mean over each epoch) --GradientRecorder
                                                      (co3cli.recorder) --> dump.h5

The gradients are recorded through ``co3cli.recorder.GradientRecorder`` (the same recorder as
for your own loops; see co3cli.dump for the schema): a dump at a path is written in place and
flushed after each row, so a killed run leaves a valid dump of the rows committed so far; ``-``
(stdout) or a file object is recorded to a temporary file in the temp directory and copied out
at the end. A parameter without a gradient is never recorded as zeros: a frozen one
(``requires_grad=False``) is left out and listed in the root attribute ``absent``; a trainable
one whose ``.grad`` is None at a recorded step is an error naming it (select the layers with
``layers``, or freeze it). Tied parameters are recorded once (root attribute ``aliases``).

Built-in tasks (id -> dataset, model), all ReLU networks so that, as in real training, part of
every gradient is exactly zero; all run offline:

    digits-mlp              8x8 digits,   MLP 64-64-10
    digits-cnn              8x8 digits,   CNN conv3x3(8)-pool-conv3x3(16)-pool-fc(10)
    mnist5k-mlp             MNIST 5k,     MLP 784-128-64-10
    mnist5k-cnn             MNIST 5k,     CNN conv5x5(8)-pool-conv5x5(16)-pool-fc(64)-fc(10)
    synthetic-cifar-resnet  SYNTHETIC 3x32x32 images (smooth random images, labels from a fixed
                            random linear teacher, so the loss decreases), ResNet with
                            BasicBlocks of widths 64-128-256 and batch norm (2.8M parameters)

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

Your own training code: ``capture_entry("mypkg.train:make_job", "dump.h5", epochs=2)`` (or
``path/to/file.py:make_job``) imports ``make_job`` and calls it -- with ``seed=`` when it takes
a ``seed`` parameter, always with torch's global RNG seeded from ``seed`` inside
``fork_rng`` -- and runs the loop on what it returns (the *job*): a dict, dataclass or
namedtuple with the fields

    model      torch.nn.Module                        required
    data       re-iterable of (x, y) batches, e.g.    required; one pass = one epoch
               a DataLoader or a list
    loss_fn    callable(model(x), y) -> scalar tensor required
    optimizer  torch.optim.Optimizer over the model   optional; else built from optimizer/lr/
                                                      momentum (SGD, lr 0.1 by default)
    lr         float                                  optional; the lr for the built optimizer

Each step is ``optimizer.zero_grad(); loss_fn(model(x), y).backward(); record; optimizer.step()``.
``examples/my_job.py`` is a complete job on the bundled digits data.

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
import importlib
import importlib.util
import inspect
import json
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from co3cli import __version__
from co3cli.errors import InputError


@dataclass(frozen=True)
class Task:
    """A built-in capture task: a dataset and a model builder (``build()`` -> ``nn.Module``).

    ``synthetic`` marks tasks whose data are generated (see ``synthetic_dataset``), not bundled.
    """

    id: str
    dataset: str
    model: str
    build: Callable[[], Any]
    synthetic: bool = False


TASKS: dict[str, Task] = {}

OPTIMIZERS = ("sgd", "adam")
DEFAULT_LR = {"sgd": 0.1, "adam": 1e-3}


def register_task(task: Task) -> Task:
    """Add ``task`` to ``TASKS`` under its id (ids are unique)."""
    if task.id in TASKS:
        raise InputError(f"capture task {task.id!r} is already registered")
    TASKS[task.id] = task
    return task


def _mlp(*sizes: int) -> Any:
    from torch import nn

    mods: list[tuple[str, Any]] = [("flatten", nn.Flatten())]
    for i in range(len(sizes) - 1):
        mods.append((f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1])))
        if i < len(sizes) - 2:
            mods.append((f"relu{i + 1}", nn.ReLU()))
    return nn.Sequential(OrderedDict(mods))


def _digits_cnn() -> Any:
    from torch import nn

    return nn.Sequential(
        OrderedDict(
            [
                ("conv1", nn.Conv2d(1, 8, 3, padding=1)),
                ("relu1", nn.ReLU()),
                ("pool1", nn.MaxPool2d(2)),
                ("conv2", nn.Conv2d(8, 16, 3, padding=1)),
                ("relu2", nn.ReLU()),
                ("pool2", nn.MaxPool2d(2)),
                ("flatten", nn.Flatten()),
                ("fc1", nn.Linear(16 * 2 * 2, 10)),
            ]
        )
    )


def _mnist_cnn() -> Any:
    from torch import nn

    return nn.Sequential(
        OrderedDict(
            [
                ("conv1", nn.Conv2d(1, 8, 5)),
                ("relu1", nn.ReLU()),
                ("pool1", nn.MaxPool2d(2)),
                ("conv2", nn.Conv2d(8, 16, 5)),
                ("relu2", nn.ReLU()),
                ("pool2", nn.MaxPool2d(2)),
                ("flatten", nn.Flatten()),
                ("fc1", nn.Linear(16 * 4 * 4, 64)),
                ("relu3", nn.ReLU()),
                ("fc2", nn.Linear(64, 10)),
            ]
        )
    )


def _resnet_cifar(widths: tuple[int, ...] = (64, 128, 256), blocks: int = 2,
                  num_classes: int = 10) -> Any:
    """A CIFAR-style ResNet: conv3x3 stem, BasicBlock stages (stride 2 between), avgpool, fc."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    mods: list[tuple[str, Any]] = [
        ("conv1", nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)),
        ("bn1", nn.BatchNorm2d(widths[0])),
        ("relu1", nn.ReLU()),
    ]
    cin = widths[0]
    for i, w in enumerate(widths):
        stage = [BasicBlock(cin if b == 0 else w, w, 2 if (b == 0 and i > 0) else 1)
                 for b in range(blocks)]
        mods.append((f"layer{i + 1}", nn.Sequential(*stage)))
        cin = w
    mods += [("pool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()),
             ("fc", nn.Linear(cin, num_classes))]
    return nn.Sequential(OrderedDict(mods))


SYNTHETIC_DATASETS: dict[str, dict[str, Any]] = {
    "synthetic-cifar": {"n": 1280, "image_shape": (3, 32, 32), "latent": (3, 8, 8),
                        "num_classes": 10, "margin": 6.0, "noise": 0.25, "data_seed": 0},
}
"""Generated datasets: fixed (their own ``data_seed``), so every run sees the same images."""


def synthetic_dataset(name: str) -> Any:
    """Generate the synthetic dataset ``name`` as a ``co3cli.data.Dataset`` (deterministic).

    ``synthetic-cifar``: 1280 images 3x32x32. A fixed random linear teacher ``W`` (10 x 192,
    unit rows) labels a random latent ``z`` ~ N(0, I) of shape 3x8x8 by ``y = argmax W z``; the
    image is ``z + margin * W[y]`` (margin 6: the class signal) upsampled bilinearly to 32x32,
    plus white noise (std 0.25). A network can learn it, so the loss goes down (the ResNet task:
    about 3.1 -> 1.9 in 40 SGD steps of 32 images).
    """
    import torch
    import torch.nn.functional as F

    from co3cli.data import Dataset

    if name not in SYNTHETIC_DATASETS:
        raise InputError(
            f"unknown synthetic dataset {name!r}; allowed: {', '.join(SYNTHETIC_DATASETS)}"
        )
    spec = SYNTHETIC_DATASETS[name]
    g = torch.Generator().manual_seed(spec["data_seed"])
    n, k = spec["n"], spec["num_classes"]
    teacher = torch.randn(k, math.prod(spec["latent"]), generator=g)
    teacher /= teacher.norm(dim=1, keepdim=True)
    z = torch.randn(n, math.prod(spec["latent"]), generator=g)
    y = (z @ teacher.T).argmax(dim=1)
    z += spec["margin"] * teacher[y]
    x = F.interpolate(z.view(n, *spec["latent"]), size=spec["image_shape"][1:], mode="bilinear",
                      align_corners=False)
    x += spec["noise"] * torch.randn(x.shape, generator=g)
    return Dataset(name, x.contiguous(), y, k)


register_task(Task("digits-mlp", "digits", "mlp-64-64-10-relu", lambda: _mlp(64, 64, 10)))
register_task(Task("digits-cnn", "digits", "cnn-c8-c16-fc10-relu", _digits_cnn))
register_task(
    Task("mnist5k-mlp", "mnist5k", "mlp-784-128-64-10-relu", lambda: _mlp(784, 128, 64, 10))
)
register_task(Task("mnist5k-cnn", "mnist5k", "cnn-c8-c16-fc64-fc10-relu", _mnist_cnn))
register_task(
    Task("synthetic-cifar-resnet", "synthetic-cifar", "resnet-64-128-256-x2-bn-relu",
         _resnet_cifar, synthetic=True)
)


def get_task(task: str) -> Task:
    """The registered task ``task``; unknown ids raise InputError listing the allowed ones."""
    if task not in TASKS:
        raise InputError(f"unknown capture task {task!r}; allowed: {', '.join(TASKS)}")
    return TASKS[task]


def build_model(task: str, seed: int = 0) -> Any:
    """The task's model with weights initialised from ``seed`` (global RNG left untouched)."""
    import torch

    spec = get_task(task)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return spec.build()


def load_task_data(task: str, test_fraction: float = 0.2, seed: int = 0) -> tuple[Any, Any]:
    """The (train, test) split of ``task``'s dataset (bundled or synthetic), seeded by ``seed``."""
    from co3cli.data import load_dataset, train_test_split

    spec = get_task(task)
    ds = synthetic_dataset(spec.dataset) if spec.synthetic else load_dataset(spec.dataset)
    return train_test_split(ds, test_fraction, seed)


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
                f"{_human_bytes(self.file_bytes)}, final loss {self.final_loss:.4f}{acc}{bad}, "
                f"{self.seconds:.1f} s")


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name}={value!r} must be an integer >= {minimum}")
    return value


def _check_lr(lr: Any) -> float:
    if isinstance(lr, bool) or not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise InputError(f"lr={lr!r} must be a finite number > 0")
    return float(lr)


ON_NONFINITE = ("error", "skip", "record")


def _check_run_options(steps, epochs, every, seed, on_nonfinite) -> tuple[int | None, int | None]:
    if steps is not None and epochs is not None:
        raise InputError(f"give steps or epochs, not both (steps={steps!r}, epochs={epochs!r})")
    if steps is None and epochs is None:
        steps = 100
    if steps is not None:
        steps = _check_int("steps", steps, 1)
    if epochs is not None:
        epochs = _check_int("epochs", epochs, 1)
    _check_int("every", every, 1)
    _check_int("seed", seed, 0)
    if on_nonfinite not in ON_NONFINITE:
        raise InputError(
            f"on_nonfinite={on_nonfinite!r} is not one of {', '.join(map(repr, ON_NONFINITE))}"
        )
    return steps, epochs


class _CountingWriter:
    """A binary stream that counts the bytes written through it (for ``-`` / file objects)."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.name = getattr(raw, "name", "<stdout>")
        self.nbytes = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):  # a pipe may take part of a large write; write the rest
            n = self.raw.write(view[done:])
            if n == 0:
                raise BrokenPipeError("the output stream accepts no more bytes")
            done += len(view) - done if n is None else n
        self.nbytes += done
        return done

    def flush(self) -> None:
        self.raw.flush()


_SPACE_MARGIN = 1 << 18  # bytes kept free for HDF5 metadata when checking the disk space


def _check_space(path: Any, row_bytes: int) -> None:
    """Refuse a row that may not fit: HDF5 handles a full disk badly (it can crash)."""
    import errno

    need = _SPACE_MARGIN + row_bytes
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except (OSError, AttributeError):
        return
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise OSError(errno.ENOSPC, f"no space left on device ({_human_bytes(free)} free, "
                                    f"a row needs up to {_human_bytes(need)})")


def _os_reason(exc: BaseException) -> str:
    import errno

    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        detail = exc.strerror if "free" in str(exc.strerror) else "no space left on device"
        return f"{detail} (the partial dump was removed)"
    reason = getattr(exc, "strerror", None) or str(exc)
    return f"{reason} (the partial dump was removed)"


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
            _check_space(rec.path, row_bytes)
            rec.end_epoch(epoch=epoch)
        epoch += 1
    with _nonfinite_hint(_lr_of(opt)):
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
    lr = _lr_of(opt)
    if not rec.average:
        _check_space(rec.path, row_bytes)
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


def _lr_of(opt) -> float:
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
    bar.set_postfix(loss=f"{loss_value:.4f}", written=_human_bytes(rec.bytes_written),
                    refresh=False)


def _unpack(batch: Any, step: int, describe: str) -> tuple[Any, Any]:
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    raise InputError(f"{describe}: batch {step} of the data is a {type(batch).__name__}, "
                     "not an (x, y) pair")


def _progress_bar(total, desc, progress):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr,
                disable=not (progress and sys.stderr.isatty()))


def _make_optimizer(params, optimizer: str, lr: float, momentum: float) -> Any:
    import torch

    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum)
    return torch.optim.Adam(params, lr=lr)


def _check_optimizer(optimizer, lr, momentum) -> tuple[str, float, float]:
    if optimizer not in OPTIMIZERS:
        raise InputError(f"unknown optimizer {optimizer!r}; allowed: {', '.join(OPTIMIZERS)}")
    lr = DEFAULT_LR[optimizer] if lr is None else _check_lr(lr)
    if isinstance(momentum, bool) or not (isinstance(momentum, (int, float)) and 0 <= momentum < 1):
        raise InputError(f"momentum={momentum!r} must be in [0, 1)")
    if momentum and optimizer != "sgd":
        raise InputError(
            f"momentum={momentum!r} applies to optimizer 'sgd' only, not {optimizer!r}"
        )
    return optimizer, float(lr), float(momentum)


def _run(out, attrs, model, opt, loss_fn, batches, *, layers, steps, epochs, every,
         epoch_average, on_nonfinite, compression, progress, on_step, total, desc, after=None):
    """Record through a ``GradientRecorder`` while training; returns
    (steps, epochs, loss, recorder, file_bytes, extra, non-finite steps).

    A path is written in place (crash-safe: a killed run leaves a valid dump of the committed
    steps); ``-`` or a file object is recorded to a temporary file, copied out at the end. On
    an error the partial dump is removed (on Ctrl-C a dump at a path keeps its committed steps).
    """
    from co3cli.recorder import GradientRecorder

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
    label = _label_of(out)
    rec = None
    extra: dict[str, Any] = {}
    try:
        rec = GradientRecorder(model, path, every=1 if epoch_average else every, layers=layers,
                               optimizer=opt, attrs=attrs, on_nonfinite=on_nonfinite,
                               average=epoch_average)
        numel = dict(model.named_parameters(remove_duplicate=False))
        row_bytes = sum(max(2 * 4 * numel[n].numel(), 1 << 15) for n in rec.layers)
        with _progress_bar(total, desc, progress) as bar:
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
        if after is not None:
            extra = after(model)
        rec.set_attrs(steps_trained=n_steps, epochs_trained=n_epochs, nonfinite_steps=nonfinite,
                      final_loss=loss_value, **extra)
        with _nonfinite_hint(_lr_of(opt)):
            rec.close()
        if compression == "gzip":
            _gzip_in_place(path)
        if to_stream:
            sink = _CountingWriter(sys.stdout.buffer if out == "-" else out)
            with open(path, "rb") as src:
                shutil.copyfileobj(src, sink, 1 << 20)
            sink.flush()
            nbytes = sink.nbytes
        else:
            nbytes = os.path.getsize(path)
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
            raise InputError(f"cannot write dump {label}: {_os_reason(cause)}") from exc
        raise
    finally:
        if to_stream:
            Path(path).unlink(missing_ok=True)
    return n_steps, n_epochs, loss_value, rec, nbytes, extra, nonfinite


def _gzip_in_place(path: str) -> None:
    """Rewrite the dump at ``path`` with its layers gzip-compressed (shuffle filter)."""
    import h5py

    tmp = os.path.join(os.path.dirname(os.path.abspath(path)),
                       f".{os.path.basename(path)}.{os.getpid()}.gz.tmp")
    try:
        with h5py.File(path, "r") as src, h5py.File(tmp, "w") as dst:
            dst.attrs.update(src.attrs)

            def copy(name, obj):
                if isinstance(obj, h5py.Group):
                    dst.require_group(name).attrs.update(obj.attrs)
                    return
                gz = dict(compression="gzip", shuffle=True) if name.startswith("grads/") else {}
                dst.create_dataset(name, data=obj[()], maxshape=obj.maxshape,
                                   chunks=obj.chunks, **gz).attrs.update(obj.attrs)

            src.visititems(copy)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _label_of(out: Any) -> str:
    if isinstance(out, str) and out == "-":
        return "<stdout>"
    if isinstance(out, (str, os.PathLike)):
        return os.fspath(out)
    return str(getattr(out, "name", out))


def _summary(desc, out, n_steps, n_epochs, loss_value, rec, model, file_bytes, t0,
             accuracy, epoch_average, nonfinite) -> CaptureSummary:
    params = dict(model.named_parameters(remove_duplicate=False))
    per_step = sum(params[n].numel() for n in rec.layers)
    rows = rec.steps_recorded
    return CaptureSummary(
        task=desc,
        out=_label_of(out) if not isinstance(out, str) else out,
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


class _Threads:
    """Set torch's intra-op threads for a block (``None``: leave them alone)."""

    def __init__(self, threads: int | None):
        self.threads = None if threads is None else _check_int("threads", threads, 1)

    def __enter__(self):
        import torch

        self.old = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)

    def __exit__(self, *exc):
        import torch

        if self.threads is not None:
            torch.set_num_threads(self.old)
        return False


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
    optimizer, lr, momentum = _check_optimizer(optimizer, lr, momentum)
    steps, epochs = _check_run_options(steps, epochs, every, seed, on_nonfinite)
    batch_size = _check_int("batch_size", batch_size, 1)

    config = dict(task=task, steps=steps, epochs=epochs, batch_size=batch_size, lr=lr,
                  momentum=momentum, optimizer=optimizer, seed=seed, every=every, layers=layers,
                  test_fraction=test_fraction, epoch_average=bool(epoch_average),
                  on_nonfinite=on_nonfinite)
    t0 = time.perf_counter()
    with _Threads(threads):
        train, test = load_task_data(task, test_fraction, seed)
        model = build_model(task, seed)
        opt = _make_optimizer(model.parameters(), optimizer, lr, momentum)
        gen = torch.Generator().manual_seed(seed)
        n = len(train)
        bs = min(batch_size, n)
        per_epoch = n // bs

        def batches(epoch):  # the last partial batch of each epoch is dropped
            perm = torch.randperm(n, generator=gen)
            for i in range(0, n - bs + 1, bs):
                idx = perm[i : i + bs]
                yield train.x[idx], train.y[idx]

        def evaluate(model):
            model.eval()
            correct = 0
            with torch.no_grad():
                for i in range(0, len(test), 128):
                    pred = model(test.x[i : i + 128]).argmax(dim=1)
                    correct += int((pred == test.y[i : i + 128]).sum())
            return {"test_accuracy": correct / len(test) if len(test) else float("nan")}

        attrs = dict(
            task=task, dataset=spec.dataset, synthetic=spec.synthetic, model=spec.model,
            model_repr=repr(model), optimizer=optimizer, lr=lr, momentum=momentum, seed=seed,
            batch_size=bs, every=every, on_nonfinite=on_nonfinite, steps_per_epoch=per_epoch,
            n_train=n, n_test=len(test),
            co3cli_version=__version__, torch_version=str(torch.__version__),
            config=json.dumps(config, sort_keys=True),
        )
        total = steps if steps is not None else epochs * per_epoch
        n_steps, n_epochs, loss_value, rec, nbytes, extra, nonfinite = _run(
            out, attrs, model, opt, F.cross_entropy, batches, layers=layers, steps=steps,
            epochs=epochs, every=every, epoch_average=epoch_average, on_nonfinite=on_nonfinite,
            compression=compression, progress=progress, on_step=on_step, total=total, desc=task,
            after=evaluate)
    return _summary(task, out, n_steps, n_epochs, loss_value, rec, model, nbytes, t0,
                    extra["test_accuracy"], epoch_average, nonfinite)


# -- your own code: --entry module:make_job ------------------------------------------------------

JOB_FIELDS = {"model": True, "data": True, "loss_fn": True, "optimizer": False, "lr": False}
"""The fields of a job returned by an entry function (name -> required)."""


def load_entry(entry: str) -> Callable[..., Any]:
    """Import ``module:function`` (current directory or PYTHONPATH) or ``file.py:function``."""
    if not isinstance(entry, str) or ":" not in entry:
        raise InputError(f"entry {entry!r} must be 'module:function' or 'path/to/file.py:function'")
    where, _, name = entry.rpartition(":")
    if not where or not name.isidentifier():
        raise InputError(f"entry {entry!r} must be 'module:function' or 'path/to/file.py:function'")
    if where.endswith(".py") or os.sep in where or "/" in where:
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise InputError(f"entry {entry!r}: file {where!r} does not exist")
        modname = "co3_entry_" + "".join(c if c.isalnum() else "_" for c in path)
        spec = importlib.util.spec_from_file_location(modname, path)
        if spec is None or spec.loader is None:
            raise InputError(f"entry {entry!r}: cannot import {where!r} as a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        with _on_path(os.path.dirname(path)):
            try:
                spec.loader.exec_module(module)
            except Exception as exc:  # the user's module failed: one line, naming it
                del sys.modules[modname]
                raise InputError(f"entry {entry!r}: importing {where!r} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
    else:
        with _on_path(os.getcwd()):
            try:
                module = importlib.import_module(where)
            except ModuleNotFoundError as exc:
                if exc.name and (where == exc.name or where.startswith(exc.name + ".")):
                    raise InputError(
                        f"entry {entry!r}: cannot import module {where!r} ({exc}); run co3 from "
                        "the folder that holds it, add that folder to PYTHONPATH, or give "
                        "path/to/file.py:function"
                    ) from exc
                raise InputError(f"entry {entry!r}: importing {where!r} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
            except Exception as exc:
                raise InputError(f"entry {entry!r}: importing {where!r} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
    if not hasattr(module, name):
        raise InputError(f"entry {entry!r}: {where!r} has no attribute {name!r}")
    fn = getattr(module, name)
    if not callable(fn):
        raise InputError(f"entry {entry!r}: {name!r} is a {type(fn).__name__}, not a function")
    return fn


class _on_path:
    """Put a folder first on ``sys.path`` for a block (restored afterwards)."""

    def __init__(self, folder: str):
        self.folder = folder

    def __enter__(self):
        self.saved = list(sys.path)
        sys.path.insert(0, self.folder)

    def __exit__(self, *exc):
        sys.path[:] = self.saved
        return False


def job_fields(job: Any, entry: str = "entry") -> dict[str, Any]:
    """Validate a job (dict, dataclass or namedtuple; see the module docstring) -> its fields."""
    import dataclasses

    import torch

    if isinstance(job, dict):
        fields = dict(job)
    elif dataclasses.is_dataclass(job) and not isinstance(job, type):
        fields = {f.name: getattr(job, f.name) for f in dataclasses.fields(job)}
    elif isinstance(job, tuple) and hasattr(job, "_asdict"):
        fields = dict(job._asdict())
    else:
        raise InputError(f"{entry} returned a {type(job).__name__}; it must return a dict, "
                         f"dataclass or namedtuple with the fields {', '.join(JOB_FIELDS)}")
    unknown = [k for k in fields if k not in JOB_FIELDS]
    if unknown:
        raise InputError(f"{entry}: unknown job field(s) {', '.join(map(repr, unknown))}; "
                         f"allowed: {', '.join(JOB_FIELDS)}")
    missing = [k for k, req in JOB_FIELDS.items() if req and fields.get(k) is None]
    if missing:
        raise InputError(f"{entry}: the job is missing {', '.join(map(repr, missing))} "
                         f"(required: {', '.join(k for k, r in JOB_FIELDS.items() if r)})")
    if not isinstance(fields["model"], torch.nn.Module):
        raise InputError(f"{entry}: job 'model' is a {type(fields['model']).__name__}, "
                         "not a torch.nn.Module")
    data = fields["data"]
    if isinstance(data, (torch.Tensor, str, bytes)) or not hasattr(data, "__iter__"):
        raise InputError(f"{entry}: job 'data' is a {type(data).__name__}, not an iterable of "
                         "(x, y) batches (e.g. a DataLoader or a list of pairs)")
    if not callable(fields["loss_fn"]):
        raise InputError(f"{entry}: job 'loss_fn' is a {type(fields['loss_fn']).__name__}, "
                         "not a callable")
    opt = fields.get("optimizer")
    if opt is not None and not isinstance(opt, torch.optim.Optimizer):
        raise InputError(f"{entry}: job 'optimizer' is a {type(opt).__name__}, "
                         "not a torch.optim.Optimizer")
    if opt is not None:
        mine = {id(p) for p in fields["model"].parameters()}
        if not any(id(p) in mine for g in opt.param_groups for p in g["params"]):
            raise InputError(f"{entry}: job 'optimizer' does not update any parameter of 'model'")
        if fields.get("lr") is not None:
            raise InputError(f"{entry}: give the job 'optimizer' or 'lr', not both")
    if fields.get("lr") is not None:
        try:
            fields["lr"] = _check_lr(fields["lr"])
        except InputError as exc:
            raise InputError(f"{entry}: job {exc}") from None
    return fields


def capture_entry(
    entry: str | Callable[..., Any],
    out: str | Any | BinaryIO,
    steps: int | None = None,
    *,
    epochs: int | None = None,
    optimizer: str | None = None,
    lr: float | None = None,
    momentum: float | None = None,
    seed: int = 0,
    every: int = 1,
    layers: str = "*",
    epoch_average: bool = False,
    on_nonfinite: str = "error",
    progress: bool = True,
    threads: int | None = 1,
    compression: str | None = None,
    on_step: Callable[[int, Any, float], None] | None = None,
) -> CaptureSummary:
    """Run the job made by ``entry`` (``module:function``, ``file.py:function`` or a callable).

    The job contract is in the module docstring. ``optimizer``/``lr``/``momentum`` build the
    optimizer when the job has none (``lr`` overrides the job's ``lr``); they are errors when
    the job brings its own. Steps, epochs, ``every``, ``layers``, ``epoch_average`` and
    ``on_nonfinite`` are as in ``capture``. Everything runs inside ``torch.random.fork_rng``
    seeded with ``seed`` (the caller's RNG is untouched), so the same seed gives the same dump.
    """
    import torch

    steps, epochs = _check_run_options(steps, epochs, every, seed, on_nonfinite)
    name = entry if isinstance(entry, str) else getattr(entry, "__qualname__", repr(entry))
    desc = f"entry {name!r}" if isinstance(entry, str) else f"entry {name}"
    fn = load_entry(entry) if isinstance(entry, str) else entry
    if not callable(fn):
        raise InputError(f"{desc} is a {type(fn).__name__}, not a function")
    t0 = time.perf_counter()
    with _Threads(threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            takes_seed = "seed" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_seed = False
        try:
            job = fn(seed=seed) if takes_seed else fn()
        except InputError:
            raise
        except Exception as exc:
            raise InputError(f"{desc} raised {type(exc).__name__}: {exc}") from exc
        fields = job_fields(job, desc)
        model = fields["model"]
        opt = fields.get("optimizer")
        if opt is not None:
            given = [k for k, v in (("optimizer", optimizer), ("lr", lr), ("momentum", momentum))
                     if v is not None]
            if given:
                raise InputError(f"{desc}: the job brings its own optimizer, so "
                                 f"{', '.join(given)} cannot be given")
            opt_id = type(opt).__name__.lower()
            lr_used = _lr_of(opt)
            mom_used = float(opt.param_groups[0].get("momentum", 0.0) or 0.0)
        else:
            opt_id, lr_used, mom_used = _check_optimizer(
                optimizer or "sgd", lr if lr is not None else fields.get("lr"), momentum or 0.0)
            opt = _make_optimizer(model.parameters(), opt_id, lr_used, mom_used)
        data = fields["data"]
        try:
            per_epoch = len(data)
        except TypeError:
            per_epoch = None
        config = dict(entry=name, steps=steps, epochs=epochs, optimizer=opt_id, lr=lr_used,
                      momentum=mom_used, seed=seed, every=every, layers=layers,
                      epoch_average=bool(epoch_average), on_nonfinite=on_nonfinite)
        attrs = dict(
            task=f"entry:{name}", entry=name, dataset=f"entry:{name}", synthetic=False,
            model=type(model).__name__, model_repr=repr(model), optimizer=opt_id, lr=lr_used,
            momentum=mom_used, seed=seed, every=every, on_nonfinite=on_nonfinite,
            co3cli_version=__version__, torch_version=str(torch.__version__),
            config=json.dumps(config, sort_keys=True),
        )
        if per_epoch is not None:
            attrs["steps_per_epoch"] = per_epoch
        total = steps if steps is not None else (epochs * per_epoch if per_epoch else None)
        n_steps, n_epochs, loss_value, rec, nbytes, _, nonfinite = _run(
            out, attrs, model, opt, fields["loss_fn"], lambda epoch: iter(data),
            layers=layers, steps=steps, epochs=epochs, every=every, epoch_average=epoch_average,
            on_nonfinite=on_nonfinite, compression=compression, progress=progress,
            on_step=on_step, total=total, desc=desc,
            after=lambda m: {"test_accuracy": float("nan")})
    return _summary(f"entry:{name}", out, n_steps, n_epochs, loss_value, rec, model, nbytes,
                    t0, float("nan"), epoch_average, nonfinite)


def summary_dict(summary: CaptureSummary) -> dict[str, Any]:
    """``summary`` as a plain dict (for JSON output; NaN becomes null)."""
    d = asdict(summary)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}
