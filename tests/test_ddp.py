"""co3cli.ddp: the co3 DDP communication hook on 2 gloo ranks (forked processes, FileStore).

Every multi-process test runs its ranks in child processes with a join timeout and a process
group timeout, so a failure is reported instead of hanging.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.distributed as dist

from co3cli.ddp import CO3HookNotRunError, CO3State, co3_hook
from co3cli.errors import InputError, StateMismatchError
from co3cli.compressors import get_compressor
from dist_ranks import launch, warm_codec

WORLD = 2


# ---------------------------------------------------------------------- helpers (in the ranks)
def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16),
                               torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 12, generator=gen), torch.randint(0, 3, (16,), generator=gen)


def _ddp(model: torch.nn.Module) -> torch.nn.parallel.DistributedDataParallel:
    # a tiny bucket cap gives several buckets (and DDP's bucket rebuild after step 0)
    return torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)


def _step(ddp, opt, rank: int, step: int) -> None:
    x, y = _batch(rank, step)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    opt.step()


def _memory(state: CO3State, key: int) -> np.ndarray:
    """A copy of parameter ``key``'s error memory (zeros before its first update)."""
    e = state.feedback.memory(key)
    return np.zeros(state._params[key].numel, np.float32) if e is None else e.copy()


def _flat_params(model: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().float().reshape(-1) for p in model.parameters()]).numpy().copy()


def _scenario_train(rank: int, world: int, out: Path) -> dict[str, Any]:
    """4 steps with gamma 0.9; a wrapper checks the error-feedback contract on every bucket."""
    model = _model()
    ddp = _ddp(model)
    state = CO3State(None, format="fp8-e5m2", coder="ans", gamma=0.9, refit_every=3)
    reference = get_compressor("co3", **state.config)
    checks = {"buckets": 0, "params": 0, "max_rel_err": 0.0, "memory_nonzero": 0}

    def checking_hook(st, bucket):  # unannotated: DDP checks annotations
        g = bucket.buffer().detach().clone().numpy()
        before = []
        for p in bucket.parameters():
            old = st._params.get(st._keys[id(p)][0]) if id(p) in st._keys else None
            fresh = old is None or old.numel != p.numel()
            before.append((np.zeros(p.numel(), np.float32) if fresh else _memory(st, old.key),
                           {} if fresh else copy.deepcopy(old.sender)))
        fut = co3_hook(st, bucket)
        lo = 0
        v = np.empty_like(g)
        for p, (e_before, sender_before) in zip(bucket.parameters(), before):
            hi = lo + p.numel()
            v[lo:hi] = g[lo:hi] + np.float32(st.gamma) * e_before
            pkt = reference.compress(v[lo:hi], sender_before, np.random.default_rng(0))
            e_after = _memory(st, st._param(p).key)
            assert np.array_equal(e_after, v[lo:hi] - pkt.v_hat), "memory is not v - v_hat"
            checks["memory_nonzero"] += int(np.any(e_after != 0))
            checks["params"] += 1
            lo = hi
        v_mean = torch.from_numpy(v)
        dist.all_reduce(v_mean)
        v_mean /= world
        err = (fut.value() - v_mean).norm() / v_mean.norm().clamp_min(1e-30)
        checks["max_rel_err"] = max(checks["max_rel_err"], float(err))
        checks["buckets"] += 1
        return fut

    ddp.register_comm_hook(state, checking_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    params = []
    for step in range(4):
        _step(ddp, opt, rank, step)
        params.append(_flat_params(model))
    clone = pickle.loads(pickle.dumps(state))
    same = _same_state_dicts(clone.state_dict(), state.state_dict())
    return {"params": params, "checks": checks, "stats": state.stats(), "pickle_same": same,
            "pickled_group": clone.process_group}


def _same_state_dicts(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict):
            if not isinstance(y, dict) or not _same_state_dicts(x, y):
                return False
        elif isinstance(x, torch.Tensor):
            if not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _scenario_ckpt_a(rank: int, world: int, out: Path, k: int) -> dict[str, Any]:
    """k steps, checkpoint (model, optimizer, co3 state), then step k -> params P1."""
    model = _model()
    ddp = _ddp(model)
    state = CO3State(None, format="fp4-co3", coder="ans", gamma=0.9, refit_every=2)
    ddp.register_comm_hook(state, co3_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(k):
        _step(ddp, opt, rank, step)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                "co3": state.state_dict(), "co3_pickle": pickle.dumps(state)},
               out / f"ckpt-{rank}.pt")
    _step(ddp, opt, rank, k)
    return {"params": _flat_params(model), "stats": state.stats()}


