"""co3 simulate fl: real bytes, error feedback, determinism, partitions, outputs, bad input."""

import csv
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from conftest import run_cli  # noqa: E402

from co3cli import InputError  # noqa: E402
from co3cli.dump import Dump  # noqa: E402
from co3cli.compressors import get_compressor  # noqa: E402
from co3cli.simulate.fl import partition, run_fl  # noqa: E402
from co3cli.simulate.flconfig import FLConfig, check_config  # noqa: E402
from co3cli.simulate.flplot import read_metrics  # noqa: E402

FAST = dict(task="digits-mlp", clients=4, rounds=6, batch_size=16, eval_every=3)


def rows(run):
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("fmt,coder", [("fp4-co3", "ans"), ("fp8-e5m2", "huffman"),
                                       ("fp8-e5m2", "ctx")])
def test_co3_payload_round_trip_and_refit(fmt, coder):
    comp = get_compressor("co3", format=fmt, coder=coder, refit_every=3)
    rng = np.random.default_rng(0)
    send, recv = {"cols": 100}, {"cols": 100}  # the engines give the 2-D view's row length
    sizes, pkts = [], []
    for i in range(7):
        v = (rng.laplace(size=5000) * 10.0 ** (-i % 3)).astype(np.float32)
        pkt = comp.compress(v, send, rng)
        assert np.array_equal(comp.decompress(pkt.payload, v.size, recv), pkt.v_hat)
        sizes.append(pkt.payload[0])  # flag byte: a table was sent
        pkts.append(pkt)
    assert sizes == [1, 0, 0, 1, 0, 0, 1]  # refit every 3 calls, the table sent only then
    from co3cli.errors import CorruptDataError

    with pytest.raises(CorruptDataError, match="never sent"):
        comp.decompress(pkts[5].payload, v.size, {})
    for cut in (0, 3, len(pkt.payload) - 1):
        with pytest.raises(CorruptDataError):
            comp.decompress(pkt.payload[:cut], v.size, dict(recv))


def test_run_writes_metrics_config_summary_and_counts_real_bytes(tmp_path):
    cfg = FLConfig(compressor="co3", compressor_params={"format": "fp4-co3"}, gamma=0.7,
                   dump_rounds=(0, 5), **FAST)
    res = run_fl(cfg, tmp_path / "run")
    r = rows(tmp_path / "run")
    assert [int(x["round"]) for x in r] == list(range(6))
    doc = json.loads((tmp_path / "run" / "config.json").read_text())
    n = doc["model_parameters"]
    assert doc["compressor"]["format"] == "fp4-co3" and doc["config"]["gamma"] == 0.7
    assert doc["versions"]["co3cli"] and sum(doc["shard_sizes"]) == doc["n_train"]
    total = sum(int(x["uplink_bytes"]) for x in r)
    assert res.total_uplink_bytes == total == int(r[-1]["cumulative_uplink_bytes"])
    for x in r:  # bits per entry from the bytes, 4 clients each round
        assert float(x["uplink_bits_per_entry"]) == pytest.approx(
            8 * int(x["uplink_bytes"]) / (4 * n), rel=1e-5)
    assert 0.3 < res.mean_bits_per_entry < 3 and res.rounds_done == 6
    assert [x["test_accuracy"] != "" for x in r] == [False, False, True, False, False, True]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final_accuracy"] == res.final_accuracy
    with Dump.open(tmp_path / "run" / "transmitted.h5") as d:  # client 0, rounds 0 and 5
        assert d.streams == ["raw", "corrected", "decoded"] and d.steps.tolist() == [0, 5]
        raw, cor = d.read_layer("raw/fc1.weight"), d.read_layer("corrected/fc1.weight")
        dec = d.read_layer("decoded/fc1.weight")
    assert np.array_equal(raw[0], cor[0])  # no memory before the first round
    assert not np.array_equal(raw[1], cor[1])  # gamma * e added later
    assert np.abs(dec[1] - cor[1]).max() < np.abs(cor[1]).max()


def test_same_seed_same_run_other_seed_other_run(tmp_path):
    cfg = FLConfig(compressor="qsgd", compressor_params={"levels": 2}, **FAST)
    run_fl(cfg, tmp_path / "a")
    run_fl(cfg, tmp_path / "b")
    cols = ("train_loss", "test_accuracy", "uplink_bytes")
    a, b = rows(tmp_path / "a"), rows(tmp_path / "b")
    assert [[x[c] for c in cols] for x in a] == [[x[c] for c in cols] for x in b]
    run_fl(FLConfig(**{**FAST, "seed": 1}, compressor="qsgd", compressor_params={"levels": 2}),
           tmp_path / "c")
    assert [x["train_loss"] for x in rows(tmp_path / "c")] != [x["train_loss"] for x in a]


