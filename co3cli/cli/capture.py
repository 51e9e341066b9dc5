"""``co3 capture``: train a built-in task or your own job and record its gradients."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

import typer

from co3cli.cli.common import JsonOpt, QuietOpt, emit, emit_json, kind_choices, torch_one_thread
from co3cli.errors import InputError

O = typer.Option
CAP = SimpleNamespace(  # the options of `co3 capture`, in the order --help lists them
    task=O(None, "--task", "-t", help=f"Built-in task: {kind_choices('task', 'digits-mlp')} "
           "(synthetic-*: generated data)."),
    entry=O(None, "--entry", "-e", help="Your code instead of a task: module:function or "
            "path/to/file.py:function returning a job dict {model, data, loss_fn[, optimizer]"
            "[, lr]}."),
    output=O(..., "--output", "-o", help="Dump file (.h5), or - for stdout."),
    steps=O(None, "--steps", help="Training steps (default 100)."),
    epochs=O(None, "--epochs", help="Train whole epochs instead of --steps."),
    every=O(1, "--every", help="Record every N-th step (or epoch)."),
    epoch_average=O(False, "--epoch-average", help="Record the mean of each epoch's minibatch "
                    "gradients, one row per epoch."),
    batch_size=O(None, "--batch-size", help="Tasks only (default 64)."),
    lr=O(None, "--lr", help="Learning rate (default: 0.1 sgd, 1e-3 adam)."),
    momentum=O(None, "--momentum", help="SGD momentum (default 0)."),
    optimizer=O(None, "--optimizer", help=f"{kind_choices('optimizer', 'sgd')}."),
    layers=O("*", "--layers", help="Glob over parameter names."),
    seed=O(0, "--seed"),
    on_nonfinite=O("error", "--on-nonfinite", help="NaN/Inf gradient: error (default; names "
                   "step and layer), skip (leave the step out) or record."),
)


def capture_cli(
    task: Optional[str] = CAP.task, entry: Optional[str] = CAP.entry, output: str = CAP.output,
    steps: Optional[int] = CAP.steps, epochs: Optional[int] = CAP.epochs, every: int = CAP.every,
    epoch_average: bool = CAP.epoch_average, batch_size: Optional[int] = CAP.batch_size,
    lr: Optional[float] = CAP.lr, momentum: Optional[float] = CAP.momentum,
    optimizer: Optional[str] = CAP.optimizer, layers: str = CAP.layers, seed: int = CAP.seed,
    on_nonfinite: str = CAP.on_nonfinite, json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Train a model and record its gradients into a dump, step by step (memory: one step).

    Example: co3 capture --task mnist5k-mlp --steps 200 --every 20 -o dump.h5

    Example: co3 capture --entry examples/my_job.py:make_job --epochs 2 --epoch-average -o d.h5

    Example: co3 capture --task digits-mlp --steps 100 -o - | co3 report - --format fp8-e5m2
    """
    from co3cli.capture import capture, summary_dict
    from co3cli.jobs import capture_entry

    torch_one_thread()
    common = dict(steps=steps, epochs=epochs, seed=seed, every=every, layers=layers,
                  epoch_average=epoch_average, on_nonfinite=on_nonfinite, progress=not quiet)
    if entry is not None:
        if task is not None:
            raise InputError("give --task or --entry, not both")
        if batch_size is not None:
            raise InputError("--batch-size applies to --task only; the --entry job's data "
                             "makes the batches")
        s = capture_entry(entry, output, optimizer=optimizer, lr=lr, momentum=momentum, **common)
    else:
        s = capture(task or "digits-mlp", output, batch_size=64 if batch_size is None else batch_size,
                    lr=lr, momentum=momentum or 0.0, optimizer=optimizer or "sgd", **common)
    if json_out:
        emit_json(summary_dict(s), output == "-")
    elif not quiet or output != "-":
        emit(f"captured {entry or task or 'digits-mlp'} -> {output}: {s}", output == "-")
