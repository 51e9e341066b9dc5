"""A complete ``co3 simulate fl --entry`` task: a small CNN with batch norm on the bundled 8x8
digits (runs offline). Copy it and put your own model and data in.

    co3 simulate fl --entry examples/fl_job.py:make_task --clients 5 --rounds 30 \\
        -c co3 --format fp4-co3 --gamma 0.7 -o fl_mine/
    co3 simulate fl --entry examples/fl_job.py:make_task_per_client --clients 5 -o fl_own/

``make_task`` returns a dict with

* ``model``: a factory, called once per run with torch's RNG seeded from ``--seed``, returning
  the ``torch.nn.Module`` every client trains (here with BatchNorm: its running statistics are
  kept by the ``--buffers`` rule, ``average`` or ``local``);
* ``train`` and ``test``: datasets, here ``(x, y)`` pairs of tensors (a ``TensorDataset`` or a
  map-style dataset of ``(x, y)`` items works too); co3 partitions ``train`` over the clients
  (``--partition iid|dirichlet|shards``);
* ``loss``: ``loss(model(x), y)`` -> scalar tensor (optional; cross-entropy by default);
* ``metric``: ``metric(model(x), y)`` -> the batch's mean, higher is better, reported as
  ``test_accuracy`` (optional; accuracy by default), and ``metric_name``.

``make_task_per_client`` gives each client its own dataset (``clients``: a list, one per
client; ``--clients`` must match it) instead of ``train``: here each client holds two digit
classes, a label-skewed split. co3 passes ``--seed`` as ``seed`` because the functions take one.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from co3cli.data import load_arrays


def _digits(seed: int):
    x, y = load_arrays("digits")  # float32 (1797, 8, 8) in [0, 1], int64 labels 0..9
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = torch.from_numpy(x[order]).unsqueeze(1), torch.from_numpy(y[order])
    cut = int(0.8 * len(y))
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10),
    )


def top2_accuracy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A metric of your own: whether the label is among the two highest scores."""
    return (out.topk(2, dim=1).indices == y[:, None]).any(dim=1).float().mean()


def make_task(seed: int = 0) -> dict:
    train, test = _digits(seed)
    return {
        "model": make_model,
        "train": train,
        "test": test,
        "loss": nn.CrossEntropyLoss(label_smoothing=0.05),
    }


def make_task_per_client(seed: int = 0) -> dict:
    (x, y), test = _digits(seed)
    clients = [(x[(y == 2 * c) | (y == 2 * c + 1)], y[(y == 2 * c) | (y == 2 * c + 1)])
               for c in range(5)]
    return {"model": make_model, "clients": clients, "test": test,
            "metric": top2_accuracy, "metric_name": "top-2 accuracy"}
