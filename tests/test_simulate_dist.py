"""The torchrun engine of co3 simulate fl: equivalence with in-process, faults, messages."""

import csv
import signal
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from conftest import run_cli  # noqa: E402

from co3cli import InputError  # noqa: E402
from co3cli.dump import Dump  # noqa: E402
from co3cli.errors import CorruptDataError  # noqa: E402
from co3cli.simulate.dist import client_rank, decode_message, encode_message, launch  # noqa: E402
from co3cli.simulate.fl import ClientMsg, Diverged, run_fl  # noqa: E402
from co3cli.simulate.flconfig import FLConfig  # noqa: E402
from co3cli.simulate.flplot import read_metrics  # noqa: E402


def metric_rows(run):
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # ~25 s: two runs and a torchrun launch (CI's slow pass runs it)
def test_torchrun_engine_matches_in_process_bit_for_bit(tmp_path):
    # 5 clients multiplexed over 2 client ranks, 4 of 5 taking part per round, error feedback,
    # a stochastic-free codec with refits: same model bits, same bytes, same metrics
    cfg = FLConfig(task="digits-mlp", clients=5, rounds=8, batch_size=16, eval_every=4,
                   compressor="co3", compressor_params={"format": "fp4-co3", "refit_every": 3},
                   gamma=0.7, participation=4, momentum=0.5, dump_rounds=(0, 7), dump_client=1)
    a = run_fl(cfg, tmp_path / "a")
    b = launch(cfg, tmp_path / "b", 3)
    sa, sb = torch.load(tmp_path / "a" / "model.pt"), torch.load(tmp_path / "b" / "model.pt")
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.total_uplink_bytes == b.total_uplink_bytes and a.final_accuracy == b.final_accuracy
    cols = ("train_loss", "test_accuracy", "uplink_bytes", "participants", "entropy_bits_per_entry")
    ra, rb = metric_rows(tmp_path / "a"), metric_rows(tmp_path / "b")
    assert [[x[c] for c in cols] for x in ra] == [[x[c] for c in cols] for x in rb]
    with Dump.open(tmp_path / "a" / "transmitted.h5") as da, \
            Dump.open(tmp_path / "b" / "transmitted.h5") as db:
        assert da.layers == db.layers and da.steps.tolist() == db.steps.tolist() == [0, 7]
        for name in da.layers:
            assert np.array_equal(da.read_layer(name), db.read_layer(name)), name


def test_two_rank_smoke_and_stochastic_compressor(tmp_path):
    cfg = FLConfig(task="digits-mlp", clients=2, rounds=3, batch_size=8, eval_every=3,
                   compressor="qsgd", compressor_params={"levels": 2})
    res = launch(cfg, tmp_path / "r", 2)
    assert res.rounds_done == 3 and res.final_accuracy is not None
    assert res.total_uplink_bytes == run_fl(cfg, tmp_path / "i").total_uplink_bytes


@pytest.mark.slow  # ~14 s: a torchrun launch (CI's slow pass runs it)
def test_killed_rank_stops_the_job_naming_rank_and_round(tmp_path):
    out = tmp_path / "k"
    cfg = FLConfig(task="digits-mlp", clients=4, rounds=100000, batch_size=8, eval_every=1000)

    def killer(procs):
        def run():  # waits for rounds, not for a fixed time: a loaded machine is slower
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and all(p.poll() is None for p in procs):
                try:
                    if sum(1 for _ in open(out / "metrics.csv")) >= 4:  # header + 3 rounds
                        break
                except OSError:
                    pass
                time.sleep(0.02)
            procs[2].send_signal(signal.SIGKILL)  # not once it has ended (its pid reused)

        threading.Thread(target=run, daemon=True).start()

    with pytest.raises(InputError, match=r"rank 2 was killed by signal 9 during round (\d+); "
                                         r"metrics.csv holds the \1 finished round"):
        launch(cfg, out, 3, on_start=killer, timeout=30)
    m = read_metrics(out)  # still a valid metrics file
    assert len(m["round"]) >= 3 and np.array_equal(m["round"], np.arange(len(m["round"])))


@pytest.mark.slow  # ~14 s: a torchrun launch (CI's slow pass runs it)
def test_divergence_on_a_client_rank_is_reported_with_the_round(tmp_path):
    cfg = FLConfig(task="mnist5k-mlp", clients=2, rounds=6, lr=1e6, eval_every=10)
    with pytest.raises(Diverged, match=r"round \d+: client \d+ diverged"):
        launch(cfg, tmp_path / "d", 2)
    assert read_metrics(tmp_path / "d")["round"].size >= 1


