"""Built-in capture: recorded gradients are the real p.grad, runs are deterministic."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from co3cli.capture import OPTIMIZERS, TASKS, build_model, capture  # noqa: E402
from co3cli.data import load_dataset, train_test_split  # noqa: E402
from co3cli.dump import Dump  # noqa: E402
from co3cli.errors import InputError  # noqa: E402

torch.set_num_threads(1)


def _read_all(path) -> dict[str, np.ndarray]:
    with Dump.open(path) as d:
        return {name: d.read_layer(name) for name in d.layers}


def test_recorded_values_are_p_grad_at_each_step(tmp_path):
    seen: dict[int, dict[str, np.ndarray]] = {}

    def hook(step, model, loss):
        seen[step] = {n: p.grad.detach().clone().numpy() for n, p in model.named_parameters()}

    out = tmp_path / "d.h5"
    s = capture(
        "digits-mlp",
        out,
        steps=7,
        every=3,
        batch_size=32,
        seed=3,
        progress=False,
        momentum=0.9,
        on_step=hook,
    )
    assert s.steps_recorded == 3 and s.layers == (
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
    )
    assert s.total_entries == 3 * (64 * 64 + 64 + 64 * 10 + 10)
    with Dump.open(out) as d:
        assert d.steps.tolist() == [0, 3, 6]
        assert d.shape("fc1.weight") == (64, 64)
        for name in d.layers:
            g = d.read_layer(name)
            for row, step in enumerate(d.steps):
                np.testing.assert_array_equal(g[row], seen[int(step)][name].reshape(-1))
        # rows differ: each is a copy of its own step, not an alias of the last gradient
        assert not np.array_equal(d.read_layer("fc1.weight")[0], d.read_layer("fc1.weight")[2])
        assert d.loss.shape == (3,) and np.all(np.isfinite(d.loss))


def test_full_batch_gradients_match_an_independent_training_loop(tmp_path):
    """With the whole train split as the batch, the data order cannot matter: redo it by hand."""
    out = tmp_path / "d.h5"
    capture("digits-mlp", out, steps=3, batch_size=10**6, lr=0.05, seed=5, progress=False)
    train, _ = train_test_split(load_dataset("digits"), 0.2, 5)
    model = build_model("digits-mlp", seed=5)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    dump = _read_all(out)
    for step in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(train.x), train.y)
        loss.backward()
        for name, p in model.named_parameters():
            np.testing.assert_allclose(
                dump[name][step], p.grad.numpy().reshape(-1), rtol=1e-6, atol=1e-7
            )
        opt.step()


def test_deterministic_and_seed_dependent(tmp_path):
    kw = dict(steps=5, every=2, progress=False)
    capture("digits-mlp", tmp_path / "a.h5", seed=1, **kw)
    capture("digits-mlp", tmp_path / "b.h5", seed=1, **kw)
    capture("digits-mlp", tmp_path / "c.h5", seed=2, **kw)
    a, b, c = (_read_all(tmp_path / f"{k}.h5") for k in "abc")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["fc1.weight"], c["fc1.weight"])
    with Dump.open(tmp_path / "a.h5") as da, Dump.open(tmp_path / "b.h5") as db:
        np.testing.assert_array_equal(da.loss, db.loss)


def test_relu_gradients_have_exact_zeros_and_attrs_are_recorded(tmp_path):
    out = tmp_path / "d.h5"
    capture("digits-mlp", out, steps=2, lr=0.2, seed=0, optimizer="sgd", progress=False)
    with Dump.open(out) as d:
        g = d.read_layer("fc1.weight")
        assert 0 < np.mean(g == 0) < 1
        attrs = d.attrs
        for key in (
            "task",
            "model",
            "optimizer",
            "lr",
            "seed",
            "co3cli_version",
            "torch_version",
            "created",
            "config",
        ):
            assert key in attrs, key
        assert attrs["task"] == "digits-mlp" and attrs["lr"] == 0.2 and attrs["seed"] == 0
        assert "Linear(in_features=64, out_features=64" in attrs["model_repr"]
        assert json.loads(attrs["config"])["steps"] == 2
        assert 0 <= attrs["test_accuracy"] <= 1


def test_layer_glob_adam_and_stdout(tmp_path, monkeypatch):
    out = io.TextIOWrapper(io.BytesIO())
    monkeypatch.setattr(sys, "stdout", out)
    s = capture("digits-cnn", "-", steps=2, layers="*.weight", optimizer="adam", progress=False)
    assert s.layers == ("conv1.weight", "conv2.weight", "fc1.weight")
    path = tmp_path / "d.h5"
    path.write_bytes(out.buffer.getvalue())
    with Dump.open(path) as d:
        assert d.layers == list(s.layers) and d.shape("conv1.weight") == (8, 1, 3, 3)
        assert d.attrs["optimizer"] == "adam" and d.attrs["lr"] == 1e-3


def test_rng_state_and_threads_are_left_alone(tmp_path):
    torch.manual_seed(1234)
    state = torch.random.get_rng_state()
    threads = torch.get_num_threads()
    capture("digits-mlp", tmp_path / "d.h5", steps=1, progress=False, threads=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_task_runs(tmp_path, task):
    s = capture(task, tmp_path / "d.h5", steps=1, batch_size=8, progress=False)
    assert s.steps_recorded == 1 and np.isfinite(s.final_loss)
    assert sum(v.size for v in _read_all(tmp_path / "d.h5").values()) == s.total_entries


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(task="imagenet"), "unknown capture task 'imagenet'; allowed: digits-mlp, digits-cnn"),
        (dict(optimizer="lamb"), "unknown optimizer 'lamb'; allowed: " + ", ".join(OPTIMIZERS)),
        (dict(layers="conv*"), "layers='conv*' matches no parameter; parameters: fc1.weight"),
        (dict(steps=0), "steps=0 must be an integer >= 1"),
        (dict(every=0), "every=0 must be an integer >= 1"),
        (dict(lr=-1.0), "lr=-1.0 must be a finite number > 0"),
        (dict(momentum=0.9, optimizer="adam"), "applies to optimizer 'sgd' only"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, message):
    args = dict(task="digits-mlp", out=tmp_path / "d.h5", steps=2, progress=False) | kwargs
    with pytest.raises(InputError) as info:
        capture(**args)
    assert message in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_datasets_load_normalised_and_split_deterministically(monkeypatch, tmp_path):
    from co3cli import data

    for name, (n, side) in {"digits": (1797, 8), "mnist5k": (5000, 28)}.items():
        ds = load_dataset(name)
        assert ds.x.shape == (n, 1, side, side) and ds.x.dtype == torch.float32
        assert ds.y.dtype == torch.int64 and ds.x.min() == 0 and ds.x.max() == 1
        assert sorted(torch.unique(ds.y).tolist()) == list(range(10))
    train1, test1 = train_test_split(ds, 0.2, seed=4)
    train2, test2 = train_test_split(ds, 0.2, seed=4)
    assert len(train1) == 4000 and len(test1) == 1000
    assert torch.equal(train1.y, train2.y) and torch.equal(test1.x, test2.x)
    with pytest.raises(InputError, match="unknown dataset 'cifar'; allowed: digits, mnist5k"):
        load_dataset("cifar")
    monkeypatch.setattr(data, "SAMPLE_DATA_DIR", tmp_path)
    with pytest.raises(
        InputError, match="sample dataset 'digits' not found: .*digits.npz is missing"
    ):
        load_dataset("digits")
    (tmp_path / "digits.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="digits.npz is not a readable .npz file"):
        load_dataset("digits")
