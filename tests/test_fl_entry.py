"""co3 simulate fl --entry: the user's own task (FLTask), the buffer rule, both engines, errors."""

import csv
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from conftest import run_cli  # noqa: E402

from co3cli.errors import InputError  # noqa: E402
from co3cli.simulate.fl import Diverged, Simulation, run_fl  # noqa: E402
from co3cli.simulate.flconfig import FLConfig, check_config  # noqa: E402
from co3cli.tasks.buffers import mean_buffers, pack_buffers, unpack_buffers  # noqa: E402
from co3cli.tasks.fltask import FLTask, as_dataset, load_fl_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = f"{ROOT}/examples/fl_job.py"
VARIES = ("t_compute", "t_compress", "t_decompress", "t_server", "t_eval")  # and the clock's *_s


def rows(run):
    with open(Path(run) / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k not in VARIES and not k.endswith("_s")} for r in csv.DictReader(f)]


def same_model(a, b):
    sa, sb = torch.load(Path(a) / "model.pt"), torch.load(Path(b) / "model.pt")
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def cfg_for(entry, **kw):
    base = dict(entry=entry, clients=3, rounds=3, batch_size=16, eval_every=3, lr=0.1)
    base.update(kw)
    return FLConfig(**base)


def test_example_runs_records_its_entry_and_reruns_from_config_json(tmp_path):
    cfg = cfg_for(f"{EXAMPLE}:make_task", compressor="co3",
                  compressor_params={"format": "fp4-co3"}, gamma=0.7, dump_rounds=(1,))
    res = run_fl(cfg, tmp_path / "a")
    assert res.rounds_done == 3 and 0.0 <= res.final_accuracy <= 1.0
    doc = json.loads((tmp_path / "a" / "config.json").read_text())
    assert doc["config"]["entry"] == cfg.entry and doc["config"]["buffers"] == "average"
    assert doc["task"]["provenance"]["sha256"] and doc["task"]["metric"] == "accuracy"
    assert doc["buffers"]["1.running_mean"] == 16  # the BatchNorm statistics are kept
    assert (tmp_path / "a" / "transmitted.h5").exists()
    from co3cli.simulate.flconfig import resolve_config

    again = resolve_config(file=tmp_path / "a" / "config.json")
    assert again == cfg
    run_fl(again, tmp_path / "b")
    assert rows(tmp_path / "a") == rows(tmp_path / "b") and same_model(tmp_path / "a",
                                                                        tmp_path / "b")