def _scenario_ckpt_b(rank: int, world: int, out: Path, k: int) -> dict[str, Any]:
    """Fresh processes: restore the checkpoint, step k -> params (must equal P1)."""
    ckpt = torch.load(out / f"ckpt-{rank}.pt", weights_only=False)
    model = _model()
    model.load_state_dict(ckpt["model"])
    ddp = _ddp(model)
    if rank == 0:  # both restore paths: pickle on rank 0, load_state_dict on rank 1
        state = pickle.loads(ckpt["co3_pickle"])
    else:
        state = CO3State(None, format="fp4-co3", coder="ans", gamma=0.5, refit_every=2)
        state.load_state_dict(ckpt["co3"])
    ddp.register_comm_hook(state, co3_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.load_state_dict(ckpt["opt"])
    _step(ddp, opt, rank, k)
    return {"params": _flat_params(model), "stats": state.stats()}


def _scenario_nonfinite(rank: int, world: int, out: Path) -> dict[str, Any]:
    """Step 1 has an Inf in rank 1's gradient only: both ranks must see it, average it raw
    and leave memories/tables alone; the next step compresses again."""
    model = _model()
    ddp = _ddp(model)
    state = CO3State(None, format="fp8-e5m2", coder="ans", gamma=0.9, refit_every=100)
    ddp.register_comm_hook(state, co3_hook)
    grads, memories = [], []
    for step in range(3):
        x, y = _batch(rank, step)
        if step == 1 and rank == 1:
            x = x.clone()
            x[0, 0] = float("inf")
        model.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy().copy())
        memories.append({k: _memory(state, k) for k in state._params})
    return {"grads": grads, "memories": memories, "stats": state.stats()}


def _three_steps(rank: int, dtype: torch.dtype = torch.float32, **co3) -> dict[str, Any]:
    """Three DDP steps through the CO3 hook with these CO3State options: params and stats."""
    model = _model().to(dtype)
    ddp = _ddp(model)
    state = CO3State(None, **co3)
    ddp.register_comm_hook(state, co3_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state.guard(opt, after=2)  # the hook runs: the guard stays quiet
    params = []
    for step in range(3):
        x, y = _batch(rank, step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x.to(dtype)), y).backward()
        opt.step()
        params.append(_flat_params(model))
    return {"params": params, "stats": state.stats(), "memories":
            {k: _memory(state, k) for k in state._params}}


def _scenario_paths(rank: int, world: int, out: Path) -> dict[str, Any]:
    """The numba (CPU default) and the torch-op (CUDA) paths through the hook, float32 and
    bf16 models."""
    return {str(dt): {path: _three_steps(rank, dt, path=path, refit_every=2)
                      for path in ("auto", "torch")}
            for dt in (torch.float32, torch.bfloat16)}


def _scenario_overlap(rank: int, world: int, out: Path) -> dict[str, Any]:
    """The same 3 steps through the synchronous and the overlapped hook (several buckets)."""
    return {"sync": _three_steps(rank), "overlap": _three_steps(rank, overlap=True)}


def _scenario_ctx(rank: int, world: int, out: Path) -> dict[str, Any]:
    """The context-adaptive coder through the hook: 2-D contexts from each parameter's shape."""
    return _three_steps(rank, format="fp8-e5m2", coder="ctx", gamma=0.9, refit_every=2)


def _scenario_poly(rank: int, world: int, out: Path) -> dict[str, Any]:
    """fp4 with the guarded CO3 polynomial: the 3-entry output bias falls back (beta 20)."""
    return _three_steps(rank, format="fp4-co3", coder="ans", gamma=0.7, refit_every=2,
                        scale="co3-poly")


def _job_state() -> CO3State:
    return CO3State(None, format="fp4-co3", coder="ans", gamma=0.9, refit_every=2)


