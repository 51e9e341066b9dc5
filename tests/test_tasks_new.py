"""The realistic built-in tasks: a character transformer on stdlib sources, ResNets with BN."""

import json
import platform

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from co3cli.errors import InputError  # noqa: E402
from co3cli.simulate.fl import run_fl  # noqa: E402
from co3cli.simulate.flconfig import FLConfig  # noqa: E402
from co3cli.tasks import TASKS, build_model, evaluate, load_task_data  # noqa: E402
from co3cli.tasks.text import STDLIB_MODULES, stdlib_corpus  # noqa: E402


def nparams(task):
    return sum(p.numel() for p in build_model(task, 0).parameters())


def test_registered_with_their_sizes():
    for t in ("stdlib-charlm", "stdlib-charlm-tiny", "mnist5k-resnet", "mnist5k-resnet-large",
              "digits-resnet-tiny"):
        assert t in TASKS.ids()
    assert 2e6 <= nparams("stdlib-charlm") <= 5e6
    assert 1e6 <= nparams("mnist5k-resnet") <= 3e6
    assert nparams("mnist5k-resnet-large") > 3e6
    assert nparams("stdlib-charlm-tiny") < 5e4 and nparams("digits-resnet-tiny") < 1e4


def test_corpus_provenance_and_windows():
    text, prov = stdlib_corpus()
    assert prov["python"] == platform.python_version() and prov["modules"] == list(STDLIB_MODULES)
    assert prov["chars"] == len(text) > 500_000 and len(prov["sha256"]) == 64
    assert max(text) < 128 and b"def " in text
    train, test = load_task_data("stdlib-charlm", 0.2, 0)
    assert train.x.shape[1:] == (64,) and train.y.shape == train.x.shape
    assert torch.equal(train.x[:, 1:], train.y[:, :-1])  # y is x shifted by one character
    tiny, _ = stdlib_corpus(200_000)
    assert tiny == text[:200_000]


def _grads(task, n=16, seed=0):
    train, _ = load_task_data(task, 0.2, 0)
    model = build_model(task, seed)
    x, y = train.x[:n], train.y[:n]
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return model, x, {k: p.grad for k, p in model.named_parameters()}


def test_charlm_gradients_zero_only_in_the_rows_of_unseen_tokens():
    model, x, g = _grads("stdlib-charlm", n=8)
    seen = torch.zeros(128, dtype=torch.bool)
    seen[x.unique()] = True
    rows_zero = (g["embed.weight"] == 0).all(dim=1)
    assert torch.equal(rows_zero, ~seen) and (~seen).sum() > 20  # exactly the unseen tokens
    for name, grad in g.items():
        if name != "embed.weight" and grad.ndim == 2:
            assert not (grad == 0).all(dim=1).any(), name  # GELU, LayerNorm: no dead rows
    assert any("ln" in k for k in g)  # normalisation layers


def test_resnet_gradients_have_no_zero_rows_and_batch_norm():
    model, _, g = _grads("mnist5k-resnet", n=16)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    for name, grad in g.items():
        if grad.ndim >= 2:
            assert not (grad.reshape(len(grad), -1) == 0).all(dim=1).any(), name


def test_sequence_accuracy_counts_characters():
    train, test = load_task_data("stdlib-charlm-tiny", 0.2, 0)
    model = build_model("stdlib-charlm-tiny", 0)
    loss, acc = evaluate(model, test.x, test.y)
    out = model(test.x[:50]).detach()
    assert 0.0 <= acc <= 1.0 and abs(loss - np.log(128)) < 1.0
    assert float((out.argmax(1) == test.y[:50]).float().mean()) == pytest.approx(
        evaluate(model, test.x[:50], test.y[:50])[1])


@pytest.mark.parametrize("task", ["stdlib-charlm-tiny", "digits-resnet-tiny"])
def test_three_round_fl_runs_on_the_tiny_presets(tmp_path, task):
    cfg = FLConfig(task=task, clients=3, rounds=3, batch_size=16, eval_every=3,
                   compressor="co3", compressor_params={"format": "fp4-co3"}, gamma=0.7,
                   lr=0.5 if "charlm" in task else 0.1, dump_rounds=(2,))
    res = run_fl(cfg, tmp_path / "r")
    assert res.rounds_done == 3 and 0.0 < res.final_accuracy <= 1.0
    doc = json.loads((tmp_path / "r" / "config.json").read_text())
    if "charlm" in task:
        assert doc["task"]["provenance"]["sha256"] == stdlib_corpus(200_000)[1]["sha256"]
        assert doc["buffers"] == {}
    else:
        assert "bn1.running_var" in doc["buffers"]


def test_sequence_tasks_refuse_label_partitions(tmp_path):
    cfg = FLConfig(task="stdlib-charlm-tiny", clients=3, rounds=1, partition="dirichlet")
    with pytest.raises(InputError, match="needs one class label per example"):
        run_fl(cfg, tmp_path / "r")


def test_capture_trains_the_new_tasks(tmp_path):
    from co3cli.capture import capture
    from co3cli.dump import Dump

    s = capture("stdlib-charlm-tiny", tmp_path / "lm.h5", steps=3, batch_size=8, progress=False)
    assert 0.0 <= s.test_accuracy <= 1.0
    with Dump.open(tmp_path / "lm.h5") as d:
        emb = d.read_layer("embed.weight")
        assert emb.shape[0] == 3 and (emb.reshape(3, 128, -1) == 0).all(axis=2).any()
