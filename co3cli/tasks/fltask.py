"""What a federated run trains: ``FLTask`` (model factory, data, loss, metric) and the buffer rule.

::

    built-in id "mnist5k-mlp" --builtin_task-->  +
    "job.py:make_task" / callable --load_fl_task-->  FLTask(name, model, train, test, loss,
        (called with seed= if it takes one,          metric, metric_name, client_indices,
         under torch's RNG seeded from seed)         provenance)
                                                       | .build_model(seed) -> nn.Module
                                                       | .loss_fn(model(x), y) -> scalar
                                                       | .evaluate(model) -> (loss, metric)
                                                       | .partition_labels() -> labels | None
    task_shards(task, cfg, rng): the task's own per-client partition, or partition() over
        its labels (iid / dirichlet / shards; tasks with sequence targets: iid only)
    model buffers (BatchNorm running stats): co3cli.tasks.buffers.BufferState, the rule below

The FL engines (``co3cli.simulate.fl``, ``co3cli.simulate.dist``) use nothing else of a task, so
any other driver (a Flower client, a notebook) can use an ``FLTask`` the same way; this module
imports nothing of the simulator.

**The entry contract** (``co3 simulate fl --entry path/to/job.py:make_task``, or
``FLConfig(entry=...)``; loaded like ``co3 capture --entry``: ``module:function`` or
``file.py:function``, see ``co3cli.jobs.load_entry``; the import and the call both run with
torch's RNG seeded from the run's seed, so module-level randomness is reproducible too). The
function returns a dict, dataclass
or namedtuple with the fields

    model        a factory () -> torch.nn.Module (or a module, copied)   required
    train        the training set                                        train or clients
    clients      a list of per-client training sets (the partition)      train or clients
    test         the test set (default: test_fraction of train split off) required with clients
    loss         callable(model(x), y) -> scalar tensor                  default cross-entropy
    metric       callable(model(x), y) -> number, the batch's mean,      default accuracy
                 higher is better (the ``test_accuracy`` column)         (integer targets)
    metric_name  its name (config.json)                                  default "accuracy"

A dataset is a ``co3cli.data.Dataset``, a pair ``(x, y)`` of tensors or arrays, a
``torch.utils.data.TensorDataset`` of two tensors, or any map-style dataset of ``(x, y)``
items (stacked once). Minibatches are drawn by indexing ``x`` and ``y``. Classifiers put
the class dimension second (``(B, K)``, or ``(B, K, T)`` for sequences with targets ``(B, T)``,
as ``F.cross_entropy`` does). Before training, the model runs once on two training examples
(eval mode, no state change): a model or loss that fails, a loss that is not a finite scalar
tensor depending on the parameters, or a metric that is not a finite number is one InputError.

**Buffers** (``FLConfig.buffers``; state that is not trained by gradients, e.g. BatchNorm's
running mean and variance): every participating client uploads its buffers after its local
work (raw, in their dtype: ``pack_buffers``; the bytes are charged to the uplink), and the
server's model takes their mean (float buffers: float64 sum in client order / n, cast back;
integer ones, e.g. ``num_batches_tracked``: floor of the mean). That server model is the one
evaluated and saved. ``average``: every client starts each round from the server's buffers (sent
down with the weights). ``local``: each client starts from its own buffers as it left them
(initially the model's), so its statistics stay its own (as in FedBN); the server's mean is
used only for evaluation.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from co3cli.errors import InputError

ENTRY_FIELDS = ("model", "train", "clients", "test", "loss", "metric", "metric_name")


@dataclass
class FLTask:
    """A federated task; see the module docstring. ``client_indices``: the per-client rows of
    ``train`` when the task brings its own partition (else the engine partitions)."""

    name: str
    model: Callable[[], Any]
    train: Any
    test: Any
    loss: Callable[[Any, Any], Any] | None = None  # None: cross-entropy
    metric: Callable[[Any, Any], Any] | None = None  # None: accuracy
    metric_name: str = "accuracy"
    client_indices: list[np.ndarray] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    builtin: bool = False

    def build_model(self, seed: int) -> Any:
        """The model with its initial weights drawn from ``seed`` (caller's RNG untouched)."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if isinstance(self.model, torch.nn.Module):
                return copy.deepcopy(self.model)
            try:
                model = self.model()
            except Exception as exc:
                raise InputError(f"{self.name}: the model factory raised "
                                 f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(model, torch.nn.Module):
            raise InputError(f"{self.name}: the model factory returned a "
                             f"{type(model).__name__}, not a torch.nn.Module")
        return model

    @property
    def loss_fn(self) -> Callable[[Any, Any], Any]:
        import torch

        return torch.nn.CrossEntropyLoss() if self.loss is None else self.loss

    def partition_labels(self) -> np.ndarray | None:
        """One class label per training example (for label-skewed partitions), or None."""
        y = self.train.y
        if y.ndim == 1 and not y.is_floating_point():
            return y.numpy()
        return None

    def evaluate(self, model, batch: int = 1024) -> tuple[float, float]:
        """``(mean test loss, mean metric)`` in eval mode (back in train mode after)."""
        import torch

        from co3cli.tasks import evaluate

        x, y = self.test.x, self.test.y
        if self.loss is None and self.metric is None:
            return evaluate(model, x, y, batch)
        n = len(y)
        metric = self.metric or accuracy
        model.eval()
        tot_loss = tot_metric = 0.0
        with torch.no_grad():
            for i in range(0, n, batch):
                out, yb = model(x[i:i + batch]), y[i:i + batch]
                tot_loss += float(self.loss_fn(out, yb)) * len(yb)
                tot_metric += float(metric(out, yb)) * len(yb)
        model.train()
        return tot_loss / n, tot_metric / n

    def probe(self, model) -> None:
        """Run the model, loss and metric once on two training examples (see the module doc)."""
        import torch

        x, y = self.train.x[:2], self.train.y[:2]
        what = f"{self.name}: on 2 training examples (x {tuple(x.shape)} {x.dtype})"
        was_training = model.training
        model.eval()
        try:
            with torch.random.fork_rng(devices=[]):
                try:
                    out = model(x)
                except Exception as exc:
                    raise InputError(f"{what} the model failed: {type(exc).__name__}: "
                                     f"{exc}") from exc
                try:
                    loss = self.loss_fn(out, y)
                except Exception as exc:
                    raise InputError(f"{what} the loss failed on the model's output "
                                     f"{tuple(getattr(out, 'shape', ()))}: "
                                     f"{type(exc).__name__}: {exc}") from exc
                if not (isinstance(loss, torch.Tensor) and loss.ndim == 0):
                    raise InputError(f"{what} the loss returned a {type(loss).__name__} "
                                     f"{tuple(getattr(loss, 'shape', ()))}, not a scalar tensor")
                if not torch.isfinite(loss):
                    raise InputError(f"{what} the loss is {float(loss.detach())} (not finite); check "
                                     "the model, the data and the loss")
                if not loss.requires_grad:
                    raise InputError(f"{what} the loss does not depend on the model's "
                                     "parameters (no gradient)")
                with torch.no_grad():
                    try:
                        value = float((self.metric or accuracy)(out.detach(), y))
                    except Exception as exc:
                        raise InputError(f"{what} the metric failed: {type(exc).__name__}: "
                                         f"{exc}") from exc
                if not np.isfinite(value):
                    raise InputError(f"{what} the metric is {value} (not a finite number)")
        finally:
            model.train(was_training)

    def describe(self) -> dict[str, Any]:
        """What config.json records of the task."""
        return {"name": self.name, "metric": self.metric_name, "n_train": len(self.train),
                "n_test": len(self.test), "own_partition": self.client_indices is not None,
                **({"provenance": self.provenance} if self.provenance else {})}


def accuracy(out, y):
    """The fraction of ``out.argmax(1) == y`` (class dimension 1)."""
    return (out.argmax(1) == y).float().mean()


def builtin_task(task: str, test_fraction: float, split_seed: int) -> FLTask:
    """The registered capture task ``task`` as an FLTask (cross-entropy, accuracy)."""
    from functools import partial

    from co3cli.tasks import get_task, load_task_data

    spec = get_task(task)
    train, test = load_task_data(task, test_fraction, split_seed)
    prov = spec.provenance() if spec.provenance is not None else {}
    return FLTask(task, partial(spec.build), train, test, provenance=prov, builtin=True)


# -- user entries --------------------------------------------------------------------------------
def check_entry(entry: Any) -> str:
    """An entry string's shape (and its file's existence) without importing it."""
    if not isinstance(entry, str) or ":" not in entry:
        raise InputError(f"entry {entry!r} must be 'module:function' or 'path/to/file.py:function'")
    where, _, name = entry.rpartition(":")
    if not where or not name.isidentifier():
        raise InputError(f"entry {entry!r} must be 'module:function' or 'path/to/file.py:function'")
    if (where.endswith(".py") or "/" in where or os.sep in where) and not os.path.isfile(where):
        raise InputError(f"entry {entry!r}: file {where!r} does not exist")
    return entry


def load_fl_task(entry: str | Callable[..., Any], seed: int = 0, test_fraction: float = 0.2,
                 split_seed: int = 0) -> FLTask:
    """Call the entry (a string as in ``check_entry``, or a callable) and check what it returns."""
    import torch

    from co3cli.jobs import load_entry

    with torch.random.fork_rng(devices=[]):  # the import, too, sees the seeded RNG
        torch.manual_seed(seed)
        if isinstance(entry, str):
            desc, fn = f"entry {entry!r}", load_entry(check_entry(entry))
        else:
            desc, fn = f"entry {getattr(entry, '__qualname__', repr(entry))}", entry
            if not callable(fn):
                raise InputError(f"{desc} is a {type(fn).__name__}, not a function")
        try:
            takes_seed = "seed" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_seed = False
        try:
            made = fn(seed=seed) if takes_seed else fn()
        except InputError:
            raise
        except Exception as exc:
            raise InputError(f"{desc} raised {type(exc).__name__}: {exc}") from exc
    return task_from_fields(made, desc, test_fraction, split_seed, entry_provenance(entry))


def entry_provenance(entry: Any) -> dict[str, Any]:
    """The entry and, for a file, its absolute path and sha256 (so a rerun can be checked)."""
    import hashlib

    if not isinstance(entry, str):
        return {"entry": getattr(entry, "__qualname__", repr(entry))}
    where = entry.rpartition(":")[0]
    prov: dict[str, Any] = {"entry": entry}
    if os.path.isfile(where):
        with open(where, "rb") as f:
            prov.update(file=os.path.abspath(where), sha256=hashlib.sha256(f.read()).hexdigest())
    return prov


def task_from_fields(made: Any, desc: str, test_fraction: float = 0.2, split_seed: int = 0,
                     provenance: dict[str, Any] | None = None) -> FLTask:
    """Check an entry's return value (dict, dataclass, namedtuple or FLTask) -> FLTask."""
    import torch

    if isinstance(made, FLTask):
        return made
    fields = _as_fields(made, desc)
    unknown = [k for k in fields if k not in ENTRY_FIELDS]
    if unknown:
        raise InputError(f"{desc}: unknown field(s) {', '.join(map(repr, unknown))}; allowed: "
                         f"{', '.join(ENTRY_FIELDS)}")
    model = fields.get("model")
    if model is None:
        raise InputError(f"{desc}: the task is missing 'model' (a factory returning a "
                         "torch.nn.Module)")
    if not callable(model):
        raise InputError(f"{desc}: 'model' is a {type(model).__name__}, not a factory of "
                         "torch.nn.Module")
    for key in ("loss", "metric"):
        if fields.get(key) is not None and not callable(fields[key]):
            raise InputError(f"{desc}: '{key}' is a {type(fields[key]).__name__}, not a callable")
    metric_name = fields.get("metric_name") or ("accuracy" if fields.get("metric") is None
                                                else "metric")
    if not isinstance(metric_name, str):
        raise InputError(f"{desc}: 'metric_name' must be a string")
    train, clients, test = fields.get("train"), fields.get("clients"), fields.get("test")
    if (train is None) == (clients is None):
        raise InputError(f"{desc}: give exactly one of 'train' (one training set) and "
                         "'clients' (a list of per-client training sets)")
    indices = None
    if clients is not None:
        if isinstance(clients, (str, bytes, dict)) or not hasattr(clients, "__len__") \
                or len(clients) == 0:
            raise InputError(f"{desc}: 'clients' must be a non-empty list of datasets")
        parts = [as_dataset(c, f"{desc}: clients[{i}]") for i, c in enumerate(clients)]
        train = _concat(parts, desc)
        ends = np.cumsum([len(p) for p in parts])
        indices = [np.arange(e - len(p), e) for e, p in zip(ends, parts)]
        if test is None:
            raise InputError(f"{desc}: with 'clients', give 'test' too")
    else:
        train = as_dataset(train, f"{desc}: train")
    if test is None:
        from co3cli.data import train_test_split

        train, test = train_test_split(train, test_fraction, split_seed)
    else:
        test = as_dataset(test, f"{desc}: test")
    if train.x.shape[1:] != test.x.shape[1:] or train.y.shape[1:] != test.y.shape[1:]:
        raise InputError(f"{desc}: train x {tuple(train.x.shape[1:])} / y "
                         f"{tuple(train.y.shape[1:])} per example differ from test x "
                         f"{tuple(test.x.shape[1:])} / y {tuple(test.y.shape[1:])}")
    default_needs_labels = [k for k in ("loss", "metric") if fields.get(k) is None]
    if default_needs_labels and torch.is_floating_point(train.y):
        raise InputError(f"{desc}: the targets are {train.y.dtype}, but the default "
                         f"{' and '.join(default_needs_labels)} (cross-entropy, accuracy) need "
                         "integer class labels; give 'loss' and 'metric'")
    return FLTask(desc, model, train, test, fields.get("loss"), fields.get("metric"),
                  metric_name, indices, dict(provenance or {}))


def _as_fields(made: Any, desc: str) -> dict[str, Any]:
    if isinstance(made, dict):
        return dict(made)
    if dataclasses.is_dataclass(made) and not isinstance(made, type):
        return {f.name: getattr(made, f.name) for f in dataclasses.fields(made)}
    if isinstance(made, tuple) and hasattr(made, "_asdict"):
        return dict(made._asdict())
    raise InputError(f"{desc} returned a {type(made).__name__}; it must return a dict, "
                     f"dataclass or namedtuple with the fields {', '.join(ENTRY_FIELDS)}")


def as_dataset(obj: Any, what: str) -> Any:
    """``obj`` (see the module docstring) as a ``co3cli.data.Dataset`` of tensors."""
    import torch

    from co3cli.data import Dataset

    if isinstance(obj, Dataset):
        x, y = obj.x, obj.y
    elif isinstance(obj, torch.utils.data.TensorDataset):
        if len(obj.tensors) != 2:
            raise InputError(f"{what}: a TensorDataset of {len(obj.tensors)} tensors; it must "
                             "hold two, x and y")
        x, y = obj.tensors
    elif isinstance(obj, (tuple, list)) and len(obj) == 2 and not isinstance(obj[0], tuple):
        x, y = obj
    elif hasattr(obj, "__getitem__") and hasattr(obj, "__len__") and not isinstance(obj, str):
        if len(obj) == 0:
            raise InputError(f"{what} is empty")
        try:
            items = [obj[i] for i in range(len(obj))]
            x = torch.stack([torch.as_tensor(it[0]) for it in items])
            y = torch.stack([torch.as_tensor(it[1]) for it in items])
        except Exception as exc:
            raise InputError(f"{what}: cannot stack its (x, y) items: {type(exc).__name__}: "
                             f"{exc}") from exc
    else:
        raise InputError(f"{what} is a {type(obj).__name__}; give a co3cli.data.Dataset, a "
                         "pair (x, y), a TensorDataset or a map-style dataset of (x, y)")
    try:
        x, y = torch.as_tensor(x), torch.as_tensor(y)
    except Exception as exc:
        raise InputError(f"{what}: x and y must be tensors or arrays "
                         f"({type(exc).__name__}: {exc})") from exc
    if x.ndim == 0 or y.ndim == 0 or len(x) != len(y):
        raise InputError(f"{what}: x {tuple(x.shape)} and y {tuple(y.shape)} must have the "
                         "same first dimension (one row per example)")
    if len(y) == 0:
        raise InputError(f"{what} is empty")
    if torch.is_complex(x) or x.dtype == torch.bool:
        raise InputError(f"{what}: x is {x.dtype}; give real or integer inputs")
    classes = int(y.max()) + 1 if not torch.is_floating_point(y) and y.ndim == 1 else 0
    return Dataset(getattr(obj, "name", what), x.contiguous(), y.contiguous(), classes)


def _concat(parts: list[Any], desc: str) -> Any:
    import torch

    from co3cli.data import Dataset

    shapes = {(tuple(p.x.shape[1:]), p.x.dtype, tuple(p.y.shape[1:]), p.y.dtype) for p in parts}
    if len(shapes) > 1:
        raise InputError(f"{desc}: the clients' datasets differ in example shape or dtype "
                         f"({sorted(map(str, shapes))})")
    y = torch.cat([p.y for p in parts])
    classes = max(p.num_classes for p in parts)
    return Dataset("clients", torch.cat([p.x for p in parts]), y, classes)


# -- the partition into clients ------------------------------------------------------------------------------------
def partition(labels: np.ndarray, cfg, rng: np.random.Generator) -> list[np.ndarray]:
    """Sorted train indices of each client (every client gets at least one example)."""
    n, k = len(labels), cfg.clients
    if k > n:
        raise InputError(f"clients={k} exceeds the {n} training examples of "
                         f"{getattr(cfg, 'entry', None) or cfg.task}")
    if cfg.partition == "iid":
        parts = np.array_split(rng.permutation(n), k)
    elif cfg.partition == "shards":
        nshards = k * cfg.shards_per_client
        if nshards > n:
            raise InputError(f"clients x shards_per_client = {nshards} exceeds {n} examples")
        order = np.argsort(labels, kind="stable")
        shards = np.array_split(order, nshards)
        pick = rng.permutation(nshards).reshape(k, cfg.shards_per_client)
        parts = [np.concatenate([shards[s] for s in row]) for row in pick]
    else:  # dirichlet: per class, shares drawn from Dir(alpha) over the clients
        parts_l: list[list[np.ndarray]] = [[] for _ in range(k)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            share = rng.dirichlet(np.full(k, cfg.alpha))
            cuts = (np.cumsum(share)[:-1] * len(idx)).astype(np.int64)
            for j, piece in enumerate(np.split(idx, cuts)):
                parts_l[j].append(piece)
        parts = [np.concatenate(p) for p in parts_l]
        empty = [j for j, p in enumerate(parts) if p.size == 0]
        for j in empty:  # give an empty client one example of the largest client
            donor = int(np.argmax([p.size for p in parts]))
            parts[j], parts[donor] = parts[donor][-1:], parts[donor][:-1]
    return [np.sort(p) for p in parts]


def task_shards(task, cfg, rng: np.random.Generator) -> list[np.ndarray]:
    """The task's own per-client partition, or ``partition`` over its labels."""
    if task.client_indices is not None:
        if len(task.client_indices) != cfg.clients or cfg.partition != "iid":
            raise InputError(f"{task.name} brings its own partition of "
                             f"{len(task.client_indices)} clients: set clients="
                             f"{len(task.client_indices)} and leave partition='iid' "
                             f"(got clients={cfg.clients}, partition={cfg.partition!r})")
        return [np.asarray(i) for i in task.client_indices]
    labels = task.partition_labels()
    if labels is None:
        if cfg.partition != "iid":
            raise InputError(f"partition={cfg.partition!r} needs one class label per example; "
                             f"{task.name} has targets of shape {tuple(task.train.y.shape)}: "
                             "use partition='iid', or give per-client datasets from an entry")
        labels = np.zeros(len(task.train), np.int64)  # iid uses only the count
    return partition(labels, cfg, rng)


def resolve_task(task: str, entry: str | None, seed: int, test_fraction: float, split_seed: int,
                 obj: Any = None) -> FLTask:
    """The run's FLTask: ``obj`` (an FLTask or an entry callable), else ``entry``, else the
    built-in ``task``."""
    if obj is not None:
        if isinstance(obj, FLTask):
            return obj
        return load_fl_task(obj, seed, test_fraction, split_seed)
    if entry is not None:
        return load_fl_task(entry, seed, test_fraction, split_seed)
    return builtin_task(task, test_fraction, split_seed)