def _scenario_job_a(rank: int, world: int, out: Path, k: int, m: int) -> dict[str, Any]:
    """k steps, one checkpoint file for the job (written by rank 0), then m more steps."""
    model = _model()
    ddp = _ddp(model)
    state = _job_state()
    ddp.register_comm_hook(state, co3_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(k):
        _step(ddp, opt, rank, step)
    job = state.job_state_dict()  # every rank
    if rank == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "co3": job,
                    "co3_rank0": state.state_dict()}, out / "job.pt")
    for step in range(k, k + m):
        _step(ddp, opt, rank, step)
    return {"params": _flat_params(model), "stats": state.stats()}


def _scenario_job_b(rank: int, world: int, out: Path, k: int, m: int) -> dict[str, Any]:
    """Fresh processes: every rank loads the one file and takes its own state; m steps."""
    ckpt = torch.load(out / "job.pt", weights_only=True)
    model = _model()
    model.load_state_dict(ckpt["model"])
    ddp = _ddp(model)
    state = _job_state()
    state.load_state_dict(ckpt["co3"])
    ddp.register_comm_hook(state, co3_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.load_state_dict(ckpt["opt"])
    for step in range(k, k + m):
        _step(ddp, opt, rank, step)
    return {"params": _flat_params(model), "stats": state.stats()}


def _scenario_job_mismatch(rank: int, world: int, out: Path) -> dict[str, Any]:
    """Every way of loading a state where it does not belong: the message of each."""
    ckpt = torch.load(out / "job.pt", weights_only=True)
    messages = {}
    bigger = {**ckpt["co3"], "world_size": 4, "ranks": ckpt["co3"]["ranks"] * 2}
    cases = {"rank0_state": (_job_state, ckpt["co3_rank0"]),
             "job_world4": (_job_state, bigger),
             "state_world4": (_job_state, {**ckpt["co3_rank0"], "world_size": 4}),
             "job_coder": (lambda: CO3State(None, format="fp4-co3", coder="huffman"), ckpt["co3"])}
    for name, (make, sd) in cases.items():
        try:
            make().load_state_dict(sd)
            messages[name] = None
        except StateMismatchError as e:
            messages[name] = str(e)
    return messages


def _scenario_deferred(rank: int, world: int, out: Path, state: CO3State) -> dict[str, Any]:
    """A state loaded before the process group existed: the hook's first call checks it."""
    ddp = _ddp(_model())
    ddp.register_comm_hook(state, co3_hook)
    try:
        _step(ddp, torch.optim.SGD(ddp.parameters(), lr=0.1), rank, 0)
    except StateMismatchError as e:
        return {"error": str(e)}
    return {"error": None}


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "deferred": _scenario_deferred,
    "job_a": _scenario_job_a, "job_b": _scenario_job_b, "job_mismatch": _scenario_job_mismatch,
    "ctx": _scenario_ctx, "poly": _scenario_poly, "overlap": _scenario_overlap,
    "train": _scenario_train, "ckpt_a": _scenario_ckpt_a, "ckpt_b": _scenario_ckpt_b,
    "nonfinite": _scenario_nonfinite, "paths": _scenario_paths,
}


def _launch(tmp_path: Path, scenario: str, **kwargs: Any) -> list[dict[str, Any]]:
    """The scenario on WORLD forked gloo ranks (tests/dist_ranks.py: join timeout, no process
    left, a failing rank's traceback in the assertion)."""
    return launch(tmp_path, SCENARIOS[scenario], world=WORLD, **kwargs)


@pytest.fixture(scope="module", autouse=True)
def _warm_codec():
    """Compile the coders' numba kernels once in the parent so forked ranks inherit them."""
    torch.set_num_threads(1)
    warm_codec()


# ---------------------------------------------------------------------- tests
def test_replicas_identical_and_memory_carries_over(tmp_path):
    r0, r1 = _launch(tmp_path, "train")
    for step, (p0, p1) in enumerate(zip(r0["params"], r1["params"])):
        assert np.array_equal(p0, p1), f"replicas differ after step {step}"
    assert not np.array_equal(r0["params"][0], r0["params"][-1])
    for r in (r0, r1):
        c, s = r["checks"], r["stats"]
        assert c["buckets"] >= 5 and c["params"] == 4 * 6 and c["memory_nonzero"] == c["params"]
        assert s["params"] == {0: 384, 1: 32, 2: 512, 3: 16, 4: 48, 5: 3} and s["resets"] == 0
        assert c["max_rel_err"] < 0.2  # fp8: the mean of the decodes is close to the mean of v
        assert s["steps"] == 4 and s["bytes_total"] > 0 and s["entries_per_step"] == 995
        assert 0 < s["entropy_bits_per_entry_mean"] <= s["bits_per_entry_mean"]
        assert s["bits_per_entry_last"] < 32
        assert r["pickle_same"] and r["pickled_group"] is None


