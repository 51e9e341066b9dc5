"""Built-in capture: recorded gradients are the real p.grad, runs are deterministic."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from co3cli.capture import capture  # noqa: E402
from co3cli.data import load_dataset, train_test_split  # noqa: E402
from co3cli.dump import Dump  # noqa: E402
from co3cli.errors import InputError  # noqa: E402
from co3cli.tasks import OPTIMIZERS, TASKS, build_model  # noqa: E402

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


_HEAVY_TASKS = {"stdlib-charlm", "mnist5k-resnet-large", "mnist5k-resnet",  # 8-50 s each
                "synthetic-cifar-resnet"}


@pytest.mark.parametrize("task", [pytest.param(t, marks=pytest.mark.slow) if t in _HEAVY_TASKS
                                  else t for t in sorted(TASKS)])
def test_every_task_runs(tmp_path, task):
    s = capture(task, tmp_path / "d.h5", steps=1, batch_size=8, progress=False)
    assert s.steps_recorded == 1 and np.isfinite(s.final_loss)
    assert sum(v.size for v in _read_all(tmp_path / "d.h5").values()) == s.total_entries


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(task="imagenet"), "unknown capture task 'imagenet'; allowed: digits-mlp, digits-cnn"),
        (dict(optimizer="lamb"), "unknown optimizer 'lamb'; allowed: " + ", ".join(OPTIMIZERS)),
        (dict(layers="conv*"),
         "layers='conv*' selects no trainable parameter; parameters: fc1.weight"),
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


# -- epochs, epoch averages, NaN/Inf policy, the synthetic ResNet, --entry jobs, disk errors ------

from co3cli.jobs import capture_entry, job_fields, load_entry  # noqa: E402
from co3cli.tasks import synthetic_dataset  # noqa: E402

EXAMPLE = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples" / "my_job.py"


def test_epochs_and_epoch_average_is_the_mean_of_the_step_gradients(tmp_path):
    seen: dict[int, dict[str, np.ndarray]] = {}

    def hook(step, model, loss):
        seen[step] = {n: p.grad.detach().double().numpy().copy()
                      for n, p in model.named_parameters()}

    kw = dict(batch_size=256, seed=2, progress=False)  # 1437 train examples: 5 steps per epoch
    s = capture("digits-mlp", tmp_path / "m.h5", epochs=3, epoch_average=True, on_step=hook, **kw)
    assert s.steps_trained == 15 and s.epochs_trained == 3 and s.steps_recorded == 3
    assert s.reduction == "epoch-mean"
    with Dump.open(tmp_path / "m.h5") as d:
        assert d.attrs["reduction"] == "epoch-mean" and d.steps.tolist() == [0, 1, 2]
        assert d.attrs["steps_per_epoch"] == 5 and d.attrs["epochs_trained"] == 3
        for name in d.layers:
            g = d.read_layer(name)
            for e in range(3):
                mean = np.mean([seen[s][name].reshape(-1) for s in range(5 * e, 5 * e + 5)], axis=0)
                np.testing.assert_allclose(g[e], mean, rtol=1e-5, atol=1e-8)
    # the same run per step: same training, 15 rows, reduction per-step
    s2 = capture("digits-mlp", tmp_path / "p.h5", epochs=3, **kw)
    assert s2.steps_recorded == 15 and s2.final_loss == s.final_loss
    with Dump.open(tmp_path / "p.h5") as d:
        assert d.attrs["reduction"] == "per-step" and d.nsteps == 15
    with pytest.raises(InputError, match="give steps or epochs, not both"):
        capture("digits-mlp", tmp_path / "x.h5", steps=3, epochs=1, progress=False)


@pytest.mark.parametrize("policy", ["error", "skip", "record"])
def test_nonfinite_gradients_from_a_huge_lr(tmp_path, policy):
    out = tmp_path / "d.h5"
    run = lambda: capture("digits-mlp", out, steps=6, lr=1e30, progress=False,  # noqa: E731
                          on_nonfinite=policy)
    if policy == "error":
        with pytest.raises(InputError, match=r"step 1: gradient of layer 'fc1.weight' has "
                                             r"non-finite values .*--on-nonfinite"):
            run()
        assert list(tmp_path.iterdir()) == []
        return
    s = run()
    assert s.nonfinite_steps == 5
    with Dump.open(out, nonfinite="zero") as d:
        assert d.attrs["nonfinite_steps"] == 5 and d.attrs["on_nonfinite"] == policy
        assert d.steps.tolist() == ([0] if policy == "skip" else list(range(6)))
        finite = np.isfinite(d.h5["grads"]["fc1.weight"][()]).all()
        assert finite == (policy == "skip")


def test_synthetic_cifar_resnet_is_deterministic_labelled_and_learnable(tmp_path):
    ds1, ds2 = synthetic_dataset("synthetic-cifar"), synthetic_dataset("synthetic-cifar")
    assert ds1.x.shape == (1280, 3, 32, 32) and torch.equal(ds1.x, ds2.x)
    assert torch.equal(ds1.y, ds2.y) and torch.bincount(ds1.y, minlength=10).min() > 50
    from co3cli.tasks import build_model

    model = build_model("synthetic-cifar-resnet")
    assert 2_000_000 < sum(p.numel() for p in model.parameters()) < 5_000_000
    kw = dict(steps=3, batch_size=4, every=2, layers="layer3.*,fc.*", progress=False,
              test_fraction=0.05)
    capture("synthetic-cifar-resnet", tmp_path / "a.h5", **kw)
    capture("synthetic-cifar-resnet", tmp_path / "b.h5", **kw)
    a, b = _read_all(tmp_path / "a.h5"), _read_all(tmp_path / "b.h5")
    assert list(a) == list(b) and "fc.weight" in a and "layer3.1.conv2.weight" in a
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    with Dump.open(tmp_path / "a.h5") as d:
        assert d.attrs["synthetic"] is True and d.attrs["dataset"] == "synthetic-cifar"
        assert d.attrs["task"] == "synthetic-cifar-resnet" and d.steps.tolist() == [0, 2]


def _job(**over):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    x, y = torch.randn(12, 4), torch.arange(12) % 3
    job = dict(model=model, data=[(x[i:i + 4], y[i:i + 4]) for i in range(0, 12, 4)],
               loss_fn=torch.nn.functional.cross_entropy)
    job.update(over)
    return {k: v for k, v in job.items() if v is not None}


def test_entry_example_file_and_module_are_deterministic(tmp_path, monkeypatch):
    s1 = capture_entry(f"{EXAMPLE}:make_job", tmp_path / "a.h5", steps=30, every=3, progress=False)
    capture_entry(f"{EXAMPLE}:make_job", tmp_path / "b.h5", steps=30, every=3, progress=False)
    capture_entry(f"{EXAMPLE}:make_job", tmp_path / "c.h5", steps=30, every=3, seed=1,
                  progress=False)
    assert s1.steps_recorded == 10 and s1.layers == ("0.weight", "0.bias", "2.weight", "2.bias")
    a, b, c = (_read_all(tmp_path / f"{k}.h5") for k in "abc")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["0.weight"], c["0.weight"])
    with Dump.open(tmp_path / "a.h5") as d:
        assert d.attrs["optimizer"] == "sgd" and d.attrs["lr"] == 0.05
        assert d.attrs["momentum"] == 0.9 and d.attrs["steps_per_epoch"] == 28
        assert d.loss[-1] < d.loss[0]
    monkeypatch.chdir(EXAMPLE.parents[1])
    s4 = capture_entry("examples.my_job:make_job", tmp_path / "d.h5", steps=30, every=3,
                       progress=False)
    np.testing.assert_array_equal(_read_all(tmp_path / "d.h5")["2.weight"], a["2.weight"])
    assert s4.final_loss == s1.final_loss


def test_entry_job_optimizer_built_from_options_and_epochs(tmp_path):
    s = capture_entry(lambda: _job(lr=0.5), tmp_path / "a.h5", epochs=4, epoch_average=True,
                      optimizer="adam", lr=0.01, progress=False)
    assert s.steps_trained == 12 and s.steps_recorded == 4
    with Dump.open(tmp_path / "a.h5") as d:
        assert d.attrs["optimizer"] == "adam" and d.attrs["lr"] == 0.01
        assert d.attrs["reduction"] == "epoch-mean"
    capture_entry(lambda: _job(lr=0.5), tmp_path / "b.h5", steps=2, progress=False)
    with Dump.open(tmp_path / "b.h5") as d:
        assert d.attrs["optimizer"] == "sgd" and d.attrs["lr"] == 0.5


@pytest.mark.parametrize(
    "job, message",
    [
        (lambda: 3, "returned a int; it must return a dict, dataclass or namedtuple"),
        (lambda: _job(model=None), "the job is missing 'model'"),
        (lambda: {**_job(), "epochs": 3}, "unknown job field(s) 'epochs'; allowed: model"),
        (lambda: _job(model="net"), "job 'model' is a str, not a torch.nn.Module"),
        (lambda: _job(data=5), "job 'data' is a int, not an iterable of (x, y) batches"),
        (lambda: _job(loss_fn="mse"), "job 'loss_fn' is a str, not a callable"),
        (lambda: _job(optimizer=3), "job 'optimizer' is a int, not a torch.optim.Optimizer"),
        (lambda: _job(lr=-1.0), "job lr=-1.0 must be a finite number > 0"),
        (lambda: _job(data=[torch.zeros(4)]), "batch 0 of the data is a Tensor, not an (x, y)"),
        (lambda: _job(data=iter([(torch.zeros(1, 4), torch.zeros(1, dtype=torch.long))])),
         "the data yielded no batches in epoch 1"),
        (lambda: _job(loss_fn=lambda o, y: o), "loss_fn must return a scalar tensor"),
        (lambda: 1 / 0, "raised ZeroDivisionError: division by zero"),
    ],
)
def test_entry_job_errors_name_the_problem(tmp_path, job, message):
    with pytest.raises(InputError) as info:
        capture_entry(job, tmp_path / "d.h5", steps=3, progress=False)
    assert message in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_entry_job_dataclass_namedtuple_and_own_optimizer(tmp_path):
    import collections
    import dataclasses

    Job = collections.namedtuple("Job", "model data loss_fn")
    fields = job_fields(Job(**_job()))
    assert set(fields) == {"model", "data", "loss_fn"}

    @dataclasses.dataclass
    class DJob:
        model: object
        data: object
        loss_fn: object
        optimizer: object = None

    j = _job()
    opt = torch.optim.SGD(j["model"].parameters(), lr=0.3)
    with pytest.raises(InputError, match="brings its own optimizer, so lr cannot be given"):
        capture_entry(lambda: DJob(**j, optimizer=opt), tmp_path / "d.h5", steps=1, lr=0.1,
                      progress=False)
    capture_entry(lambda: DJob(**j, optimizer=opt), tmp_path / "d.h5", steps=1, progress=False)
    with Dump.open(tmp_path / "d.h5") as d:
        assert d.attrs["optimizer"] == "sgd" and d.attrs["lr"] == 0.3


@pytest.mark.parametrize(
    "entry, message",
    [
        ("nocolon", "must be 'module:function' or 'path/to/file.py:function'"),
        ("no_such_module_xyz:make", "cannot import module 'no_such_module_xyz'"),
        ("json:no_such_fn", "'json' has no attribute 'no_such_fn'"),
        ("json:__doc__", "'__doc__' is a str, not a function"),
        ("missing/file.py:make", "file 'missing/file.py' does not exist"),
    ],
)
def test_load_entry_errors(entry, message):
    with pytest.raises(InputError) as info:
        load_entry(entry)
    assert message in str(info.value)


def test_entry_file_that_fails_to_import(tmp_path):
    (tmp_path / "bad.py").write_text("import no_such_dependency_xyz\n")
    with pytest.raises(InputError, match="importing .*bad.py' failed: ModuleNotFoundError"):
        load_entry(f"{tmp_path / 'bad.py'}:make")


def test_disk_full_removes_the_partial_dump(tmp_path, monkeypatch):
    import errno

    from co3cli.dump import StepWriter

    real = StepWriter.stage
    calls = []

    def full(self, *a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(StepWriter, "stage", full)
    with pytest.raises(InputError, match=r"cannot write dump .*d.h5: no space left on device "
                                         r"\(the partial dump was removed\)"):
        capture("digits-mlp", tmp_path / "d.h5", steps=5, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_stdout_sink_finishes_short_writes_and_counts_bytes():
    from co3cli.dump.output import CountingWriter

    class Pipe:  # takes at most 1000 bytes per call, like a full pipe
        def __init__(self):
            self.buf = bytearray()

        def write(self, data):
            self.buf += bytes(data[:1000])
            return min(len(data), 1000)

        def flush(self):
            pass

    pipe = Pipe()
    sink = CountingWriter(pipe)
    data = bytes(range(256)) * 40
    assert sink.write(data) == len(data) and sink.nbytes == len(data) and pipe.buf == data


def _frozen_job(seed=0):
    """A job whose first layer is frozen (requires_grad=False): it is absent from the dump."""
    job = _job()
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 5), torch.nn.ReLU(),
                                torch.nn.Linear(5, 3))
    model[1].requires_grad_(False)
    job["model"] = model
    return job


def test_entry_frozen_layer_is_absent_not_zeros(tmp_path):
    seen = {}

    def hook(step, model, loss):
        seen[step] = model[3].weight.grad.detach().clone().numpy().reshape(-1)

    out = tmp_path / "f.h5"
    s = capture_entry(_frozen_job, out, steps=4, every=2, progress=False, on_step=hook)
    assert s.layers == ("3.weight", "3.bias") and s.steps_recorded == 2
    assert s.entries_per_step == 5 * 3 + 3
    with Dump.open(out) as d:
        assert d.layers == ["3.weight", "3.bias"] and "1.weight" not in d.h5["grads"]
        assert set(json.loads(d.attrs["absent"])) == {"1.weight", "1.bias"}
        assert d.steps.tolist() == [0, 2]
        for row, step in enumerate((0, 2)):
            np.testing.assert_array_equal(d.read_layer("3.weight")[row], seen[step])
        assert d.attrs["steps_trained"] == 4 and d.attrs["nonfinite_steps"] == 0
        assert np.isfinite(d.attrs["final_loss"]) and np.isnan(d.attrs["test_accuracy"])
        assert d.attrs["reduction"] == "per-step" and d.attrs["task"].startswith("entry:")
    # selecting only frozen parameters is an error naming them, and leaves no file
    with pytest.raises(InputError, match=r"selects no trainable parameter \(all frozen: 1.weight"):
        capture_entry(_frozen_job, tmp_path / "g.h5", steps=1, layers="1.*", progress=False)
    assert not (tmp_path / "g.h5").exists()


def test_entry_trainable_parameter_without_gradient_is_an_error_not_zeros(tmp_path):
    class Unused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.used = torch.nn.Linear(4, 3)
            self.spare = torch.nn.Linear(4, 3)  # trainable, never in the forward pass

        def forward(self, x):
            return self.used(x.flatten(1))

    def make():
        torch.manual_seed(0)
        return _job(model=Unused())

    with pytest.raises(InputError, match=r"step 0: parameter 'spare.weight' has no gradient "
                                         r"\(.grad is None\)"):
        capture_entry(make, tmp_path / "u.h5", steps=2, progress=False)
    assert list(tmp_path.iterdir()) == []
    s = capture_entry(make, tmp_path / "v.h5", steps=2, layers="used.*", progress=False)
    assert s.layers == ("used.weight", "used.bias") and s.steps_recorded == 2


def test_epoch_average_every_records_the_selected_epochs(tmp_path):
    s = capture_entry(lambda: _job(), tmp_path / "e.h5", epochs=5, every=2, epoch_average=True,
                      progress=False)
    assert s.steps_trained == 15 and s.steps_recorded == 3
    with Dump.open(tmp_path / "e.h5") as d:
        assert d.steps.tolist() == [0, 2, 4] and d.attrs["reduction"] == "epoch-mean"
        assert d.attrs["epochs_trained"] == 5


def test_record_policy_counts_nonfinite_steps_and_gzip_keeps_the_values(tmp_path):
    kw = dict(steps=4, lr=1e30, on_nonfinite="record", progress=False)
    s = capture("digits-mlp", tmp_path / "r.h5", **kw)
    assert s.nonfinite_steps == 3 and s.steps_recorded == 4
    plain = tmp_path / "p.h5"
    gz = tmp_path / "z.h5"
    capture("digits-mlp", plain, steps=4, progress=False)
    capture("digits-mlp", gz, steps=4, progress=False, compression="gzip")
    with Dump.open(plain) as a, Dump.open(gz) as b:
        assert b.h5["grads"]["fc1.weight"].compression == "gzip"
        assert a.layers == b.layers and a.attrs["final_loss"] == b.attrs["final_loss"]
        for name in a.layers:
            np.testing.assert_array_equal(a.read_layer(name), b.read_layer(name))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.h5", "r.h5", "z.h5"]
