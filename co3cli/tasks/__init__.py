"""The built-in capture tasks (a dataset and a model each: ``TASKS``) and optimizers.

::

    TASKS.get(id) -> Task(dataset, model, build) --build_model(id, seed)--> torch.nn.Module
                              |
                              +--load_task_data(id)--> bundled data (co3cli.data), a
                                                       synthetic dataset, or the task's own
                                                       (``data``: stdlib text) --> (train, test)

Used by ``co3 capture`` (``co3cli.capture``), federated learning (``co3cli.simulate.fl``,
through ``co3cli.tasks.fltask``) and the straggler training (``co3cli.simulate.uep.train``).
All run offline:

    digits-mlp              8x8 digits,   MLP 64-64-10
    digits-cnn              8x8 digits,   CNN conv3x3(8)-pool-conv3x3(16)-pool-fc(10)
    mnist5k-mlp             MNIST 5k,     MLP 784-128-64-10
    mnist5k-cnn             MNIST 5k,     CNN conv5x5(8)-pool-conv5x5(16)-pool-fc(64)-fc(10)
    synthetic-cifar-resnet  SYNTHETIC 3x32x32 images (smooth random images, labels from a fixed
                            random linear teacher, so the loss decreases), ResNet with
                            BasicBlocks of widths 64-128-256 and batch norm (2.8M parameters)
    mnist5k-resnet          MNIST 5k,     ResNet 32-64-128-256, one BasicBlock each, BN (1.2M)
    mnist5k-resnet-large    MNIST 5k,     ResNet 64-128-256-512, one BasicBlock each, BN (4.9M)
    digits-resnet-tiny      8x8 digits,   ResNet 8-16 with BN (5k; for tests)
    stdlib-charlm           this Python's stdlib sources (``co3cli.tasks.text``) in windows of
                            64 characters, a causal character transformer d256 x 4 blocks
                            (3.2M; ``co3cli.tasks.zoo``); metric: next-character accuracy
    stdlib-charlm-tiny      the text's first 200k characters, windows of 16, d32 x 1 (22k)

The MLPs and CNNs are ReLU networks, so that, as in real training, part of every gradient is
exactly zero; the transformer's gradients have no exact-zero rows but the embedding's (the
characters a batch does not hold). Sequence models put the class dimension second (logits
``(B, vocab, T)``, targets ``(B, T)``), so cross-entropy and ``evaluate`` (which counts every
character) treat them like classifiers.

A new task is one registration: ``TASKS.register(Task("id", "dataset", "model-id", builder))``.
The optimizers that train them (``--optimizer``) are the registry ``OPTIMIZERS``: ``sgd``
(lr 0.1 by default, with momentum) and ``adam`` (lr 1e-3).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from co3cli.checks import check_real
from co3cli.errors import InputError
from co3cli.registry import Registry


@dataclass(frozen=True)
class Task:
    """A built-in capture task: a dataset and a model builder (``build()`` -> ``nn.Module``).

    ``synthetic`` marks tasks whose data are generated (see ``synthetic_dataset``), not bundled;
    ``data`` builds a dataset that is neither (the text windows of the language models), and
    ``provenance`` describes it (Python version, text hash).
    """

    id: str
    dataset: str
    model: str
    build: Callable[[], Any]
    synthetic: bool = False
    data: Callable[[], Any] | None = None  # the dataset, when it is neither bundled nor synthetic
    provenance: Callable[[], dict[str, Any]] | None = None  # of that dataset (recorded by FL)


TASKS: Registry[Task] = Registry("capture task")
"""Task id -> Task, in registration order."""


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


def _resnet_cifar() -> Any:
    from co3cli.tasks.zoo import resnet

    return resnet(3, (64, 128, 256), 2, 10)


SYNTHETIC_DATASETS: Registry[dict[str, Any]] = Registry("synthetic dataset")
"""Generated datasets (id -> generator spec): fixed (their own ``data_seed``), so every run sees
the same images."""

SYNTHETIC_DATASETS.register(
    {"n": 1280, "image_shape": (3, 32, 32), "latent": (3, 8, 8), "num_classes": 10,
     "margin": 6.0, "noise": 0.25, "data_seed": 0},
    id="synthetic-cifar", doc="1280 smooth random 3x32x32 images, labels from a linear teacher",
)


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

    spec = SYNTHETIC_DATASETS.get(name)
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


TASKS.register(Task("digits-mlp", "digits", "mlp-64-64-10-relu", lambda: _mlp(64, 64, 10)),
               doc="8x8 digits, MLP 64-64-10")
TASKS.register(Task("digits-cnn", "digits", "cnn-c8-c16-fc10-relu", _digits_cnn),
               doc="8x8 digits, CNN conv3x3(8)-pool-conv3x3(16)-pool-fc(10)")
TASKS.register(Task("mnist5k-mlp", "mnist5k", "mlp-784-128-64-10-relu",
                    lambda: _mlp(784, 128, 64, 10)),
               doc="MNIST 5k, MLP 784-128-64-10")
TASKS.register(Task("mnist5k-cnn", "mnist5k", "cnn-c8-c16-fc64-fc10-relu", _mnist_cnn),
               doc="MNIST 5k, CNN conv5x5(8)-pool-conv5x5(16)-pool-fc(64)-fc(10)")
TASKS.register(Task("synthetic-cifar-resnet", "synthetic-cifar", "resnet-64-128-256-x2-bn-relu",
                    _resnet_cifar, synthetic=True),
               doc="synthetic 3x32x32 images, ResNet 64-128-256 with batch norm")


def _charlm(context: int, d_model: int, layers: int, heads: int) -> Any:
    from co3cli.tasks.zoo import char_transformer

    return char_transformer(128, context, d_model, layers, heads)


def _char_windows(name: str, context: int, max_chars: int | None) -> Any:
    from co3cli.tasks.text import char_windows

    return char_windows(name, context, max_chars)


def _corpus_provenance(max_chars: int | None) -> dict[str, Any]:
    from co3cli.tasks.text import stdlib_corpus

    return stdlib_corpus(max_chars)[1]


def _register_charlm(id: str, context: int, d_model: int, layers: int, heads: int,
                     max_chars: int | None, doc: str) -> None:
    from functools import partial

    TASKS.register(Task(id, f"stdlib-text-{context}", f"char-transformer-d{d_model}-l{layers}"
                        f"-h{heads}-t{context}", partial(_charlm, context, d_model, layers, heads),
                        data=partial(_char_windows, id, context, max_chars),
                        provenance=partial(_corpus_provenance, max_chars)), doc=doc)


def _resnet_mnist(widths: tuple[int, ...], blocks: int) -> Any:
    from co3cli.tasks.zoo import resnet

    return resnet(1, widths, blocks, 10)


_register_charlm("stdlib-charlm", 64, 256, 4, 4, None,
                 "Python stdlib sources, char transformer d256 x4 layers, context 64 (3.2M)")
_register_charlm("stdlib-charlm-tiny", 16, 32, 1, 2, 200_000,
                 "the first 200k chars of the stdlib text, char transformer d32 x1, context 16")
TASKS.register(Task("mnist5k-resnet", "mnist5k", "resnet-32-64-128-256-x1-bn-relu",
                    lambda: _resnet_mnist((32, 64, 128, 256), 1)),
               doc="MNIST 5k, ResNet 32-64-128-256 (1 block each) with batch norm (1.2M)")
TASKS.register(Task("mnist5k-resnet-large", "mnist5k", "resnet-64-128-256-512-x1-bn-relu",
                    lambda: _resnet_mnist((64, 128, 256, 512), 1)),
               doc="MNIST 5k, ResNet 64-128-256-512 (1 block each) with batch norm (4.9M)")
TASKS.register(Task("digits-resnet-tiny", "digits", "resnet-8-16-x1-bn-relu",
                    lambda: _resnet_mnist((8, 16), 1)),
               doc="8x8 digits, ResNet 8-16 (1 block each) with batch norm (tests)")


def get_task(task: str) -> Task:
    """The registered task ``task``; unknown ids raise InputError listing the allowed ones."""
    return TASKS.get(task)


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
    if spec.data is not None:
        ds = spec.data()
    else:
        ds = synthetic_dataset(spec.dataset) if spec.synthetic else load_dataset(spec.dataset)
    return train_test_split(ds, test_fraction, seed)


# -- the loops every trainer shares (capture, the FL engines, UEP training) ------------------

def epoch_batches(train, batch_size: int, gen) -> Any:
    """One epoch of ``(x, y)`` minibatches of ``train`` in the order of ``torch.randperm`` drawn
    from the generator ``gen``; the last partial batch is dropped."""
    import torch

    n = len(train)
    bs = min(batch_size, n)
    perm = torch.randperm(n, generator=gen)
    for i in range(0, n - bs + 1, bs):
        idx = perm[i:i + bs]
        yield train.x[idx], train.y[idx]


def evaluate_counts(model, x, y, batch: int = 1024) -> tuple[float, int, int]:
    """``(summed cross-entropy, correct predictions, entries)`` of ``model`` on ``(x, y)``, in
    eval mode, in batches of ``batch`` (the model is put back in train mode). The class
    dimension of the output is 1; sequence targets ``y`` (N, T) count N * T entries."""
    import torch

    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(y), batch):
            out = model(x[i:i + batch])
            loss += float(torch.nn.functional.cross_entropy(out, y[i:i + batch], reduction="sum"))
            correct += int((out.argmax(1) == y[i:i + batch]).sum())
    model.train()
    return loss, correct, int(y.numel())


def evaluate(model, x, y, batch: int = 1024) -> tuple[float, float]:
    """Mean cross-entropy and accuracy (:func:`evaluate_counts`); ``(nan, nan)`` without data."""
    if len(y) == 0:
        return math.nan, math.nan
    loss, correct, n = evaluate_counts(model, x, y, batch)
    return loss / n, correct / n


class TorchThreads:
    """Set torch's intra-op threads for a block (``None``: leave them alone)."""

    def __init__(self, threads: int | None):
        from co3cli.checks import check_int

        self.threads = None if threads is None else check_int("threads", threads, 1)

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


