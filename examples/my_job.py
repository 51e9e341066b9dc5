"""A complete ``co3 capture --entry`` job: an MLP on the bundled 8x8 digits (runs offline).

    co3 capture --entry examples/my_job.py:make_job --epochs 2 -o my_run.h5
    co3 capture --entry examples/my_job.py:make_job --steps 50 --epoch-average -o - | co3 report -

``make_job`` returns the job: a dict with ``model`` (a torch.nn.Module), ``data`` (a re-iterable
of (x, y) batches: here a DataLoader; one pass is one epoch), ``loss_fn`` (called as
``loss_fn(model(x), y)``, returning a scalar tensor) and, optionally, ``optimizer`` (a
torch.optim.Optimizer over the model's parameters) or ``lr`` (co3 then builds SGD/Adam from
``--optimizer``/``--lr``/``--momentum``). co3 passes ``--seed`` as ``seed`` because
``make_job`` takes one, and also seeds torch's global RNG with it, so a run is reproducible.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from co3cli.data import load_arrays


def make_job(seed: int = 0) -> dict:
    x, y = load_arrays("digits")  # float32 (1797, 8, 8) in [0, 1], int64 labels
    dataset = TensorDataset(torch.from_numpy(x).flatten(1), torch.from_numpy(y))
    loader = DataLoader(dataset, batch_size=64, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(seed))
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    return {
        "model": model,
        "data": loader,
        "loss_fn": nn.CrossEntropyLoss(),
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
    }