def test_error_feedback_gamma_changes_the_uploads_and_none_is_32_bits(tmp_path):
    base = dict(FAST, compressor="co3", compressor_params={"format": "fp4-co3"})
    run_fl(FLConfig(**base, gamma=0.0), tmp_path / "g0")
    run_fl(FLConfig(**base, gamma=1.0), tmp_path / "g1")
    l0 = [x["train_loss"] for x in rows(tmp_path / "g0")]
    l1 = [x["train_loss"] for x in rows(tmp_path / "g1")]
    assert l0[:1] == l1[:1] and l0 != l1  # same first round, then the memory acts
    res = run_fl(FLConfig(**FAST), tmp_path / "none")
    assert res.mean_bits_per_entry == 32.0


@pytest.mark.parametrize("kind", ["iid", "dirichlet", "shards"])
def test_partitions_cover_the_data_once(kind):
    labels = np.repeat(np.arange(10), 50)
    cfg = FLConfig(clients=7, partition=kind, alpha=0.3, shards_per_client=2)
    parts = partition(labels, cfg, np.random.default_rng(0))
    allidx = np.concatenate(parts)
    assert len(parts) == 7 and all(p.size > 0 for p in parts)
    assert np.array_equal(np.sort(allidx), np.arange(500))
    classes = [len(np.unique(labels[p])) for p in parts]
    if kind == "iid":
        assert min(classes) == 10
    if kind == "shards":
        assert max(classes) <= 2 * 2  # two label-sorted shards span few classes


def test_fedavg_and_partial_participation(tmp_path):
    cfg = FLConfig(**{**FAST, "clients": 5}, algorithm="fedavg", local_steps=3,
                   participation=2, compressor="topk", compressor_params={"fraction": 0.1},
                   gamma=1.0, momentum=0.5)
    res = run_fl(cfg, tmp_path / "r")
    r = rows(tmp_path / "r")
    assert all(int(x["participants"]) == 2 for x in r)
    assert res.final_accuracy is not None and res.mean_bits_per_entry < 32


def test_divergence_stops_with_the_round_and_keeps_the_metrics(tmp_path):
    from co3cli.simulate.fl import Diverged

    with pytest.raises(Diverged, match=r"round \d+: client \d+ diverged"):
        run_fl(FLConfig(task="mnist5k-mlp", clients=2, rounds=5, lr=1e6), tmp_path / "d")
    m = read_metrics(tmp_path / "d")
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert summary["rounds_done"] == len(m["round"]) and "diverged" in summary["stopped"]


@pytest.mark.parametrize("change,match", [
    ({"gamma": 1.5}, r"gamma=1.5 must be a number in \[0, 1\]"),
    ({"compressor": "zip"}, "unknown compressor 'zip'"),
    ({"task": "imagenet"}, "unknown capture task 'imagenet'"),
    ({"participation": 11}, "participation=11 exceeds clients=10"),
    ({"clients": 0}, "clients=0 must be an integer >= 1"),
    ({"partition": "weird"}, "partition='weird' is not one of"),
    ({"compressor": "co3", "compressor_params": {"format": "fp9"}}, "fp9"),
    ({"compressor": "topk", "compressor_params": {"fraction": 2.0}}, "fraction"),
    ({"compressor": "co3", "compressor_params": {"levels": 2}}, "unknown parameter"),
])
def test_bad_configs(change, match):
    with pytest.raises(InputError, match=match):
        check_config(FLConfig(**{"clients": 10, **change}))


def test_more_clients_than_examples(tmp_path):
    with pytest.raises(InputError, match="exceeds the .* training examples"):
        run_fl(FLConfig(task="digits-mlp", clients=5000, rounds=1), tmp_path / "x")


