"""GradientRecorder: faithful values, selection, policies, crash safety, streams, averages."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from co3cli import GradientRecorder, InputError  # noqa: E402
from co3cli.dump import Dump, StepWriter  # noqa: E402


class Tied(torch.nn.Module):
    """fc1 - relu - fc2 - head, with head.weight tied to emb.weight and a frozen layer."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Linear(6, 5, bias=False)
        self.frozen = torch.nn.Linear(6, 6)
        self.frozen.requires_grad_(False)
        self.fc1 = torch.nn.Linear(6, 6)
        self.head = torch.nn.Linear(6, 5, bias=False)
        self.head.weight = self.emb.weight  # tied (shape (5, 6))

    def forward(self, x):
        h = torch.relu(self.fc1(self.frozen(x)))
        return self.head(h) + self.emb(x)


def mlp(seed=0, width=16):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Linear(width, 3)
    )


def train(model, rec, n, seed=1, extra=None):
    """Run n SGD steps; return {step: {name: grad copy}} for the steps rec.step recorded."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
    copies = {}
    for i in range(n):
        x = torch.randn(4, model_in(model), generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        kwargs = extra(i, grads) if extra else {}
        if rec.step(loss=loss, **kwargs):
            copies[i] = grads
        opt.step()
    return copies


def model_in(model):
    return 6 if isinstance(model, Tied) else 8


def read_all(path):
    with Dump.open(path) as d:
        return d.steps, {n: d.read_layer(n) for n in d.layers}, d


# -- faithfulness --------------------------------------------------------------------------------
def test_faithful_tied_and_frozen(tmp_path):
    model = Tied()
    path = tmp_path / "d.h5"
    with GradientRecorder(model, path, every=3, attrs={"run": "t"}) as rec:
        copies = train(model, rec, 10)
        assert rec.layers == ["emb.weight", "fc1.weight", "fc1.bias"]
        assert rec.steps_recorded == 4 and rec.bytes_written > 0
    steps, layers, d = read_all(path)
    assert steps.tolist() == [0, 3, 6, 9] == sorted(copies)
    assert d.attrs["reduction"] == "per-step" and d.attrs["run"] == "t"
    assert json.loads(d.attrs["aliases"]) == {"head.weight": "emb.weight"}
    assert json.loads(d.attrs["absent"]) == {
        "frozen.weight": "frozen (requires_grad=False)",
        "frozen.bias": "frozen (requires_grad=False)",
    }
    assert "streams" not in d.attrs and d.streams is None
    assert sorted(layers) == ["emb.weight", "fc1.bias", "fc1.weight"]
    for name, g in layers.items():
        ref = np.stack([copies[s][name].reshape(-1).numpy() for s in steps])
        assert np.array_equal(g, ref), name
    assert d.shape("emb.weight") == (5, 6)


@pytest.mark.parametrize(
    "kw, steps, names",
    [
        (dict(every=4), [0, 4, 8], ["0.weight", "0.bias", "2.weight", "2.bias"]),
        (dict(steps=[1, 5, 100]), [1, 5], ["0.weight", "0.bias", "2.weight", "2.bias"]),
        (dict(layers="*.weight"), list(range(10)), ["0.weight", "2.weight"]),
        (dict(layers="2.*, 0.bias"), list(range(10)), ["0.bias", "2.weight", "2.bias"]),
        (dict(layers=r"re:\d\.b.*"), list(range(10)), ["0.bias", "2.bias"]),
    ],
)
def test_selection(tmp_path, kw, steps, names):
    model = mlp()
    with GradientRecorder(model, tmp_path / "d.h5", **kw) as rec:
        copies = train(model, rec, 10)
    got_steps, layers, _ = read_all(tmp_path / "d.h5")
    assert got_steps.tolist() == steps and list(layers) == names
    for name, g in layers.items():
        assert np.array_equal(g, np.stack([copies[s][name].reshape(-1).numpy() for s in steps]))


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(every=0), "every=0"),
        (dict(every=2, steps=[1]), "not both"),
        (dict(steps=[-1]), "steps="),
        (dict(layers="nope*"), "selects no trainable parameter"),
        (dict(layers="re:("), "regular expression"),
        (dict(dtype="int8"), "dtype='int8'"),
        (dict(on_nonfinite="zero"), "on_nonfinite='zero'"),
        (dict(on_missing="zero"), "on_missing='zero'"),
        (dict(streams=("raw", "raw")), "streams="),
        (dict(attrs={"layers": "x"}), "reserved"),
        (dict(optimizer=object()), "param_groups"),
    ],
)
def test_bad_arguments(tmp_path, kw, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace("[", r"\[")):
        GradientRecorder(mlp(), tmp_path / "d.h5", **kw)
    assert not (tmp_path / "d.h5").exists()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_low_precision_round_trip(tmp_path, dtype):
    model = mlp(width=1100)  # 0.weight: one row per chunk (written as raw chunks)
    with GradientRecorder(model, tmp_path / "d.h5", dtype=dtype) as rec:
        copies = train(model, rec, 3)
    import h5py

    with h5py.File(tmp_path / "d.h5") as f:
        ds = f["grads/0.weight"]
        assert ds.attrs["dtype"] == dtype
        assert ds.dtype == {"float32": np.float32, "float16": np.float16}.get(dtype, np.uint16)
        assert ds.chunks == (1, 8800)
    steps, layers, _ = read_all(tmp_path / "d.h5")
    tdtype = getattr(torch, dtype)
    for name, g in layers.items():
        assert g.dtype == np.float32
        ref = np.stack([copies[s][name].to(tdtype).float().reshape(-1).numpy() for s in steps])
        assert np.array_equal(g, ref)


def test_lr_from_optimizer_and_explicit(tmp_path):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.25)
    with GradientRecorder(model, tmp_path / "a.h5", optimizer=opt) as rec:
        for i in range(3):
            model(torch.ones(2, 8)).sum().backward()
            rec.step(loss=float(i))
            opt.param_groups[0]["lr"] /= 2
    with Dump.open(tmp_path / "a.h5") as d:
        assert d.lr.tolist() == [0.25, 0.125, 0.0625] and d.loss.tolist() == [0, 1, 2]
        assert d.attrs["optimizer"] == "SGD"
    with GradientRecorder(model, tmp_path / "b.h5") as rec:
        rec.step(lr=0.5)
        with pytest.raises(InputError, match="give lr on every recorded step"):
            rec.step()


# -- policies ------------------------------------------------------------------------------------
@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("policy", ["error", "skip", "record"])
def test_nonfinite_policies(tmp_path, policy, background):
    model = mlp()
    path = tmp_path / "d.h5"
    rec = GradientRecorder(model, path, on_nonfinite=policy, background=background)
    written = []
    with rec:
        for i in range(4):
            model.zero_grad()
            model(torch.ones(2, 8) * i).sum().backward()
            if i == 2:
                model[2].bias.grad[1] = float("inf")
            if policy == "error" and i == 2:
                match = r"step 2: gradient of layer '2.bias'.*NaN/Inf"
                with pytest.raises(InputError, match=match):
                    rec.step()
                    rec.flush()  # the background writer reports it here (or at the next step)
                break
            if rec.step():
                written.append(i)
    nonfinite = "zero" if policy == "record" else "error"
    with Dump.open(path, nonfinite=nonfinite) as d:
        expected = {"error": [0, 1], "skip": [0, 1, 3], "record": [0, 1, 2, 3]}[policy]
        # step() returns whether it recorded (background: whether it handed the step over)
        assert d.steps.tolist() == expected == (written if not background else
                                                [i for i in written if i in expected])
        if background:
            assert written == ([0, 1] if policy == "error" else [0, 1, 2, 3])
        d.read_layer("2.bias")
        if policy == "record":
            assert d.nonfinite_counts["2.bias"] == 1
    assert rec.steps_skipped["nonfinite"] == (1 if policy == "skip" else 0)


def test_float16_overflow_is_nonfinite(tmp_path):
    model = mlp()
    with GradientRecorder(model, tmp_path / "d.h5", dtype="float16") as rec:
        model(torch.ones(2, 8)).sum().backward()
        model[0].weight.grad[0, 0] = 1e6
        with pytest.raises(InputError, match="float16 overflows"):
            rec.step()
            rec.flush()
    assert not (tmp_path / "d.h5").exists()  # nothing committed -> no file


@pytest.mark.parametrize("policy", ["error", "skip"])
def test_missing_grad(tmp_path, policy):
    model = mlp()
    path = tmp_path / "d.h5"
    with GradientRecorder(model, path, on_missing=policy) as rec:
        model(torch.ones(2, 8)).sum().backward()
        assert rec.step()
        model[2].bias.grad = None
        if policy == "error":
            with pytest.raises(InputError, match=r"step 1: parameter '2.bias' has no gradient"):
                rec.step()
        else:
            assert not rec.step() and rec.steps_skipped["missing"] == 1
    with Dump.open(path) as d:
        assert d.steps.tolist() == [0]  # never a row of zeros


# -- streams ---------------------------------------------------------------------------------------
def test_streams(tmp_path):
    model = mlp()
    path = tmp_path / "d.h5"

    def decoded(i, grads):
        return {"streams": {"decoded": {n: g.sign() for n, g in grads.items()}}}

    with GradientRecorder(model, path, every=2, streams=("raw", "decoded")) as rec:
        copies = train(model, rec, 5, extra=decoded)
        with pytest.raises(InputError, match="not given"):
            rec.step(step=6)
        with pytest.raises(InputError, match="'raw' is p.grad"):
            rec.step(step=8, streams={"raw": {}, "decoded": {}})
    with Dump.open(path) as d:
        assert d.streams == ["raw", "decoded"]
        assert d.layers[:2] == ["raw/0.weight", "raw/0.bias"] and len(d.layers) == 8
        for s in (0, 2, 4):
            row = list(d.steps).index(s)
            g = copies[s]["2.weight"].reshape(-1).numpy()
            assert np.array_equal(d.read_layer("raw/2.weight")[row], g)
            assert np.array_equal(d.read_layer("decoded/2.weight")[row], np.sign(g))


# -- epoch average -------------------------------------------------------------------------------
def test_epoch_average(tmp_path):
    model = mlp()
    path = tmp_path / "d.h5"
    with GradientRecorder(model, path, average=True, layers="*.weight") as rec:
        epochs = []
        with pytest.raises(InputError, match="no step was accumulated"):
            rec.end_epoch()
        for e, seed in enumerate((10, 11)):
            epochs.append(train(model, rec, 3 + e, seed=seed))
            assert rec.end_epoch(lr=0.05) == 3 + e
        with pytest.raises(InputError, match="average=True"):
            GradientRecorder(mlp(), tmp_path / "x.h5").end_epoch()
    with Dump.open(path) as d:
        assert d.attrs["reduction"] == "epoch-mean" and d.steps.tolist() == [0, 1]
        assert d.lr.tolist() == pytest.approx([0.05, 0.05])
        for name in d.layers:
            g = d.read_layer(name)
            for e, copies in enumerate(epochs):
                stack = np.stack([c[name].double().reshape(-1).numpy() for c in copies.values()])
                np.testing.assert_array_equal(g[e], stack.mean(axis=0).astype(np.float32))


# -- resume and crashes ---------------------------------------------------------------------------
def test_resume_matching_and_mismatching(tmp_path):
    model = mlp()
    path = tmp_path / "d.h5"
    with GradientRecorder(model, path) as rec:
        first = train(model, rec, 3)
    with GradientRecorder(model, path, resume=True) as rec:
        assert rec.steps_recorded == 3
        second = train(model, rec, 2, seed=5)
    steps, layers, _ = read_all(path)
    assert steps.tolist() == [0, 1, 2, 3, 4]
    ref = [first[i] for i in range(3)] + [second[i] for i in range(2)]
    assert np.array_equal(layers["0.bias"], np.stack([r["0.bias"].numpy() for r in ref]))
    for kw, message in [
        (dict(layers="*.weight"), "layers differ"),
        (dict(dtype="float16"), "stored as float32"),
        (dict(streams=("raw", "q")), "streams"),
        (dict(average=True), "reduction"),
    ]:
        with pytest.raises(InputError, match=message):
            GradientRecorder(model, path, resume=True, **kw)
    other = torch.nn.Sequential(torch.nn.Linear(8, 15), torch.nn.ReLU(), torch.nn.Linear(15, 3))
    with pytest.raises(InputError, match=r"layer '0.weight' has shape \(16, 8\) in the file"):
        GradientRecorder(other, path, resume=True)
    assert read_all(path)[0].tolist() == [0, 1, 2, 3, 4]  # untouched by the failed resumes


def test_resume_refuses_a_dump_written_whole(tmp_path):
    from co3cli.dump import write_dump

    path = tmp_path / "whole.h5"
    write_dump(path, {"a": (np.ones((2, 3), np.float32), (3,))}, steps=[0, 1])
    with pytest.raises(InputError, match="cannot be appended to"):
        StepWriter(path, {"a": (3,)}, resume=True)
    assert read_all(path)[0].tolist() == [0, 1]


def test_reader_accepts_extra_uncommitted_rows(tmp_path):
    import h5py

    path = tmp_path / "d.h5"
    w = StepWriter(path, {"a": (3,)})
    for s in range(2):
        w.write(s, {"a": np.full(3, s, np.float32)}, loss=float(s))
    w.h5["grads/a"][2] = 7.0  # a step being written when the process died
    w.h5.flush()
    w.h5.close()  # no trim: simulates the crash
    with h5py.File(path) as f:
        assert f["grads/a"].shape[0] > 2 and f["steps"].shape == (2,)
    with Dump.open(path) as d:
        assert d.read_layer("a").tolist() == [[0, 0, 0], [1, 1, 1]]
        assert d.loss.tolist() == [0, 1]
    w2 = StepWriter(path, {"a": (3,)}, resume=True)  # resume truncates the uncommitted rows
    assert w2.h5["grads/a"].shape[0] == 2 and w2.nrows == 2
    w2.close()
    with h5py.File(path, "r+") as f:
        f["steps"].resize(3, axis=0)  # fewer rows than steps stays an error
        del f["loss"]
    with pytest.raises(InputError, match="has 2 rows but 'steps' has 3"):
        Dump.open(path)


CHILD = textwrap.dedent(
    """
    import sys, torch
    torch.set_num_threads(1)

    def run(on_step, n):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(1)
        for i in range(n):
            x = torch.randn(32, 256, generator=gen)
            loss = model(x).pow(2).mean()
            opt.zero_grad(); loss.backward()
            if on_step(i, model, loss) is False:
                return
            opt.step()

    if __name__ == "__main__":
        from co3cli import GradientRecorder
        rec = None
        def on_step(i, model, loss):
            global rec
            if rec is None:
                rec = GradientRecorder(model, sys.argv[1], every=2)
            rec.step(loss=loss)
            print(i, flush=True)
        run(on_step, 10**6)
    """
)


def test_killed_run_leaves_valid_dump(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    path = tmp_path / "killed.h5"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE,
                            env=env, text=True)
    try:
        for line in proc.stdout:
            if int(line) >= 40:
                break
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    with Dump.open(path) as d:
        steps = d.steps
        # step 40 was handed over: steps 0..36 are committed for sure (the background writer
        # commits step 38 with step 40's job, a borrowed step only after it is checked)
        assert len(steps) >= 19 and steps.tolist() == list(range(0, 2 * len(steps), 2))
        layers = {n: d.read_layer(n) for n in d.layers}
    expected = {}
    ns = {}
    exec(compile(CHILD, "child", "exec"), ns)  # same code, same seed: the same gradients

    def on_step(i, model, loss):
        if i % 2 == 0:
            expected[i] = {
                n: p.grad.reshape(-1).clone().numpy() for n, p in model.named_parameters()
            }
        return i < steps[-1]

    ns["run"](on_step, int(steps[-1]) + 1)
    for name, g in layers.items():
        assert np.array_equal(g, np.stack([expected[int(s)][name] for s in steps])), name


def test_unwritable_output(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        GradientRecorder(mlp(), tmp_path / "no" / "d.h5")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="cannot write dump"):
        GradientRecorder(mlp(), tmp_path / "file" / "d.h5")
    with pytest.raises(InputError, match="is a directory"):
        GradientRecorder(mlp(), tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores permissions")
def test_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(InputError, match="cannot write dump"):
            GradientRecorder(mlp(), ro / "d.h5")
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("fail_at", [0, 2])
def test_disk_full(tmp_path, monkeypatch, fail_at):
    model = mlp()
    path = tmp_path / "d.h5"
    calls = {"n": 0}
    real = StepWriter._write_row

    def write_row(self, key, row, value):
        if row == fail_at:
            raise OSError(28, "No space left on device")
        calls["n"] += 1
        return real(self, key, row, value)

    monkeypatch.setattr(StepWriter, "_write_row", write_row)
    with pytest.raises(InputError, match="No space left on device"):
        with GradientRecorder(model, path) as rec:
            train(model, rec, 5)
    if fail_at == 0:
        assert not path.exists()
    else:
        with Dump.open(path) as d:
            assert d.steps.tolist() == [0, 1]
    assert rec.closed


def test_exception_in_loop_keeps_committed_steps(tmp_path):
    model = mlp()
    path = tmp_path / "d.h5"
    with pytest.raises(RuntimeError, match="boom"):
        with GradientRecorder(model, path) as rec:
            train(model, rec, 3)
            raise RuntimeError("boom")
    assert read_all(path)[0].tolist() == [0, 1, 2]


def test_works_with_compress(tmp_path):
    from co3cli.codec import compress, decompress

    model = mlp()
    path = tmp_path / "d.h5"
    with GradientRecorder(model, path, streams=("raw", "decoded")) as rec:
        train(model, rec, 3, extra=lambda i, g: {"streams": {"decoded": g}})
    compress(path, tmp_path / "g.co3")
    decompress(tmp_path / "g.co3", tmp_path / "back.h5")
    with Dump.open(path) as a, Dump.open(tmp_path / "back.h5") as b:
        assert a.layers == b.layers and a.steps.tolist() == b.steps.tolist()
        for name in a.layers:
            x, y = a.read_layer(name), b.read_layer(name)
            assert np.allclose(x, y, rtol=0.2, atol=1e-3 * np.abs(x).max() + 1e-12)


def test_lazy_export():
    code = "import sys, co3cli; assert 'torch' not in sys.modules; assert 'h5py' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the background writer ---------------------------------------------------------------------
def _loop(model, rec, n, *, set_to_none=True, accumulate=1, after_step=None, copies=None):
    """SGD with zero_grad(set_to_none) every `accumulate` backward passes; returns grad copies."""
    gen = torch.Generator().manual_seed(3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    copies = {} if copies is None else copies
    for i in range(n):
        if i % accumulate == 0:
            opt.zero_grad(set_to_none=set_to_none)
        model(torch.randn(4, 8, generator=gen)).pow(2).mean().backward()
        copies[i] = {name: p.grad.clone().reshape(-1) for name, p in model.named_parameters()}
        rec.step()
        if after_step is not None:
            after_step(model)
        if (i + 1) % accumulate == 0:
            opt.step()
    return copies


@pytest.mark.parametrize("set_to_none,accumulate", [(True, 1), (False, 1), (True, 3), (False, 2)])
def test_background_writer_records_exactly_what_backward_produced(tmp_path, set_to_none,
                                                                  accumulate):
    # set_to_none=True hands .grad over without a copy (nothing writes to it again);
    # reused .grad tensors (set_to_none=False, accumulation) are copied, so in-place
    # zeroing or accumulation after rec.step() cannot reach the recorded values
    model = mlp()
    with GradientRecorder(model, tmp_path / "d.h5") as rec:
        copies = _loop(model, rec, 12, set_to_none=set_to_none, accumulate=accumulate)
        borrowed = len(rec._bg.copied_keys) == 0
    assert borrowed == (set_to_none and accumulate == 1)
    with Dump.open(tmp_path / "d.h5") as d:
        assert d.steps.tolist() == list(range(12))
        for name in d.layers:
            want = np.stack([copies[i][name].numpy() for i in range(12)])
            assert np.array_equal(d.read_layer(name), want), name


def test_background_writer_refuses_a_gradient_modified_after_the_step(tmp_path):
    model = mlp()
    path = tmp_path / "d.h5"
    clip = lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-3)  # noqa: E731
    with pytest.raises(InputError, match=r"step \d+: p.grad of layer '.*' was modified in place "
                                         r"after rec.step\(\).*background=False"):
        copies = {}
        with GradientRecorder(model, path) as rec:
            _loop(model, rec, 6, after_step=clip, copies=copies)
    with Dump.open(path) as d:  # the steps before it are committed and exact
        assert 1 <= d.nsteps < 6
        for s in d.steps.tolist():
            for name in d.layers:
                assert np.array_equal(d.read_layer(name)[s], copies[s][name].numpy())
    # without the background writer, recording happens before the clip: no error
    with GradientRecorder(model, tmp_path / "sync.h5", background=False) as rec:
        _loop(model, rec, 6, after_step=clip)
    with Dump.open(tmp_path / "sync.h5") as d:
        assert d.nsteps == 6


def test_background_writer_errors_and_flush(tmp_path):
    model = mlp()
    with GradientRecorder(model, tmp_path / "d.h5") as rec:
        _loop(model, rec, 3)
        rec.flush()
        assert rec.steps_recorded == 3
    with pytest.raises(InputError, match="background='yes' must be True or False"):
        GradientRecorder(model, tmp_path / "e.h5", background="yes")
    with pytest.raises(InputError, match="is closed"):
        rec.flush()


def test_background_writer_io_error_reaches_flush_and_close(tmp_path, monkeypatch):
    import errno

    real = StepWriter._write_row
    calls = []

    def full(self, key, row, value):
        calls.append(row)
        if row >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, key, row, value)

    monkeypatch.setattr(StepWriter, "_write_row", full)
    model = mlp()
    path = tmp_path / "d.h5"
    rec = GradientRecorder(model, path)
    _loop(model, rec, 3)  # step 2's rows fail on the writer thread
    with pytest.raises(InputError, match="No space left on device"):
        rec.flush()
    rec.close()  # already reported; closing again is quiet
    with Dump.open(path) as d:
        assert d.steps.tolist() == [0, 1]
    rec2 = GradientRecorder(model, tmp_path / "e.h5")
    calls.clear()
    with pytest.raises(InputError, match="No space left on device"):
        with rec2:
            _loop(model, rec2, 3)  # the error surfaces when the with-block closes


def test_background_writer_keeps_the_checked_step_when_the_next_one_is_refused(tmp_path):
    model = mlp()
    path = tmp_path / "d.h5"
    with GradientRecorder(model, path) as rec:
        for i in range(4):
            model.zero_grad()
            model(torch.ones(2, 8) * i).sum().backward()
            if i < 3:
                rec.step(loss=float(i))
            else:
                with pytest.raises(InputError, match="give loss on every recorded step"):
                    rec.step()
    with Dump.open(path) as d:
        assert d.steps.tolist() == [0, 1, 2]