def test_stats_count_scale_fallbacks(tmp_path):
    r0, r1 = _launch(tmp_path, "poly")
    assert all(np.array_equal(a, b) for a, b in zip(r0["params"], r1["params"]))
    for r in (r0, r1):
        # 6 parameters refitted at steps 0 and 2: the small biases fall back, the weights may
        assert 0 < r["stats"]["scale_fallbacks"] <= 12


def test_checkpoint_restore_gives_the_same_next_step(tmp_path):
    k = 3
    a = _launch(tmp_path, "ckpt_a", k=k)
    b = _launch(tmp_path, "ckpt_b", k=k)
    assert np.array_equal(a[0]["params"], a[1]["params"])
    for rank in range(WORLD):
        assert np.array_equal(a[rank]["params"], b[rank]["params"]), f"rank {rank} differs"
    assert b[0]["stats"]["steps"] == k + 1
    assert b[0]["stats"]["resets"] == 0


@pytest.mark.parametrize("kwargs, match", [
    ({"format": "fp9-nope"}, "format"),
    ({"coder": "zstd"}, "coder"),
    ({"gamma": 1.5}, "gamma"),
    ({"gamma": -0.1}, "gamma"),
    ({"gamma": float("nan")}, "gamma"),
    ({"refit_every": 0}, "refit_every"),
    ({"refit_every": 2.5}, "refit_every"),
    ({"exchange": "carrier-pigeon"}, "exchange"),
    ({"overlap": "yes"}, "overlap"),
    ({"path": "gpu"}, "path 'gpu'"),
    ({"path": "torch", "format": "uniform10"}, "not supported"),
])
def test_bad_parameters_raise_input_error(kwargs, match):
    with pytest.raises(InputError, match=match) as info:
        CO3State(None, **kwargs)
    assert "\n" not in str(info.value)


def test_state_dict_of_a_fresh_state_round_trips():
    state = CO3State(None, format="fp4-co3", gamma=0.5)
    clone = pickle.loads(pickle.dumps(state))
    assert clone.gamma == 0.5 and clone.config == state.config and clone.process_group is None
    with pytest.raises(InputError, match="format"):
        CO3State(None, format="fp8-e5m2").load_state_dict(state.state_dict())


def test_a_nonfinite_gradient_on_one_rank_is_averaged_raw_on_all(tmp_path):
    r0, r1 = _launch(tmp_path, "nonfinite")
    for step in range(3):
        assert np.array_equal(r0["grads"][step], r1["grads"][step], equal_nan=True)
    assert not np.isfinite(r0["grads"][1]).all()  # the scaler (or the user) sees the overflow
    assert np.isfinite(r0["grads"][0]).all() and np.isfinite(r0["grads"][2]).all()
    for r in (r0, r1):
        assert r["stats"]["nonfinite_buckets"] >= 1
        for k, m in r["memories"][1].items():  # untouched by the non-finite step
            assert np.array_equal(m, r["memories"][0][k])


def test_ctx_coder_through_the_hook_keeps_replicas_identical(tmp_path):
    r0, r1 = _launch(tmp_path, "ctx")
    for p0, p1 in zip(r0["params"], r1["params"]):
        assert np.array_equal(p0, p1)
    assert 0 < r0["stats"]["bits_per_entry_mean"] < 32  # tiny model: the tables dominate


def test_overlap_gives_the_synchronous_results_bit_for_bit(tmp_path):
    r0, r1 = _launch(tmp_path, "overlap")
    for r in (r0, r1):
        for step, (a, b) in enumerate(zip(r["sync"]["params"], r["overlap"]["params"])):
            assert np.array_equal(a, b), f"overlap differs from sync after step {step}"
        sync, over = r["sync"]["stats"], r["overlap"]["stats"]
        assert over["steps"] == sync["steps"] == 3
        assert over["bytes_total"] == sync["bytes_total"]
    for a, b in zip(r0["overlap"]["params"], r1["overlap"]["params"]):
        assert np.array_equal(a, b)  # replicas identical
    assert not np.array_equal(r0["overlap"]["params"][0], r0["overlap"]["params"][-1])