def test_message_checksum_and_framing():
    msg = ClientMsg(3, [b"abc", b"", b"\x00" * 10], 0.5, 0.01, 0.002, 12.5,
                    straggler_time=2.5, recovered=0.75)
    data = encode_message(7, msg)
    back = decode_message(data, 7, 3, 2, 3)
    assert back == msg
    for i in range(len(data)):  # every flipped byte is caught
        bad = bytearray(data)
        bad[i] ^= 0x40
        with pytest.raises(CorruptDataError, match="round 7: upload of client 3 from rank 2"):
            decode_message(bytes(bad), 7, 3, 2, 3)
    for cut in range(len(data)):
        with pytest.raises(CorruptDataError):
            decode_message(data[:cut], 7, 3, 2, 3)
    with pytest.raises(CorruptDataError, match="is for round 7"):
        decode_message(data, 8, 3, 2, 3)
    assert [client_rank(c, 3) for c in range(5)] == [1, 2, 1, 2, 1]


def test_cli_torchrun_engine_and_errors(tmp_path, capsys):
    code, out, err = run_cli("simulate", "fl", "--task", "digits-mlp", "--clients", "3",
                             "--rounds", "2", "--engine", "torchrun", "--nproc", "2", "-o",
                             tmp_path / "r", "--json", capsys=capsys)
    assert code == 0, err
    assert '"rounds_done": 2' in out
    code, out, err = run_cli("simulate", "fl", "--engine", "torchrun", "--print-torchrun",
                             "-o", tmp_path / "p", capsys=capsys)
    assert code == 0 and out.startswith("OMP_NUM_THREADS=1 torchrun --nnodes=2")
    assert (tmp_path / "p" / "fl-config.json").exists()
    code, out, err = run_cli("simulate", "fl", "--engine", "mpi", "-o", tmp_path / "x",
                             capsys=capsys)
    assert code == 1 and "--engine 'mpi' is not one of" in err
    code, out, err = run_cli("simulate", "fl", "--engine", "torchrun", "--nproc", "1", "-o",
                             tmp_path / "x", capsys=capsys)
    assert code == 1 and "--nproc 1 must be >= 2" in err


@pytest.mark.slow  # ~25 s: two runs and a torchrun launch (CI's slow pass runs it)
def test_stragglers_in_federated_training_same_in_both_engines(tmp_path):
    # each client's backward products go through an ew-uep code with a deadline; the seeded
    # straggler draws are per client, so the torchrun engine reproduces the in-process run
    cfg = FLConfig(task="digits-mlp", clients=3, rounds=4, batch_size=16, eval_every=2,
                   compressor="co3", compressor_params={"format": "fp4-co3"}, gamma=0.5,
                   stragglers={"scheme": "ew-uep", "workers": 15, "deadline": 0.7})
    a = run_fl(cfg, tmp_path / "a")
    b = launch(cfg, tmp_path / "b", 3)
    sa, sb = torch.load(tmp_path / "a" / "model.pt"), torch.load(tmp_path / "b" / "model.pt")
    assert all(torch.equal(sa[k], sb[k]) for k in sa) and a.final_accuracy == b.final_accuracy
    ra, rb = metric_rows(tmp_path / "a"), metric_rows(tmp_path / "b")
    cols = ("train_loss", "straggler_time", "straggler_recovered", "uplink_bytes")
    assert [[x[c] for c in cols] for x in ra] == [[x[c] for c in cols] for x in rb]
    # 3 coded products per client step (fc1: grad_W only; fc2: both), each stopped at 0.7
    assert all(float(x["straggler_time"]) == pytest.approx(3 * 0.7) for x in ra)
    assert all(0 < float(x["straggler_recovered"]) < 1 for x in ra)
    exact = run_fl(dataclasses_replace(cfg, stragglers=None), tmp_path / "e")
    assert exact.final_accuracy is not None
    assert metric_rows(tmp_path / "e")[0]["straggler_recovered"] == ""


def dataclasses_replace(cfg, **kw):
    import dataclasses

    return dataclasses.replace(cfg, **kw)


def test_divergence_in_round_zero_releases_the_clients(tmp_path):
    cfg = FLConfig(task="digits-mlp", clients=2, rounds=3, algorithm="fedavg", local_steps=30,
                   lr=1e10, eval_every=3)
    with pytest.raises(Diverged, match=r"round 0: client \d diverged"):
        launch(cfg, tmp_path / "d", 3, timeout=30)
    with pytest.raises(Diverged, match=r"round 0: client \d diverged"):
        run_fl(cfg, tmp_path / "i")
