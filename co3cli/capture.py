"""Capture real gradients from small built-in training tasks into a ``co3.gradients/1`` dump.

::

    sample_data/*.npz --load_dataset--> train split --SGD/Adam, one thread--> p.grad every
    `every` steps --DumpWriter.append_step--> dump.h5 (see co3cli.dump for the schema)

Built-in tasks (id -> dataset, model), all small ReLU networks so that, as in real training,
part of every gradient is exactly zero:

    digits-mlp    8x8 digits,   MLP 64-64-10
    digits-cnn    8x8 digits,   CNN conv3x3(8)-pool-conv3x3(16)-pool-fc(10)
    mnist5k-mlp   MNIST 5k,     MLP 784-128-64-10
    mnist5k-cnn   MNIST 5k,     CNN conv5x5(8)-pool-conv5x5(16)-pool-fc(64)-fc(10)

``capture`` is deterministic: the seed fixes the weight initialisation (drawn inside
``torch.random.fork_rng``, so the caller's global RNG is untouched), the train/test split and
the minibatch order (a private ``torch.Generator``). Training uses one CPU thread by default.
Steps are numbered from 0; step ``s`` is recorded when ``s % every == 0``, with the gradient of
that step's minibatch loss taken before the optimizer update::

    summary = capture("digits-mlp", "dump.h5", steps=60, every=5)

Besides the schema's provenance attributes (``task``, ``model`` = the model id, ``optimizer``,
``lr``, ``seed``, versions, ``created``, ``config`` = the capture arguments as JSON) the dump
records ``dataset``, ``model_repr``, ``momentum``, ``batch_size``, ``every``,
``steps_trained``, ``n_train``, ``n_test``, ``final_loss`` and ``test_accuracy``.
"""

from __future__ import annotations

import fnmatch
import json
import math
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, BinaryIO

from co3cli import __version__
from co3cli.errors import InputError


@dataclass(frozen=True)
class Task:
    """A built-in capture task: a dataset and a model builder (``build()`` -> ``nn.Module``)."""

    id: str
    dataset: str
    model: str
    build: Callable[[], Any]


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


register_task(Task("digits-mlp", "digits", "mlp-64-64-10-relu", lambda: _mlp(64, 64, 10)))
register_task(Task("digits-cnn", "digits", "cnn-c8-c16-fc10-relu", _digits_cnn))
register_task(
    Task("mnist5k-mlp", "mnist5k", "mlp-784-128-64-10-relu", lambda: _mlp(784, 128, 64, 10))
)
register_task(Task("mnist5k-cnn", "mnist5k", "cnn-c8-c16-fc64-fc10-relu", _mnist_cnn))


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


def select_parameters(model: Any, layers: str) -> list[tuple[str, Any]]:
    """Named parameters whose name matches any of the comma-separated globs in ``layers``."""
    patterns = [p.strip() for p in str(layers).split(",") if p.strip()]
    if not patterns:
        raise InputError(f"layers={layers!r} holds no glob pattern")
    named = list(model.named_parameters())
    chosen = [(n, p) for n, p in named if any(fnmatch.fnmatchcase(n, pat) for pat in patterns)]
    if not chosen:
        raise InputError(
            f"layers={layers!r} matches no parameter; parameters: {', '.join(n for n, _ in named)}"
        )
    return chosen


@dataclass(frozen=True)
class CaptureSummary:
    """What ``capture`` did: the recorded layers, entries, and how training went."""

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

    def __str__(self) -> str:
        return (f"{self.steps_trained} steps trained, {self.steps_recorded} recorded, "
                f"{len(self.layers)} layers, {self.total_entries} entries, final loss "
                f"{self.final_loss:.4f}, test accuracy {self.test_accuracy:.3f}, {self.seconds:.1f} s")


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name}={value!r} must be an integer >= {minimum}")
    return value


