"""co3cli.flower: every compressor through Flower messages, in Flower's simulation engine
against ``co3 simulate fl``, and deployed on 127.0.0.1 (one SuperLink, two SuperNodes).

The message-level tests run in this process (no ray, a few seconds). The two process tests
start Flower's own servers on free ports, are bounded in time, kill every process they started
(and its children) and check that none is left; they are marked slow (on a loaded 2-core
machine: simulation ~60 s, deployment ~60-90 s, most of it Python/torch/numba start-up in the
processes Flower spawns).
"""

from __future__ import annotations

import csv
import json
import math
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

flwr = pytest.importorskip("flwr", reason="co3cli.flower needs flwr: pip install 'co3cli[flower]'")

from flwr.app import (Array, ArrayRecord, ConfigRecord, Context, Message,  # noqa: E402
                      MessageType, MetricRecord, RecordDict)
from flwr.serverapp.strategy import FedAvg  # noqa: E402

from co3cli.compressors import COMPRESSORS, ErrorFeedback, get_compressor  # noqa: E402
from co3cli.errors import CorruptDataError, InputError  # noqa: E402
from co3cli.flower import (CompressedStrategy, CompressMod, message_bytes,  # noqa: E402
                           settings_from_run_config)
from co3cli.flower.wire import row_cols  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "flower"
PARAMS = {"co3": {"format": "fp4-e2m1", "refit_every": 2}, "topk": {"fraction": 0.05}}
CASES = sorted((cid, PARAMS.get(cid, {})) for cid in COMPRESSORS.ids()) + [
    ("co3", {"format": "fp8-e5m2", "coder": coder, "refit_every": 3}) for coder in ("huffman", "ctx")]


