"""Your own training code as a capture job: ``co3 capture --entry module:make_job``.

::

    "mypkg.train:make_job" or "path/to/file.py:make_job" --load_entry--> make_job(seed=...)
        --> the job (dict / dataclass / namedtuple) --job_fields: checked--> model, data,
        loss_fn, optimizer --co3cli.capture.run_job--> the same train-and-record loop as the
        built-in tasks --> dump.h5

``capture_entry("mypkg.train:make_job", "dump.h5", epochs=2)`` (or ``path/to/file.py:make_job``)
imports ``make_job`` and calls it -- with ``seed=`` when it takes a ``seed`` parameter, always
with torch's global RNG seeded from ``seed`` inside ``fork_rng`` -- and runs the loop on what
it returns (the *job*): a dict, dataclass or namedtuple with the fields

    model      torch.nn.Module                        required
    data       re-iterable of (x, y) batches, e.g.    required; one pass = one epoch
               a DataLoader or a list
    loss_fn    callable(model(x), y) -> scalar tensor required
    optimizer  torch.optim.Optimizer over the model   optional; else built from optimizer/lr/
                                                      momentum (SGD, lr 0.1 by default)
    lr         float                                  optional; the lr for the built optimizer

Each step is ``optimizer.zero_grad(); loss_fn(model(x), y).backward(); record; optimizer.step()``.
``examples/my_job.py`` is a complete job on the bundled digits data. The dump's attributes are
those of ``co3cli.capture`` (``task`` = ``entry:<name>``; ``test_accuracy`` is NaN: a job has
no test split).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from co3cli import __version__
from co3cli.capture import CaptureSummary, check_run_options, lr_of, run_job
from co3cli.errors import InputError
from co3cli.tasks import TorchThreads, check_lr, check_optimizer, make_optimizer

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
            fields["lr"] = check_lr(fields["lr"])
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

    steps, epochs = check_run_options(steps, epochs, every, seed, on_nonfinite)
    name = entry if isinstance(entry, str) else getattr(entry, "__qualname__", repr(entry))
    desc = f"entry {name!r}" if isinstance(entry, str) else f"entry {name}"
    fn = load_entry(entry) if isinstance(entry, str) else entry
    if not callable(fn):
        raise InputError(f"{desc} is a {type(fn).__name__}, not a function")
    t0 = time.perf_counter()
    with TorchThreads(threads), torch.random.fork_rng(devices=[]):
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
            lr_used = lr_of(opt)
            mom_used = float(opt.param_groups[0].get("momentum", 0.0) or 0.0)
        else:
            opt_id, lr_used, mom_used = check_optimizer(
                optimizer or "sgd", lr if lr is not None else fields.get("lr"), momentum or 0.0)
            opt = make_optimizer(model.parameters(), opt_id, lr_used, mom_used)
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
        return run_job(
            out, attrs, model, opt, fields["loss_fn"], lambda epoch: iter(data),
            task=f"entry:{name}", t0=t0, after=lambda m: {"test_accuracy": float("nan")},
            layers=layers, steps=steps, epochs=epochs, every=every, epoch_average=epoch_average,
            on_nonfinite=on_nonfinite, compression=compression, progress=progress,
            on_step=on_step, total=total, desc=desc)