def capture(
    task: str,
    out: str | Any | BinaryIO,
    steps: int = 100,
    batch_size: int = 64,
    lr: float | None = None,
    momentum: float = 0.0,
    optimizer: str = "sgd",
    seed: int = 0,
    every: int = 1,
    layers: str = "*",
    progress: bool = True,
    *,
    test_fraction: float = 0.2,
    threads: int | None = 1,
    compression: str | None = None,
    on_step: Callable[[int, Any, float], None] | None = None,
) -> CaptureSummary:
    """Train ``task`` for ``steps`` steps and write the selected gradients to the dump ``out``.

    ``out`` is a path, ``-`` (stdout) or a binary file object. ``lr`` defaults to 0.1 for SGD
    and 1e-3 for Adam; ``momentum`` applies to SGD only. ``layers`` is a glob (or
    comma-separated globs) over parameter names such as ``fc1.weight``. ``threads`` sets torch's
    intra-op threads during the run (restored afterwards; ``None`` leaves them alone).
    ``on_step(step, model, loss)`` is called at every step after the backward pass and before the
    optimizer update (``p.grad`` holds that step's gradient). Progress goes to stderr with tqdm
    when ``progress`` is true and stderr is a terminal.
    """
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    from co3cli.data import load_dataset, train_test_split
    from co3cli.dump import DumpWriter

    spec = get_task(task)
    if optimizer not in OPTIMIZERS:
        raise InputError(f"unknown optimizer {optimizer!r}; allowed: {', '.join(OPTIMIZERS)}")
    steps = _check_int("steps", steps, 1)
    batch_size = _check_int("batch_size", batch_size, 1)
    every = _check_int("every", every, 1)
    seed = _check_int("seed", seed, 0)
    if threads is not None:
        threads = _check_int("threads", threads, 1)
    lr = DEFAULT_LR[optimizer] if lr is None else lr
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise InputError(f"lr={lr!r} must be a finite number > 0")
    if not (isinstance(momentum, (int, float)) and 0 <= momentum < 1):
        raise InputError(f"momentum={momentum!r} must be in [0, 1)")
    if momentum and optimizer != "sgd":
        raise InputError(
            f"momentum={momentum!r} applies to optimizer 'sgd' only, not {optimizer!r}"
        )

    config = dict(
        task=task,
        steps=steps,
        batch_size=batch_size,
        lr=float(lr),
        momentum=float(momentum),
        optimizer=optimizer,
        seed=seed,
        every=every,
        layers=layers,
        test_fraction=test_fraction,
    )
    t0 = time.perf_counter()
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        train, test = train_test_split(load_dataset(spec.dataset), test_fraction, seed)
        model = build_model(task, seed)
        selected = select_parameters(model, layers)
        if optimizer == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        else:
            opt = torch.optim.Adam(model.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed)
        n = len(train)
        bs = min(batch_size, n)

        def batches():
            while True:  # epochs; the last partial batch of each epoch is dropped
                perm = torch.randperm(n, generator=gen)
                for i in range(0, n - bs + 1, bs):
                    yield perm[i : i + bs]

        attrs = dict(
            task=task,
            dataset=spec.dataset,
            model=spec.model,
            model_repr=repr(model),
            optimizer=optimizer,
            lr=float(lr),
            momentum=float(momentum),
            seed=seed,
            batch_size=bs,
            every=every,
            steps_trained=steps,
            n_train=n,
            n_test=len(test),
            co3cli_version=__version__,
            torch_version=str(torch.__version__),
            config=json.dumps(config, sort_keys=True),
        )
        recorded = 0
        loss_value = float("nan")
        bar = tqdm(
            total=steps,
            desc=task,
            unit="step",
            file=sys.stderr,
            disable=not (progress and sys.stderr.isatty()),
        )
        with bar, DumpWriter(out, attrs, compression=compression) as writer:
            model.train()
            for step, idx in zip(range(steps), batches(), strict=False):
                opt.zero_grad(set_to_none=False)
                loss = F.cross_entropy(model(train.x[idx]), train.y[idx])
                loss.backward()
                loss_value = float(loss.item())
                if not math.isfinite(loss_value):
                    raise InputError(
                        f"capture {task}: loss became {loss_value} at step {step}; lower lr={lr}"
                    )
                if step % every == 0:
                    grads = {
                        name: (p.grad if p.grad is not None else torch.zeros_like(p))
                        .detach()
                        .to(torch.float32)
                        .numpy()
                        for name, p in selected
                    }
                    writer.append_step(step, grads, loss_value)
                    recorded += 1
                if on_step is not None:
                    on_step(step, model, loss_value)
                opt.step()
                bar.update(1)
            model.eval()
            with torch.no_grad():
                pred = model(test.x).argmax(dim=1) if len(test) else None
            accuracy = float((pred == test.y).float().mean()) if pred is not None else float("nan")
            writer.h5.attrs["final_loss"] = loss_value
            writer.h5.attrs["test_accuracy"] = accuracy
    finally:
        if threads is not None:
            torch.set_num_threads(old_threads)
    per_step = sum(p.numel() for _, p in selected)
    return CaptureSummary(
        task=task,
        out=out if isinstance(out, str) else str(getattr(out, "name", out)),
        steps_trained=steps,
        steps_recorded=recorded,
        layers=tuple(name for name, _ in selected),
        entries_per_step=per_step,
        total_entries=per_step * recorded,
        final_loss=loss_value,
        test_accuracy=accuracy,
        seconds=time.perf_counter() - t0,
    )


def summary_dict(summary: CaptureSummary) -> dict[str, Any]:
    """``summary`` as a plain dict (for JSON output)."""
    return asdict(summary)