# -- message-level harness (no ray) ---------------------------------------------------------------
@pytest.fixture
def identity(monkeypatch):
    """Flower's per-process task identity, which its runtimes set before creating messages."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, attr, 1)


def fedavg():
    return FedAvg(min_train_nodes=1, min_evaluate_nodes=1, min_available_nodes=1)


class FakeGrid:
    def __init__(self, nodes):
        self.nodes = nodes

    def get_node_ids(self):
        return list(self.nodes)


def _arrays(d):
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in d.items()})


def _client_round(mod, msg, node, pid, store, reply_arrays):
    """One train message through ``mod`` on a node whose context Flower rebuilt from its
    serialized form (as a SuperNode hands it to a ClientApp process)."""
    from flwr.common.serde import context_from_proto, context_to_proto

    ctx = Context(run_id=1, node_id=node, node_config={"partition-id": pid}, state=store,
                  run_config={})
    ctx = context_from_proto(context_to_proto(ctx))

    def train(m, c):
        return Message(RecordDict({"arrays": _arrays(reply_arrays),
                                   "metrics": MetricRecord({"num-examples": 1})}), reply_to=m)

    reply = mod(msg, ctx, train)
    return reply, ctx.state


def _updates(rng, shapes):
    return {k: (rng.standard_normal(s) * 10.0 ** -rng.integers(1, 4)).astype(np.float32)
            for k, s in shapes.items()}


@pytest.mark.parametrize("cid, params", CASES, ids=lambda x: x if isinstance(x, str) else
                         x.get("coder", ""))
def test_every_compressor_gives_the_reference_bytes(identity, cid, params):
    """3 clients x 4 rounds, gamma 0.5: the bytes and the decoded updates equal those of the
    compressor driven directly (ErrorFeedback + its states kept in memory), although every
    round builds a new Mod and the node's context goes through Flower's serialization."""
    shapes = {"fc.weight": (32, 48), "fc.bias": (48,), "out.weight": (10, 48)}
    gamma, seed = 0.5, 3
    comp = get_compressor(cid, **params)
    strategy = CompressedStrategy(fedavg(), cid, params)
    nodes = [101, 202, 303]
    ref = {n: (ErrorFeedback(gamma), {k: {"cols": row_cols(s)} for k, s in shapes.items()},
               np.random.default_rng([seed, pid])) for pid, n in enumerate(nodes)}
    rx = {n: {k: {"cols": row_cols(s)} for k, s in shapes.items()} for n in nodes}
    stores = {n: RecordDict() for n in nodes}
    w = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    rng = np.random.default_rng(0)
    decoded = {}
    strategy.on_decode = lambda r, node, pid, u: decoded.__setitem__((r, node), u)
    for rnd in range(1, 5):
        msgs = {m.metadata.dst_node_id: m
                for m in strategy.configure_train(rnd, _arrays(w), ConfigRecord(), FakeGrid(nodes))}
        replies, want_bytes, want = [], 0, {}
        for pid, node in enumerate(nodes):
            msg = msgs[node]
            u = _updates(rng, shapes)
            mod = CompressMod(cid, params, gamma=gamma, seed=seed, sends="update")
            reply, stores[node] = _client_round(mod, msg, node, pid, stores[node], u)
            replies.append(reply)
            fb, states, crng = ref[node]
            for k, g in u.items():
                pkt = fb.step(k, g.reshape(-1), comp, states[k], crng)
                want_bytes += len(pkt.payload)
                assert reply.content["arrays"][k].data == pkt.payload, (rnd, node, k)
                want[node, k] = comp.decompress(pkt.payload, g.size, rx[node][k])
        strategy.aggregate_train(rnd, replies)
        row = strategy.history[-1]
        entries = sum(int(np.prod(s)) for s in shapes.values())
        assert row["payload_bytes"] == want_bytes
        assert row["uplink_bits_per_entry"] == 8.0 * want_bytes / (3 * entries)
        assert [c["client_rounds"] for c in row["clients"]] == [rnd] * 3
        assert sorted((c["node"], c["partition"]) for c in row["clients"]) == list(
            zip(nodes, range(3)))
        for (node, k), v_hat in want.items():
            np.testing.assert_array_equal(decoded[rnd, node][k].reshape(-1), v_hat)


def test_weights_mode_bytes_and_verbatim_arrays(identity):
    """sends="weights": u = w - w_local is coded, the server hands w - u_hat to FedAvg;
    an integer array travels verbatim; Flower's bytes = payload + verbatim + framing."""
    w = {"w": np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64),
         "n": np.array([7], np.int64)}
    local = {"w": w["w"] - np.float32(0.01) * np.sin(w["w"] * 9), "n": np.array([9], np.int64)}
    strategy = CompressedStrategy(fedavg(), "none")
    msg, = strategy.configure_train(1, _arrays(w), ConfigRecord(), FakeGrid([5]))
    reply, _ = _client_round(CompressMod("none"), msg, 5, 0, RecordDict(), local)
    sent = message_bytes(reply)
    meta = dict(reply.content["co3cli"])
    assert meta["payload_bytes"] == 4 * 4096 and meta["entries"] == 4096
    arrays, _ = strategy.aggregate_train(1, [reply])
    row = strategy.history[-1]
    assert row["flower_bytes"] == sent
    assert row["framing_bytes"] == sent - row["payload_bytes"] - row["verbatim_bytes"] > 0
    assert row["verbatim_bytes"] == len(Array(local["n"]).data)
    assert row["uplink_bits_per_entry"] == 32.0
    assert row["downlink_bytes"] == message_bytes(msg) > 4 * 4096
    got = arrays["w"].numpy()
    np.testing.assert_allclose(got, local["w"], atol=1e-6)
    np.testing.assert_array_equal(got, w["w"] - (w["w"] - local["w"]))
    assert arrays["n"].numpy().tolist() == [9]


def test_error_feedback_memory_lives_in_the_context_state(identity):
    """The memory e = v - v_hat is in context.state after a round and feeds the next one."""
    shapes = {"a": (256,)}
    strategy = CompressedStrategy(fedavg(), "signsgd")
    store, rng = RecordDict(), np.random.default_rng(1)
    u1, u2 = _updates(rng, shapes), _updates(rng, shapes)
    msg, = strategy.configure_train(1, _arrays({"a": np.zeros(256, np.float32)}), ConfigRecord(),
                                    FakeGrid([1]))
    _, store = _client_round(CompressMod("signsgd", gamma=1.0, sends="update"), msg, 1, 0, store, u1)
    e = store.array_records["co3cli.memory"]["a"].numpy()
    comp = get_compressor("signsgd")
    v_hat = comp.compress(u1["a"], {}, None).v_hat
    np.testing.assert_array_equal(e, u1["a"] - v_hat)
    reply, _ = _client_round(CompressMod("signsgd", gamma=1.0, sends="update"), msg, 1, 0, store, u2)
    want = comp.compress(u2["a"] + e, {}, None).payload
    assert reply.content["arrays"]["a"].data == want
    assert reply.content["arrays"]["a"].data != comp.compress(u2["a"], {}, None).payload