# -- optimizers ------------------------------------------------------------------------------

def _sgd(params, lr: float, momentum: float) -> Any:
    """SGD, with momentum."""
    import torch

    return torch.optim.SGD(params, lr=lr, momentum=momentum)


def _adam(params, lr: float, momentum: float) -> Any:
    """Adam (momentum does not apply)."""
    import torch

    return torch.optim.Adam(params, lr=lr)


OPTIMIZERS: Registry[Callable[..., Any]] = Registry("optimizer")
"""Optimizer id -> builder ``(params, lr, momentum) -> torch.optim.Optimizer``."""
OPTIMIZERS.register(_sgd, id="sgd")
OPTIMIZERS.register(_adam, id="adam")
DEFAULT_LR = {"sgd": 0.1, "adam": 1e-3}


def check_lr(lr: Any) -> float:
    """A learning rate: a finite number > 0."""
    return check_real("lr", lr, 0.0, lo_open=True)


def check_optimizer(optimizer, lr, momentum) -> tuple[str, float, float]:
    """``(optimizer id, lr, momentum)``; ``lr=None`` is the optimizer's default."""
    OPTIMIZERS.check(optimizer)
    lr = DEFAULT_LR[optimizer] if lr is None else check_lr(lr)
    check_real("momentum", momentum, 0.0, 1.0, hi_open=True)
    if momentum and optimizer != "sgd":
        raise InputError(
            f"momentum={momentum!r} applies to optimizer 'sgd' only, not {optimizer!r}"
        )
    return optimizer, float(lr), float(momentum)


def make_optimizer(params, optimizer: str, lr: float, momentum: float) -> Any:
    """The torch optimizer ``optimizer`` over ``params``."""
    return OPTIMIZERS.get(optimizer)(params, lr, momentum)