def test_cli_run_sweep_plot_and_errors(tmp_path, capsys):
    def cli(*args):
        code, out, err = run_cli(*args, capsys=capsys)
        return code, out + err

    out = tmp_path / "s"
    code, text = cli("simulate", "fl", "--task", "digits-mlp", "--clients", "3", "--rounds", "3",
                     "--eval-every", "3", "-c", "co3", "--format", "fp4-co3",
                     "--sweep", "gamma=0,1", "-o", out, "--json")
    assert code == 0, text
    data = json.loads(text)
    assert [d["run"] for d in data] == ["gamma=0", "gamma=1"]
    assert (out / "sweep.csv").exists() and (out / "gamma=1" / "metrics.csv").exists()
    png = tmp_path / "p.png"
    code, text = cli("simulate", "plot", out / "gamma=0", out / "gamma=1", "-o", png)
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:  # optional (co3cli[plot])
        assert code == 1 and "needs matplotlib" in text and not png.exists()
    else:
        assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    code, text = cli("simulate", "fl", "-c", "qsgd", "--format", "fp4-co3", "-o", tmp_path / "q")
    assert code == 1 and "--format applies to --compressor co3 only" in text
    code, text = cli("simulate", "fl", "-c", "qsgd", "-p", "levels", "-o", tmp_path / "q")
    assert code == 1 and "must look like name=value" in text
    code, text = cli("simulate", "fl", "--rounds", "2", "--task", "digits-mlp", "-o",
                     out / "gamma=0")
    assert code == 1 and "already holds a run" in text
    code, text = cli("simulate", "plot", tmp_path / "nothing", "-o", tmp_path / "bad.png")
    assert code == 1 and "cannot read" in text and not (tmp_path / "bad.png").exists()


def test_sweep_and_metrics_edge_cases(tmp_path, capsys):
    from co3cli.simulate.flconfig import sweep_configs

    base = FLConfig(**FAST)
    with pytest.raises(InputError, match="--sweep cannot vary 'stragglers'"):
        sweep_configs(base, "stragglers=mds")
    pts = sweep_configs(base, "participation=2,3")
    assert [c.participation for _, c in pts] == [2, 3]
    with pytest.raises(InputError, match="--sweep clients: 'x' is not an integer"):
        sweep_configs(base, "clients=x")
    with pytest.raises(InputError, match="dump_rounds entry 6 is not a round"):
        check_config(FLConfig(**{**FAST, "dump_rounds": (6,)}))
    run = tmp_path / "r"
    run_fl(FLConfig(**FAST), run)
    text = (run / "metrics.csv").read_text()
    (run / "metrics.csv").write_text(text + "6,0.1,2.3")  # a row cut short by a kill
    assert len(read_metrics(run)["round"]) == 6
    (run / "metrics.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="not a co3 simulate fl metrics file"):
        read_metrics(run)
    code, out, err = run_cli("simulate", "fl", "--engine", "torchrun", "--timeout", "-1", "-o",
                             tmp_path / "t", capsys=capsys)
    assert code == 1 and "--timeout -1.0 must be > 0" in err


def test_co3_counts_scale_fallbacks_in_packet_state_metrics_and_summary(tmp_path):
    comp = get_compressor("co3", format="fp4-co3", scale="co3-poly", refit_every=2)
    bias = np.linspace(-1e-2, 1e-2, 10).astype(np.float32)  # GenNorm fit: beta 20
    state = {}
    pkts = [comp.compress(bias * (i + 1), state, None) for i in range(5)]
    assert [p.scale_fallbacks for p in pkts] == [1, 0, 1, 0, 1]  # refits only
    assert state["scale_fallbacks"] == 3 and "beta" in state["scale_fallback_reason"]
    assert np.abs(pkts[0].v_hat).max() > 0.5 * np.abs(bias).max()  # not saturated to ~0
    res = run_fl(FLConfig(compressor="co3", compressor_params={"format": "fp4-co3",
                                                               "scale": "co3-poly"}, **FAST),
                 tmp_path / "poly")
    per_round = [int(x["scale_fallbacks"]) for x in rows(tmp_path / "poly")]
    assert res.scale_fallbacks == sum(per_round) > 0  # the 10-entry output bias at least
    summary = json.loads((tmp_path / "poly" / "summary.json").read_text())
    assert summary["scale_fallbacks"] == res.scale_fallbacks
    res = run_fl(FLConfig(compressor="co3", compressor_params={"format": "fp4-co3"}, **FAST),
                 tmp_path / "absmax")
    assert res.scale_fallbacks == 0


def test_dist_message_carries_scale_fallbacks():
    from co3cli.simulate.dist import decode_message, encode_message
    from co3cli.simulate.fl import ClientMsg

    msg = ClientMsg(2, [b"ab", b"c"], 0.5, 0.1, 0.2, None, scale_fallbacks=7)
    back = decode_message(encode_message(3, msg), 3, 2, 1, 2)
    assert back.scale_fallbacks == 7 and back.payloads == msg.payloads