def test_evaluate_messages_pass_through(identity):
    strategy = CompressedStrategy(fedavg(), "co3")
    w = {"a": np.ones(8, np.float32)}
    msg, = strategy.configure_evaluate(1, _arrays(w), ConfigRecord(), FakeGrid([4]))
    assert msg.metadata.message_type == MessageType.EVALUATE
    ctx = Context(run_id=1, node_id=4, node_config={}, state=RecordDict(), run_config={})
    reply = CompressMod("co3")(msg, ctx, lambda m, c: Message(
        RecordDict({"metrics": MetricRecord({"num-examples": 1, "acc": 0.5})}), reply_to=m))
    assert "co3cli" not in reply.content and not ctx.state.config_records
    assert strategy.aggregate_evaluate(1, [reply])["acc"] == 0.5


def test_state_export_refuses_what_it_cannot_carry():
    comp = get_compressor("topk")
    assert comp.export_state({"cols": 3, "x": np.float32(2.5)}) == {"cols": 3, "x": 2.5}
    with pytest.raises(InputError, match="state entry 'obj' .object. cannot be exported"):
        comp.export_state({"obj": object()})
    co3 = get_compressor("co3")
    state = {"cols": 8}
    co3.compress(np.linspace(-1, 1, 64, dtype=np.float32), state, None)
    doc = co3.export_state(state)
    assert isinstance(doc["table"], bytes) and "uncodable" not in doc
    back = co3.import_state(doc)
    assert back["table"].to_bytes() == doc["table"]


def test_bad_input_gets_one_clear_line(identity):
    with pytest.raises(InputError, match="unknown compressor 'zip'"):
        CompressMod("zip")
    with pytest.raises(InputError, match="sends='grads'"):
        CompressMod("none", sends="grads")
    with pytest.raises(InputError, match="gamma"):
        CompressMod("none", gamma=2.0)
    with pytest.raises(InputError, match="co3cli-param'"):
        settings_from_run_config({"co3cli-param": "{}"})
    with pytest.raises(InputError, match="not a JSON object"):
        settings_from_run_config({"co3cli-params": "{format: fp4}"})
    assert settings_from_run_config({"co3cli-compressor": "qsgd", "co3cli-params": '{"levels": 4}',
                                     "lr": 0.1}) == {"compressor": "qsgd", "params": {"levels": 4}}
    w = {"a": np.zeros(64, np.float32)}
    server = CompressedStrategy(fedavg(), "co3", {"format": "fp8-e4m3"})
    msg, = server.configure_train(1, _arrays(w), ConfigRecord(), FakeGrid([1]))
    reply, _ = _client_round(CompressMod("co3"), msg, 1, 0, RecordDict(), w)
    with pytest.raises(InputError, match="configure both sides alike"):
        server.aggregate_train(1, [reply])
    plain = Message(RecordDict({"arrays": _arrays(w), "metrics": MetricRecord({"num-examples": 1})}),
                    reply_to=msg)
    with pytest.raises(InputError, match="add CompressMod"):
        server.aggregate_train(1, [plain])
    reply, _ = _client_round(CompressMod("none"), msg, 1, 0, RecordDict(), w)
    reply.content["arrays"]["a"] = Array(dtype="float32", shape=(64,), stype="co3cli.payload/1",
                                         data=b"\0" * 17)
    with pytest.raises(CorruptDataError, match="array 'a'"):
        CompressedStrategy(fedavg(), "none").aggregate_train(1, [reply])


