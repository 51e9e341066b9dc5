"""The model, each node's data and local training: co3cli's built-in tasks, split iid."""

from __future__ import annotations

import numpy as np
import torch


def load(task: str, seed: int):
    """(model, train, test) of a co3cli built-in task; the same on every node for a seed."""
    from co3cli.tasks import build_model, load_task_data

    train, test = load_task_data(task, 0.2, seed)
    return build_model(task, seed), train, test


def shard(n: int, partition: int, partitions: int, seed: int) -> np.ndarray:
    """This node's training examples: an iid split of a seeded permutation."""
    return np.sort(np.array_split(np.random.default_rng(seed).permutation(n), partitions)[partition])


def local_sgd(model, train, idx: np.ndarray, steps: int, batch: int, lr: float,
              rng: np.random.Generator) -> float:
    """``steps`` SGD steps on minibatches of ``idx``; the mean training loss."""
    loss_fn, losses = torch.nn.CrossEntropyLoss(), []
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        t = torch.from_numpy(rng.choice(idx, size=batch, replace=idx.size < batch))
        opt.zero_grad()
        loss = loss_fn(model(train.x[t]), train.y[t])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return float(np.mean(losses))