def test_the_torch_path_gives_the_numba_results_bit_for_bit(tmp_path):
    """What a CUDA bucket gets (torch ops), run on CPU, against the CPU default; fp32 and bf16
    models; replicas identical."""
    r0, r1 = _launch(tmp_path, "paths")
    for dt in ("torch.float32", "torch.bfloat16"):
        for r in (r0, r1):
            a, b = r[dt]["auto"], r[dt]["torch"]
            for step, (pa, pb) in enumerate(zip(a["params"], b["params"])):
                assert np.array_equal(pa, pb), f"{dt}: paths differ after step {step}"
            assert a["stats"]["bytes_total"] == b["stats"]["bytes_total"]
            for k in a["memories"]:
                assert np.array_equal(a["memories"][k], b["memories"][k])
                assert a["memories"][k].dtype == np.float32
        for pa, pb in zip(r0[dt]["torch"]["params"], r1[dt]["torch"]["params"]):
            assert np.array_equal(pa, pb)
        assert not np.array_equal(r0[dt]["auto"]["params"][0], r0[dt]["auto"]["params"][-1])


def test_overlap_survives_pickling():
    state = pickle.loads(pickle.dumps(CO3State(None, overlap=True)))
    assert state.overlap is True and state._worker is None


def test_one_checkpoint_for_the_job_resumes_bit_identically(tmp_path):
    k, m = 3, 3
    a = _launch(tmp_path, "job_a", k=k, m=m)
    b = _launch(tmp_path, "job_b", k=k, m=m)
    for rank in range(WORLD):
        assert np.array_equal(a[rank]["params"], b[rank]["params"]), f"rank {rank} differs"
        assert b[rank]["stats"]["steps"] == k + m and b[rank]["stats"]["resets"] == 0
    r0, r1 = _launch(tmp_path, "job_mismatch")
    assert r0["rank0_state"] is None  # rank 0's own state
    assert r1["rank0_state"] == "co3 DDP state of rank 0 loaded on rank 1"
    for r in (r0, r1):
        assert r["job_world4"] == r["state_world4"] == \
            "co3 DDP state saved with world size 4, loaded with 2"
        assert r["job_coder"] == "co3 DDP state saved with coder='ans', loaded with coder='huffman'"
    # without a process group: the rank is checked at the hook's first call
    state = _job_state()
    state.load_state_dict(torch.load(tmp_path / "job.pt", weights_only=True)["co3_rank0"])
    with pytest.raises(StateMismatchError, match="^co3 DDP state of rank 0 loaded on rank 1$"):
        state._check_placement(1, 2)
    with pytest.raises(InputError, match="after init_process_group"):
        _job_state().load_state_dict(torch.load(tmp_path / "job.pt", weights_only=True)["co3"])
    sd = torch.load(tmp_path / "job.pt", weights_only=True)["co3_rank0"]
    state = _job_state()
    state.load_state_dict({**sd, "world_size": 4})  # no process group here: checked later
    for r in _launch(tmp_path, "deferred", state=state):
        assert r["error"] == "co3 DDP state saved with world size 4, loaded with 2"


def test_a_version_1_state_dict_still_loads():
    sd = CO3State(None, format="fp4-co3").state_dict()
    old = {k: v for k, v in sd.items() if k not in ("rank", "world_size")}
    state = CO3State(None, format="fp4-co3")
    state.load_state_dict({**old, "version": 1})
    assert state._placement is None


def test_the_guard_names_a_hook_that_never_ran():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = CO3State(None)
    state.guard(opt, after=2)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()  # one step: not checked yet
    with pytest.raises(CO3HookNotRunError, match="^co3 DDP hook never ran: 0 hook steps after 2 "
                                                 "optimizer step") as info:
        opt.step()
    assert "\n" not in str(info.value)
    opt.step()  # checked once, then the guard is gone
    with pytest.raises(InputError, match="after"):
        state.guard(opt, after=0)