def test_cli_entry_and_its_one_line_errors(tmp_path, capsys):
    code, out, err = run_cli("simulate", "fl", "--entry", f"{EXAMPLE}:make_task_per_client",
                             "--clients", "5", "--rounds", "2", "--eval-every", "2",
                             "--buffers", "local", "-o", tmp_path / "r", "--json", capsys=capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "r" / "config.json").read_text())
    assert doc["task"]["metric"] == "top-2 accuracy" and doc["task"]["own_partition"]
    assert doc["shard_sizes"] == [int(s) for s in doc["shard_sizes"]] and len(doc["shard_sizes"]) == 5
    for args, text in (
        (["--entry", "nocolon"], "must be 'module:function'"),
        (["--entry", "missing/job.py:make_task"], "does not exist"),
        (["--entry", f"{EXAMPLE}:nope"], "has no attribute 'nope'"),
        (["--entry", f"{EXAMPLE}:make_task_per_client", "--clients", "4"],
         "own partition of 5 clients"),
        (["--entry", f"{EXAMPLE}:make_task", "--buffers", "median"], "buffers='median'"),
        (["--entry", f"{EXAMPLE}:make_task", "--task", "digits-mlp"], "not both"),
    ):
        code, out, err = run_cli("simulate", "fl", *args, "--rounds", "1", "-o",
                                 tmp_path / "e", capsys=capsys)
        assert code != 0 and text in err, (args, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def _job(tmp_path, body, name="make_task"):
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        X = torch.rand(40, 6, generator=torch.Generator().manual_seed(0))
        Y = (X.sum(1) > 3).long()
        def mlp():
            return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    """) + textwrap.dedent(body))
    return f"{path}:{name}"


@pytest.mark.parametrize("body, message", [
    ("def make_task():\n    return [1, 2]\n", "returned a list; it must return a dict"),
    ("def make_task():\n    return {'train': (X, Y), 'test': (X, Y)}\n", "missing 'model'"),
    ("def make_task():\n    return {'model': mlp, 'test': (X, Y)}\n", "exactly one of 'train'"),
    ("def make_task():\n    return {'model': 3, 'train': (X, Y)}\n", "not a factory"),
    ("def make_task():\n    return {'model': mlp, 'train': (X, Y), 'lr': 1}\n",
     "unknown field(s) 'lr'"),
    ("def make_task():\n    return {'model': mlp, 'train': 'data.csv'}\n", "train is a str"),
    ("def make_task():\n    return {'model': mlp, 'train': (X[:0], Y[:0]), 'test': (X, Y)}\n",
     "train is empty"),
    ("def make_task():\n    return {'model': mlp, 'train': (X, Y[:5])}\n",
     "must have the same first dimension"),
    ("def make_task():\n    return {'model': mlp, 'train': (X[:, :4], Y), 'test': (X[:, :4], Y)}\n",
     "the model failed"),
    ("def make_task():\n    return {'model': mlp, 'train': (X, Y), 'test': (X[:, :5], Y)}\n",
     "differ from test x"),
    ("def make_task():\n    return {'model': mlp, 'train': (X, X.sum(1))}\n", "integer class labels"),
    ("def make_task():\n    return {'model': lambda: 'x', 'train': (X, Y)}\n", "not a torch.nn.Module"),
    ("def make_task():\n    return {'model': mlp, 'train': (X, Y),\n"
     "            'loss': lambda o, y: o.sum() * float('nan')}\n", "(not finite)"),
    ("def make_task():\n    return {'model': mlp, 'train': (X, Y), 'loss': lambda o, y: o}\n",
     "not a scalar tensor"),
    ("def make_task():\n    raise RuntimeError('no data here')\n", "raised RuntimeError: no data here"),
])
def test_bad_entries_are_one_clear_line(tmp_path, body, message):
    cfg = cfg_for(_job(tmp_path, body), clients=2)
    with pytest.raises(InputError) as exc:
        run_fl(cfg, tmp_path / "r")
    assert message in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_nonfinite_loss_during_training_stops_with_one_line(tmp_path):
    body = """
        def make_task():
            calls = []
            def loss(o, y):  # finite on the probe (the first call), infinite in training
                calls.append(1)
                return nn.functional.cross_entropy(o, y) * (1.0 if len(calls) == 1 else float('inf'))
            return {'model': mlp, 'train': (X, Y), 'loss': loss}
    """
    with pytest.raises(Diverged, match=r"round 0: client \d diverged \(loss (inf|nan)"):
        run_fl(cfg_for(_job(tmp_path, body), clients=2), tmp_path / "r")
    assert (tmp_path / "r" / "summary.json").exists()


def test_seed_reaches_the_entry_and_python_task_objects(tmp_path):
    body = """
        SEEN = []
        def make_task(seed):
            SEEN.append(seed)
            g = torch.Generator().manual_seed(seed)
            x = torch.rand(40, 6, generator=g)
            return {'model': mlp, 'train': (x, (x.sum(1) > 3).long()), 'test': (X, Y)}
    """
    entry = _job(tmp_path, body)
    a = load_fl_task(entry, seed=5)
    b = load_fl_task(entry, seed=5)
    c = load_fl_task(entry, seed=6)
    assert torch.equal(a.train.x, b.train.x) and not torch.equal(a.train.x, c.train.x)
    # a task object (no entry): runs in-process, config.json describes it
    task = FLTask("mine", lambda: torch.nn.Linear(6, 2), as_dataset((a.train.x, a.train.y), "t"),
                  as_dataset((a.test.x, a.test.y), "s"))
    res = run_fl(FLConfig(clients=2, rounds=2, eval_every=1, batch_size=8), tmp_path / "o",
                 task=task)
    doc = json.loads((tmp_path / "o" / "config.json").read_text())
    assert res.rounds_done == 2 and doc["task"]["name"] == "mine"
    # a callable as the task: same as its entry string
    import importlib.util

    spec = importlib.util.spec_from_file_location("jobmod", entry.rpartition(":")[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    run_fl(FLConfig(clients=2, rounds=2, eval_every=1, seed=5), tmp_path / "p", task=mod.make_task)
    run_fl(FLConfig(clients=2, rounds=2, eval_every=1, seed=5, entry=entry), tmp_path / "q")
    assert rows(tmp_path / "p") == rows(tmp_path / "q") and same_model(tmp_path / "p",
                                                                        tmp_path / "q")


def test_datasets_of_every_accepted_kind():
    x, y = torch.rand(10, 3), torch.arange(10) % 2
    for obj in ((x, y), (x.numpy(), y.numpy()), torch.utils.data.TensorDataset(x, y),
                [(x[i], y[i]) for i in range(10)]):
        ds = as_dataset(obj, "d")
        assert torch.equal(ds.x, x) and torch.equal(ds.y, y) and ds.num_classes == 2


def _sim(rule, clients=3):
    cfg = FLConfig(task="digits-resnet-tiny", clients=clients, rounds=2, batch_size=16,
                   buffers=rule, algorithm="fedavg", local_steps=2)
    return Simulation(cfg, check_config(cfg))


@pytest.mark.parametrize("rule", ["average", "local"])
def test_server_buffers_are_the_mean_of_the_clients_uploads(rule):
    sim = _sim(rule)
    state = sim.buffers
    assert state and "bn1.running_mean" in state.names
    initial = [b.clone() for b in state.server]
    for r in range(2):
        starts, msgs = [], []
        for c in range(3):
            state.start(c)
            starts.append([b.clone() for b in state.live])
            msgs.append(sim.client_round(c, r, 0.1))
        uploads = [unpack_buffers(m.buffers, state.live) for m in msgs]
        sim.server_round(r, 0.1, np.arange(3), msgs)
        expect = mean_buffers(uploads)
        for name, b, e in zip(state.names, state.live, expect):  # the evaluated model
            assert torch.equal(b, e), name
        f64 = torch.stack([u[0].double() for u in uploads]).mean(0).float()
        assert torch.equal(state.server[0], f64)  # float64 mean in client order, cast back
        nbt = state.names.index("bn1.num_batches_tracked")
        assert int(state.server[nbt]) == sum(int(u[nbt]) for u in uploads) // 3
        if r == 0:
            first_uploads, first_mean = uploads, expect
            assert all(torch.equal(s[0], initial[0]) for s in starts)
        elif rule == "average":  # everyone started from the server's mean
            assert all(all(torch.equal(a, b) for a, b in zip(s, first_mean)) for s in starts)
        else:  # each client started from its own buffers as it left them
            for c in range(3):
                assert all(torch.equal(a, b) for a, b in zip(starts[c], first_uploads[c]))
            assert not torch.equal(starts[0][0], first_mean[0])
    assert len(msgs[0].buffers) == sum(b.numel() * b.element_size() for b in state.live)


def test_buffer_bytes_are_charged_and_round_trip():
    sim = _sim("average", clients=2)
    msgs = [sim.client_round(c, 0, 0.1) for c in range(2)]
    row = sim.server_round(0, 0.1, np.arange(2), msgs)
    payload = sum(len(p) for m in msgs for p in m.payloads)
    assert row["uplink_bytes"] == payload + sum(len(m.buffers) for m in msgs) > payload
    back = unpack_buffers(pack_buffers(sim.buffers.live), sim.buffers.live)
    assert all(torch.equal(a, b) for a, b in zip(back, sim.buffers.live))
    with pytest.raises(InputError, match="expected"):
        unpack_buffers(pack_buffers(sim.buffers.live) + b"x", sim.buffers.live)


@pytest.mark.parametrize("rule", ["average", pytest.param("local", marks=pytest.mark.slow)])
def test_torchrun_engine_is_bit_identical_with_an_entry_and_buffers(tmp_path, rule):
    from co3cli.simulate.dist import launch

    cfg = cfg_for(f"{EXAMPLE}:make_task", clients=3, rounds=3, buffers=rule, compressor="co3",
                  compressor_params={"format": "fp4-co3"}, gamma=0.5, participation=2)
    a = run_fl(cfg, tmp_path / "a")
    b = launch(cfg, tmp_path / "b", 3)
    assert a.total_uplink_bytes == b.total_uplink_bytes and a.final_accuracy == b.final_accuracy
    assert same_model(tmp_path / "a", tmp_path / "b")
    keep = ("train_loss", "test_loss", "test_accuracy", "uplink_bytes", "participants")
    assert [[r[k] for k in keep] for r in rows(tmp_path / "a")] == \
        [[r[k] for k in keep] for r in rows(tmp_path / "b")]