# -- process harness -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Processes:
    """Flower servers started for one test: a marker in their environment, a deadline, and a
    cleanup that kills each one's process tree and then anything else carrying the marker."""

    def __init__(self, tmp: Path, deadline_s: float):
        self.tmp, self.deadline = tmp, time.monotonic() + deadline_s
        self.marker = uuid.uuid4().hex
        self.env = dict(os.environ, FLWR_HOME=str(tmp / "flwr-home"), OMP_NUM_THREADS="1",
                        FLWR_DISABLE_UPDATE_CHECK="1", CO3CLI_FLOWER_TEST=self.marker,
                        # this checkout's co3cli; the app's code travels in the FAB
                        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        self.procs: list[subprocess.Popen] = []
        self.port = _free_port()
        home = tmp / "flwr-home"
        home.mkdir()
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "127.0.0.1:{self.port}"'
            '\ninsecure = true\n')

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "w")
        p = subprocess.Popen(list(args), env=self.env, stdout=log, stderr=subprocess.STDOUT,
                             cwd=self.tmp, start_new_session=True)
        self.procs.append(p)
        return p

    def superlink(self, *extra: str) -> None:
        import httpx

        self.start("superlink", "flower-superlink", "--insecure", "--host", "127.0.0.1", "--port",
                   str(self.port), "--database", ":flwr-in-memory:",
                   "--disable-runtime-dependency-installation", *extra)  # no network: no uv sync
        while self.left() > 0:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).is_success:
                    return
            except httpx.HTTPError:
                pass
            assert self.procs[0].poll() is None, self.log("superlink")
            time.sleep(0.5)
        pytest.fail("the SuperLink did not come up in time\n" + self.log("superlink"))

    def flwr_run(self, app: Path, *args: str) -> str:
        run = subprocess.run(["flwr", "run", str(app), "test", "--stream", *args], env=self.env,
                             capture_output=True, text=True, timeout=max(self.left(), 1),
                             cwd=self.tmp, start_new_session=True)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-4000:]
        return out

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()[-4000:]

    def cleanup(self) -> None:
        import psutil

        for p in self.procs:
            try:
                tree = psutil.Process(p.pid).children(recursive=True) + [psutil.Process(p.pid)]
            except psutil.NoSuchProcess:
                tree = []
            for q in tree:
                try:
                    q.kill()
                except psutil.NoSuchProcess:
                    pass
            p.wait(timeout=20)
        for q in psutil.process_iter():  # detached grandchildren (SuperExec, app processes)
            try:
                if q.environ().get("CO3CLI_FLOWER_TEST") == self.marker:
                    q.kill()
                    q.wait(timeout=20)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        alive = []
        for q in psutil.process_iter():
            try:
                if q.environ().get("CO3CLI_FLOWER_TEST") == self.marker and \
                        q.status() != psutil.STATUS_ZOMBIE:
                    alive.append(q.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        assert not alive, f"left-over processes: {alive}"


@pytest.fixture
def processes(tmp_path):
    pytest.importorskip("psutil", reason="the process tests use psutil to clean up")
    made = []

    def make(deadline_s: float) -> Processes:
        made.append(Processes(tmp_path, deadline_s))
        return made[-1]

    yield make
    for p in made:
        p.cleanup()


# -- Flower's simulation engine against co3 simulate fl ------------------------------------------
REPLAY_PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "co3replay"
version = "1.0.0"
description = "replays co3 simulate fl's uploads through co3cli.flower"
license = "MIT"

[tool.flwr.app]
publisher = "co3cli"

[tool.flwr.app.components]
serverapp = "co3replay.apps:server"
clientapp = "co3replay.apps:client"

[tool.flwr.app.config]
dumps = ""
rounds = 3
co3cli-compressor = "co3"
co3cli-params = '{}'
co3cli-gamma = 0.0
co3cli-sends = "update"
"""

REPLAY_APPS = '''"""Client c replays in round r the gradient client c uploaded in co3 simulate fl."""
import json
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp
from flwr.serverapp.strategy import FedAvg

from co3cli.dump import Dump
from co3cli.flower import CompressMod, CompressedStrategy, settings_from_run_config

client = ClientApp(mods=[CompressMod.from_run_config()])
server = ServerApp()


def raw(folder, r):
    with Dump.open(Path(folder) / "transmitted.h5") as d:
        names = [n for n in d.layers if n.startswith("raw/")]
        return {n[4:]: d.read_layer(n)[r].reshape(d.shape(n)) for n in names}


@client.train()
def train(msg, context):
    c, r = int(context.node_config["partition-id"]), int(msg.content["config"]["server-round"])
    u = raw(Path(context.run_config["dumps"]) / f"client{c}", r - 1)
    return Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in u.items()}),
                               "metrics": MetricRecord({"num-examples": 1})}), reply_to=msg)


@server.main()
def main(grid, context):
    cfg = context.run_config
    s = settings_from_run_config(cfg)
    got = {}
    strategy = CompressedStrategy(
        FedAvg(fraction_evaluate=0.0, min_train_nodes=3, min_available_nodes=3),
        s["compressor"], s["params"],
        on_decode=lambda r, node, c, u: got.update({f"{c}/{r}/{k}": v for k, v in u.items()}))
    init = raw(Path(cfg["dumps"]) / "client0", 0)
    strategy.start(grid=grid, initial_arrays=ArrayRecord({k: Array(0 * v) for k, v in init.items()}),
                   num_rounds=int(cfg["rounds"]))
    out = Path(cfg["dumps"])
    np.savez(out / "decoded.npz", **got)
    (out / "history.json").write_text(json.dumps(strategy.history))
'''


@pytest.mark.slow
def test_flower_simulation_matches_co3_simulate_fl(tmp_path, processes):
    """mnist5k-mlp, 3 clients, co3 fp4 with error feedback: the uploads co3 simulate fl coded,
    replayed by 3 simulated SuperNodes in Flower's ray engine, give the same payload bytes every
    round and the same decoded updates, bit for bit (so the memories persisted)."""
    from co3cli.dump import Dump
    from co3cli.simulate.fl import run_fl
    from co3cli.simulate.flconfig import FLConfig

    rounds, params, gamma = 3, {"format": "fp4-e2m1", "refit_every": 2}, 0.9
    dumps = tmp_path / "dumps"
    for c in range(3):
        cfg = FLConfig(task="mnist5k-mlp", clients=3, rounds=rounds, compressor="co3",
                       compressor_params=params, gamma=gamma, seed=1, eval_every=rounds,
                       dump_rounds=tuple(range(rounds)), dump_client=c)
        run_fl(cfg, dumps / f"client{c}")
    app = tmp_path / "replay"
    (app / "co3replay").mkdir(parents=True)
    (app / "pyproject.toml").write_text(REPLAY_PYPROJECT)
    (app / "co3replay" / "__init__.py").write_text("")
    (app / "co3replay" / "apps.py").write_text(REPLAY_APPS)

    procs = processes(420)
    procs.superlink("--simulation")
    log = procs.flwr_run(app, "--federation-config",
                   "num-supernodes=3 init-args-num-cpus=2 client-resources-num-cpus=1",
                   "--run-config", f"dumps='{dumps}' rounds={rounds} co3cli-gamma={gamma} "
                   f"co3cli-params='{json.dumps(params)}'")
    assert (dumps / "history.json").exists(), log[-3000:]
    history = json.loads((dumps / "history.json").read_text())
    metrics = list(csv.DictReader(open(dumps / "client0" / "metrics.csv")))
    assert [h["payload_bytes"] for h in history] == [int(m["uplink_bytes"]) for m in metrics]
    for h, m in zip(history, metrics):
        assert math.isclose(h["uplink_bits_per_entry"], float(m["uplink_bits_per_entry"]),
                            rel_tol=1e-5)
        assert sorted(c["partition"] for c in h["clients"]) == [0, 1, 2]
        assert all(c["client_rounds"] == h["round"] for c in h["clients"])
        assert h["framing_bytes"] > 0
    decoded = np.load(dumps / "decoded.npz")
    for c in range(3):
        with Dump.open(dumps / f"client{c}" / "transmitted.h5") as d:
            for n in (x for x in d.layers if x.startswith("decoded/")):
                rows = d.read_layer(n)
                for r in range(rounds):
                    np.testing.assert_array_equal(decoded[f"{c}/{r + 1}/{n[8:]}"].reshape(-1),
                                                  rows[r])


# -- deployment on 127.0.0.1 ----------------------------------------------------------------------
@pytest.mark.slow
def test_deployment_on_localhost(tmp_path, processes):
    """examples/flower deployed: one SuperLink, two SuperNodes (separate processes, ports
    chosen now), two rounds of FedAvg with co3 fp4 uploads; the run's history shows both
    clients in both rounds with their state kept (client_rounds = round)."""
    procs = processes(480)
    procs.superlink()
    for i in range(2):
        procs.start(f"supernode{i}", "flower-supernode", "--insecure", "--superlink",
                    f"127.0.0.1:{procs.port}", "--port", str(_free_port()),
                    "--node-config", f"partition-id={i} num-partitions=2")
    out = tmp_path / "out"
    log = procs.flwr_run(EXAMPLE, "--run-config", f"num-server-rounds=2 local-steps=2 out='{out}'")
    assert (out / "history.json").exists(), log[-3000:] + procs.log("supernode0")
    doc = json.loads((out / "history.json").read_text())
    assert doc["compressor"]["id"] == "co3" and doc["compressor"]["format"] == "fp4-e2m1"
    rows = doc["rounds"]
    assert [r["round"] for r in rows] == [1, 2]
    for r in rows:
        assert r["participants"] == 2
        assert sorted(c["partition"] for c in r["clients"]) == [0, 1]
        assert all(c["client_rounds"] == r["round"] for c in r["clients"])
        assert 0 < r["uplink_bits_per_entry"] < 8 and r["framing_bytes"] > 0
        assert r["flower_bytes"] == r["payload_bytes"] + r["verbatim_bytes"] + r["framing_bytes"]
        assert 0.0 <= r["test_accuracy"] <= 1.0
    for i in range(2):
        assert procs.procs[1 + i].poll() is None, procs.log(f"supernode{i}")
