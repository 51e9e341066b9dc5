"""Coded back-propagation (co3cli.simulate.uep.train): exactness without stragglers, losses
with a tiny deadline, the straggler clock, determinism and bad configurations."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from co3cli.tasks import build_model, load_task_data  # noqa: E402
from co3cli.errors import InputError  # noqa: E402
from co3cli.simulate.uep.train import (  # noqa: E402
    CSV_COLUMNS, CodedBackprop, StragglerConfig, train_coded)

torch.set_num_threads(1)

UEP = dict(workers=15, windows=(0.45, 0.35, 0.20))


def _batch(task: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    train, _ = load_task_data(task, 0.2, 0)
    return train.x[:n], train.y[:n]


def _grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    return {k: p.grad.clone() for k, p in model.named_parameters()}


def _coded_grads(task: str, cfg: StragglerConfig, x, y, **kw) -> tuple[dict, dict, dict]:
    model = build_model(task, 0)
    exact = _grads(model, x, y)
    with CodedBackprop(cfg, **kw).attach(model) as cb:
        coded = _grads(model, x, y)
        stats = cb.step_stats()
    return exact, coded, stats


def _assert_close(exact: dict, coded: dict) -> None:
    assert exact.keys() == coded.keys()
    for k in exact:
        assert coded[k].shape == exact[k].shape and coded[k].dtype == exact[k].dtype, k
        torch.testing.assert_close(coded[k], exact[k], rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.parametrize("scheme,params", [
    ("uncoded", {}), ("repetition", {}), ("mds", {"workers": 15}), ("eep", {"workers": 15}),
    ("mds", {"workers": 15, "partition": "contiguous"}),
    ("uncoded", {"sort_by": "l2"}), ("mds", {"workers": 15, "mode": "cxr", "blocks": 9}),
])
def test_exact_gradients_mlp_without_stragglers(scheme, params):
    x, y = _batch("digits-mlp", 32)
    exact, coded, st = _coded_grads("digits-mlp", StragglerConfig(scheme, **params), x, y)
    _assert_close(exact, coded)
    # fc1: grad_W only (the input needs no gradient); fc2: grad_input and grad_W
    assert st["products"] == 3
    assert st["recovered_fraction"] == 1.0 and np.all(st["class_decoded"] == 1.0)


@pytest.mark.parametrize("task,n", [("digits-cnn", 16), ("mnist5k-cnn", 8)])
def test_exact_gradients_cnn_dense_layers(task, n):
    x, y = _batch(task, n)
    exact, coded, st = _coded_grads(task, StragglerConfig("mds", workers=12), x, y)
    _assert_close(exact, coded)  # conv grads too: they flow through the coded grad_input
    n_linear = sum(isinstance(m, nn.Linear) for m in build_model(task, 0).modules())
    assert st["products"] == 2 * n_linear


def test_leading_dims_are_flattened():
    lin = nn.Sequential(nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 3))
    x = torch.randn(2, 4, 3, 7, generator=torch.Generator().manual_seed(1), requires_grad=True)

    def run():
        lin.zero_grad(set_to_none=True)
        x.grad = None
        lin(x).square().sum().backward()
        return [x.grad.clone()] + [p.grad.clone() for p in lin.parameters()]

    exact = run()
    with CodedBackprop(StragglerConfig("uncoded")).attach(lin):
        coded = run()
    for e, c in zip(exact, coded):
        assert c.shape == e.shape and c.dtype == e.dtype
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6)


def test_tiny_deadline_loses_classes_same_shapes():
    x, y = _batch("digits-mlp", 32)
    cfg = StragglerConfig("ew-uep", deadline=0.05, seed=3, **UEP)
    exact, coded, st = _coded_grads("digits-mlp", cfg, x, y, exact_error=True)
    for k in exact:
        assert coded[k].shape == exact[k].shape and coded[k].dtype == exact[k].dtype
        assert torch.isfinite(coded[k]).all()
    w = [k for k in exact if k.endswith("weight")]
    assert any(not torch.allclose(coded[k], exact[k]) for k in w)
    assert st["recovered_fraction"] < 1.0 and st["class_decoded"][-1] < 1.0
    assert st["rel_error"] is not None and st["rel_error"] > 0
    # biases are exact only for the last layer (earlier ones get the coded grad_input)
    torch.testing.assert_close(coded["fc2.bias"], exact["fc2.bias"])


def test_exact_error_zero_without_stragglers():
    x, y = _batch("digits-mlp", 16)
    _, _, st = _coded_grads("digits-mlp", StragglerConfig("uncoded"), x, y, exact_error=True)
    assert st["rel_error"] == pytest.approx(0.0, abs=1e-20)


def test_straggler_time_deadline_accounting():
    x, y = _batch("digits-mlp", 16)
    T = 1e-3  # with 9 workers, P(all arrive by T) ~ 1e-27: the server stops at T every time
    _, _, st = _coded_grads("digits-mlp", StragglerConfig("uncoded", deadline=T), x, y)
    assert st["products"] == 3
    assert st["straggler_s"] == pytest.approx(3 * T, rel=1e-12)


def test_straggler_time_wait_for_and_wait_all():
    x, y = _batch("digits-mlp", 16)
    seeds = np.random.default_rng(7)
    expect_3, expect_all = 0.0, 0.0
    for _ in range(3):  # uncoded: the generator draws nothing, so the latencies come first
        t = np.sort(np.random.default_rng(int(seeds.integers(0, 2**63 - 1))).exponential(1.0, 9))
        expect_3 += t[2]
        expect_all += t[-1]
    _, _, st = _coded_grads("digits-mlp", StragglerConfig("uncoded", wait_for=3, seed=7), x, y)
    assert st["straggler_s"] == pytest.approx(expect_3, rel=1e-12)
    _, _, st = _coded_grads("digits-mlp", StragglerConfig("uncoded", seed=7), x, y)
    assert st["straggler_s"] == pytest.approx(expect_all, rel=1e-12)


def test_step_stats_reset():
    x, y = _batch("digits-mlp", 8)
    model = build_model("digits-mlp", 0)
    with CodedBackprop(StragglerConfig("uncoded")).attach(model) as cb:
        _grads(model, x, y)
        assert cb.step_stats()["products"] == 3
        st = cb.step_stats()
    assert st["products"] == 0 and st["straggler_s"] == 0.0


def test_attach_detach():
    model = build_model("digits-mlp", 0)
    cb = CodedBackprop(StragglerConfig("uncoded"))
    cb.attach(model)
    assert cb.attached == 2
    with pytest.raises(InputError, match="already attached"):
        cb.attach(model)
    with pytest.raises(InputError, match="overridden forward"):
        CodedBackprop(StragglerConfig("uncoded")).attach(model)
    cb.detach()
    assert cb.attached == 0
    assert all("forward" not in vars(m) for m in model.modules())
    x, y = _batch("digits-mlp", 8)
    _grads(model, x, y)
    assert cb.step_stats()["products"] == 0  # detached: plain autograd
    with pytest.raises(InputError, match="no nn.Linear"):
        cb.attach(nn.Sequential(nn.ReLU()))


def test_train_deterministic_and_csv(tmp_path):
    cfg = StragglerConfig("ew-uep", deadline=0.5, seed=1, **UEP)
    kw = dict(steps=12, batch_size=32, eval_every=5, target_accuracy=0.05)
    a = train_coded("digits-mlp", cfg, out_csv=tmp_path / "a.csv", **kw)
    b = train_coded("digits-mlp", cfg, out_csv=tmp_path / "b.csv", **kw)
    rows_a = list(csv.DictReader(open(tmp_path / "a.csv")))
    rows_b = list(csv.DictReader(open(tmp_path / "b.csv")))
    assert tuple(rows_a[0]) == CSV_COLUMNS and len(rows_a) == 12
    for c in ("train_loss", "test_accuracy", "straggler_s", "recovered_fraction", "class_recovered"):
        assert [r[c] for r in rows_a] == [r[c] for r in rows_b], c
    assert [r["step"] for r in rows_a if r["test_accuracy"]] == ["4", "9", "11"]
    comp = np.array([float(r["compute_s"]) for r in rows_a])
    strag = np.array([float(r["straggler_s"]) for r in rows_a])
    np.testing.assert_allclose([float(r["sim_time"]) for r in rows_a], np.cumsum(comp + strag), rtol=1e-6)
    np.testing.assert_allclose(strag, 0.5 * 3)  # 3 products, 15 workers: never all by T=0.5
    assert a["final_accuracy"] == b["final_accuracy"] and a["final_loss"] == b["final_loss"]
    assert a["step_to_target"] == 4 and a["time_to_target"] == pytest.approx(a["evals"][0]["sim_time"])
    assert a["straggler_time_to_target"] == pytest.approx(5 * 1.5)
    assert len(a["class_recovered"]) == 3 and a["config"]["straggler"]["n_workers"] == 15
    c = train_coded("digits-mlp", StragglerConfig("ew-uep", deadline=0.5, seed=2, **UEP), **kw)
    assert c["final_loss"] != a["final_loss"]  # other straggler draws, other training


def test_train_exact_baseline_matches_uncoded_wait_all():
    kw = dict(steps=6, batch_size=32, eval_every=3, target_accuracy=0.99)
    ex = train_coded("digits-mlp", None, **kw)
    un = train_coded("digits-mlp", StragglerConfig("uncoded"), **kw)
    assert [e["test_accuracy"] for e in ex["evals"]] == [e["test_accuracy"] for e in un["evals"]]
    assert math.isclose(ex["final_loss"], un["final_loss"], rel_tol=1e-5)
    assert ex["total_straggler_time"] == 0.0 and un["total_straggler_time"] > 0
    assert ex["time_to_target"] is None and ex["class_recovered"] is None


@pytest.mark.parametrize("kw,match", [
    (dict(scheme="nope"), "scheme must be one of"),
    (dict(scheme="uncoded", workers=0), "workers=0 must be an integer >= 1"),
    (dict(scheme="uncoded", workers=10), "workers must be 9"),
    (dict(scheme="mds"), "workers \\(n\\) is required"),
    (dict(scheme="mds", workers=8), "must be >= the number of blocks"),
    (dict(scheme="uncoded", class_sizes=(1, 2, 5)), "sum to 8"),
    (dict(scheme="uncoded", class_sizes=(0, 9)),
     r"class_sizes=\(0, 9\) must be a non-empty list of integers >= 1"),
    (dict(scheme="uncoded", blocks=(3,)), "blocks must be \\(M, N\\)"),
    (dict(scheme="uncoded", mode="cxr", blocks=(3, 3)), "integer P"),
    (dict(scheme="uncoded", mode="zz"), "mode must be one of"),
    (dict(scheme="uncoded", importance="zz"), "importance must be one of"),
    (dict(scheme="uncoded", partition="zz"), "partition must be one of sorted, contiguous, got 'zz'"),
    (dict(scheme="uncoded", sort_by="zz"), "sort_by must be one of mean-abs, l2, got 'zz'"),
    (dict(scheme="uncoded", deadline=0), "deadline=0 must be"),
    (dict(scheme="uncoded", deadline=float("nan")), "deadline=nan must be"),
    (dict(scheme="uncoded", deadline="x"), "deadline='x' must be a number"),
    (dict(scheme="uncoded", wait_for=10), "wait_for must be <= the number of workers n=9"),
    (dict(scheme="uncoded", wait_for=0), "wait_for=0 must be an integer >= 1"),
    (dict(scheme="uncoded", rate=0.0), "rate"),
    (dict(scheme="uncoded", shift=-1.0), "shift"),
    (dict(scheme="uncoded", seed=-1), "seed=-1 must be"),
    (dict(scheme="now-uep", workers=15, windows=(0.5, 0.5)), "windows: 2 probabilities for 3 classes"),
    (dict(scheme="ew-uep", workers=15, windows=(0.5, 0.3, 0.3)), "windows must sum to 1"),
    (dict(scheme="repetition", r=0), "'repetition': r=0 must be an integer >= 1"),
])
def test_bad_config(kw, match):
    with pytest.raises(InputError, match=match) as ei:
        StragglerConfig(**kw).check()
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize("kw,match", [
    (dict(steps=0), "steps=0 must be"),
    (dict(steps=2, batch_size=0), "batch_size=0 must be"),
    (dict(steps=2, lr=0), "lr=0 must be"),
    (dict(steps=2, momentum=1.0), "momentum=1.0 must be a number in"),
    (dict(steps=2, target_accuracy=1.5), "target_accuracy=1.5 must be"),
    (dict(steps=2, eval_every=0), "eval_every=0 must be"),
])
def test_bad_train_args(kw, match):
    with pytest.raises(InputError, match=match):
        train_coded("digits-mlp", None, **kw)
    with pytest.raises(InputError, match="unknown capture task"):
        train_coded("nope", None, steps=2)
    with pytest.raises(InputError, match="StragglerConfig or None"):
        train_coded("digits-mlp", {"scheme": "uncoded"}, steps=2)


def test_config_to_dict_and_label():
    cfg = StragglerConfig("repetition", deadline=0.5)
    d = cfg.to_dict()
    assert d["scheme"] == "repetition" and d["n_workers"] == 18 and d["class_sizes"] == [1, 2, 6]
    assert cfg.label() == "repetition n=18 T=0.5"
    assert StragglerConfig("mds", workers=15, wait_for=9).label() == "mds n=15 wait=9"
    assert d["partition"] == "sorted" and d["sort_by"] == "mean-abs"
    c2 = StragglerConfig("ew-uep", workers=15, deadline=1.0, partition="contiguous")
    assert c2.to_dict()["partition"] == "contiguous" and c2.label() == "ew-uep n=15 T=1 contiguous"
    assert StragglerConfig("uncoded", sort_by="l2").label() == "uncoded n=9 wait-all sort=l2"


def test_sorted_partition_changes_the_coded_gradient_not_exactness():
    """With a deadline, the sorted and the contiguous partitions lose different parts of the
    gradient (the class-0 block differs), and the sorted one keeps more of its energy."""
    x, y = _batch("digits-mlp", 32)
    errs = {}
    for kind in ("sorted", "contiguous"):
        cfg = StragglerConfig("ew-uep", deadline=0.8, partition=kind, seed=1, **UEP)
        _, _, st = _coded_grads("digits-mlp", cfg, x, y, exact_error=True)
        errs[kind] = st["rel_error"]
    assert errs["sorted"] < errs["contiguous"]
