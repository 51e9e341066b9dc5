"""The wall clock of co3 simulate fl: link specs and traces, the round time, the deadline,
time to target, recomputation for other links, both engines, the CLI."""

import csv
import dataclasses
import json

import numpy as np
import pytest

from conftest import run_cli

from co3cli import InputError
from co3cli.simulate.clock import Clock, recompute
from co3cli.simulate.links import Network, parse_spec, parse_value


# -- specs -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, quantity, value", [
    ("10mbit", "uplink", 1e7), ("2.5Mbit/s", "uplink", 2.5e6), ("100kbps", "uplink", 1e5),
    ("1e6", "uplink", 1e6), ("1gbit", "downlink", 1e9), ("20ms", "latency", 0.02),
    ("300us", "latency", 3e-4), ("0", "latency", 0.0), ("0.5s", "latency", 0.5),
    ("1.5", "compute_factor", 1.5), ("2x", "compute_factor", 2.0)])
def test_values_and_units(text, quantity, value):
    assert parse_value(text, quantity) == pytest.approx(value)
    assert parse_spec(text, quantity).config()["value"] == pytest.approx(value)


@pytest.mark.parametrize("text, quantity, message", [
    ("gauss:1:2", "uplink", r"--uplink 'gauss:1:2': unknown link spec 'gauss'; allowed: fixed, "
                            r"lognormal, uniform, relative, trace, VALUE"),
    ("fast", "uplink", r"unknown link spec 'fast'; allowed: .*FILE\.csv, Nx"),
    ("10mb", "uplink", r"--uplink '10mb' is not a rate such as 10mbit"),
    ("-3mbit", "uplink", r"must be > 0"), ("0mbit", "uplink", r"must be > 0"),
    ("20 parsecs", "latency", r"is not a time such as 20ms"),
    ("10x", "latency", r"--latency '10x': Nx \(N times the uplink\) is for --downlink only"),
    ("relative:2", "uplink", r"is for --downlink only"),
    ("lognormal:10mbit", "uplink", r"lognormal takes 2 argument\(s\): lognormal:MEDIAN:SIGMA"),
    ("lognormal:10mbit:x", "uplink", r"sigma='x' is not a number"),
    ("uniform:5mbit:1mbit", "uplink", r"hi=1000000.0 must be >= lo=5000000.0"),
    ("lognormal", "uplink", r"lognormal needs arguments"),
    ("", "uplink", r"a spec must be a non-empty string")])
def test_bad_specs_are_one_line(text, quantity, message):
    with pytest.raises(InputError, match=message) as exc:
        parse_spec(text, quantity)
    assert "\n" not in str(exc.value)


def test_distributions_are_seeded_per_quantity():
    texts = {"uplink": "lognormal:10mbit:0.5", "latency": "uniform:10ms:50ms",
             "compute_factor": "lognormal:1:0.3"}
    a, b = Network.build(texts, 50, seed=3), Network.build(texts, 50, seed=3)
    c = Network.build({**texts, "latency": "20ms"}, 50, seed=3)
    everyone = np.arange(50)
    up, down, lat, fac = a.at(everyone, 0, 0.0)
    assert np.array_equal(up, b.at(everyone, 0, 0.0)[0]) and np.array_equal(down, up)  # 1x
    assert np.array_equal(up, c.at(everyone, 0, 0.0)[0])  # another latency: same uplinks
    assert np.array_equal(fac, c.at(everyone, 0, 0.0)[3])
    assert np.median(up) == pytest.approx(1e7, rel=0.3) and up.std() > 0
    assert lat.min() >= 0.01 and lat.max() <= 0.05 and np.unique(lat).size == 50
    assert not np.array_equal(up, Network.build(texts, 50, seed=4).at(everyone, 0, 0.0)[0])
    assert np.array_equal(a.at(everyone, 7, 9.0)[0], up)  # drawn once: rounds do not differ
    free = Network.build({}, 3, 0).at(np.arange(3), 0, 0.0)
    assert np.isinf(free[0]).all() and np.isinf(free[1]).all() and (free[2] == 0).all()
    ten = Network.build({"uplink": "uniform:1mbit:2mbit", "downlink": "10x"}, 5, 0)
    u, d, _, _ = ten.at(np.arange(5), 0, 0.0)
    assert np.allclose(d, 10 * u)


def _trace(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_trace_by_round_and_by_time(tmp_path):
    path = _trace(tmp_path, "client,round,uplink,latency\n0,0,10mbit,20ms\n0,5,2mbit,40ms\n"
                            "1,3,5mbit,30ms\n2,0,1000000,0\n")
    net = Network.build({"uplink": path, "latency": f"trace:{path}"}, 3, 0)
    at = lambda r: net.at(np.arange(3), r, 0.0)  # noqa: E731
    assert at(0)[0].tolist() == [1e7, 5e6, 1e6]  # client 1's first row covers rounds 0..2
    assert at(4)[0].tolist() == [1e7, 5e6, 1e6] and at(5)[0].tolist() == [2e6, 5e6, 1e6]
    assert at(99)[2].tolist() == pytest.approx([0.04, 0.03, 0.0])
    timed = _trace(tmp_path, "client,time,up\n0,0,1mbit\n0,10,4mbit\n", "time.csv")
    net = Network.build({"uplink": f"trace:{timed}:up"}, 1, 0)
    assert net.time_indexed
    assert net.at(np.arange(1), 50, 9.99)[0][0] == 1e6 and net.at(np.arange(1), 0, 10.0)[0][0] == 4e6


@pytest.mark.parametrize("text, message", [
    ("client,round,uplink\n0,0,10mbit\n2,0,10mbit\n",
     r"trace .*t\.csv: no rows for client\(s\) 1, 3 \(the run has 4 clients, 0\.\.3\)"),
    ("client,round,uplink\n0,0,10mbit\n1,0,-5mbit\n", r"t\.csv row 3: uplink='-5mbit' must be > 0"),
    ("client,round,uplink\n0,0,0\n", r"row 2: uplink='0' must be > 0"),
    ("client,round,uplink\n0,0,fast\n", r"row 2: uplink='fast' is not a rate"),
    ("client,round,downlink\n0,0,1mbit\n", r"the header must name client, round or time, and "
                                           r"the column 'uplink'"),
    ("client,round,uplink\n0,0,1mbit\n0,0,2mbit\n", r"client 0 has two rows for round 0"),
    ("client,round,uplink\n0,x,1mbit\n", r"row 2: client '0' and round 'x' must be numbers"),
    ("", r"is empty")])
def test_bad_traces_are_refused_in_one_line(tmp_path, text, message):
    path = _trace(tmp_path, text)
    with pytest.raises(InputError, match=message) as exc:
        Network.build({"uplink": path}, 4, 0)
    assert "\n" not in str(exc.value)


def test_missing_trace_file(tmp_path):
    with pytest.raises(InputError, match=r"cannot read trace '.*nope\.csv'"):
        parse_spec(str(tmp_path / "nope.csv"), "uplink")


# -- the round's time ------------------------------------------------------------------------------
def _clock(**fields):
    return Clock(fields, clients=3, entries=1000, local_steps=2, seed=0)


def test_round_time_adds_up():
    clock = _clock(uplink="1mbit", downlink="10x", latency="10ms", compute_time="5ms")
    plan = clock.plan(0, [0, 1, 2], [1000, 3000, 2000], [9.0, 9.0, 9.0], [0.01, 0.02, 0.01],
                      [0.0, 0.0, 0.5])
    down = 0.01 + 8 * 4000 / 1e7
    assert plan.parts["download"] == pytest.approx([down] * 3)
    assert plan.parts["compute"] == pytest.approx([0.01, 0.01, 0.51])  # 2 steps x 5ms + straggler
    assert plan.parts["upload"] == pytest.approx([0.018, 0.034, 0.026])
    row = clock.finish(plan, server_s=0.1)
    slowest = down + 0.51 + 0.01 + 0.026  # client 2: its straggler time is on the clock
    assert row["clock_client_s"] == pytest.approx(slowest)
    assert row["clock_upload_s"] == pytest.approx(0.026) and row["late_clients"] == 0
    assert row["round_s"] == pytest.approx(slowest + 0.1) == row["wallclock_s"]
    assert row["downlink_bytes"] == 3 * 4000
    clock.finish(clock.plan(1, [0], [1000], [0.0], [0.0], [0.0]), 0.0)
    assert clock.wallclock == pytest.approx(slowest + 0.1 + down + 0.01 + 0.018)
    measured = _clock(compute_factor="2")  # measured compute (and encode) x the factor
    p = measured.plan(0, [0], [0], [0.25], [0.125], [0.0])
    assert p.parts["compute"] == pytest.approx([0.5]) and p.parts["encode"] == pytest.approx([0.25])


def test_deadline_decides_on_deterministic_parts_only():
    clock = _clock(uplink="1mbit", compute_time="5ms", round_deadline="60ms")
    base = dict(clients=[0, 1, 2], up_bytes=[1000, 10000, 2000], t_compute=[0.0] * 3,
                straggler=[0.0] * 3)
    quick = clock.plan(0, t_compress=[0.0] * 3, **base)
    slow_codec = clock.plan(0, t_compress=[5.0] * 3, **base)  # noisy codec: same decision
    assert quick.late.tolist() == slow_codec.late.tolist() == [False, True, False]
    row = clock.finish(slow_codec, 0.0)
    assert row["late_clients"] == 1 and row["clock_client_s"] > 5.0  # on-time ones are waited for
    row = clock.finish(quick, 0.0)
    assert row["clock_client_s"] == pytest.approx(0.06)  # someone is late: the deadline
    everyone_late = clock.plan(0, [0, 1], [90000, 20000], [0.0] * 2, [0.0] * 2, [0.0] * 2)
    assert everyone_late.late.tolist() == [True, False]  # the earliest is waited for


@pytest.mark.parametrize("fields, message", [
    ({"round_deadline": "1s"}, r"--round-deadline drops late clients.*--compute-time"),
    ({"round_deadline": "0s", "compute_time": "1ms"}, r"--round-deadline '0s' must be > 0"),
    ({"compute_time": "-1"}, r"--compute-time '-1': '-1' must be >= 0"),
    ({"compute_time": "fast"}, r"'fast' is not a time"),
    ({"target": 90}, r"target=90 must be a number in \(0, 1\]"),
    ({"link_seed": -1}, r"link_seed=-1 must be an integer >= 0")])
def test_bad_clock_settings(fields, message):
    with pytest.raises(InputError, match=message):
        _clock(**fields)


def test_deadline_refuses_time_traces(tmp_path):
    path = _trace(tmp_path, "client,time,uplink\n0,0,1mbit\n1,0,1mbit\n2,0,1mbit\n")
    with pytest.raises(InputError, match="traces indexed by round"):
        _clock(uplink=path, compute_time="1ms", round_deadline="1s")


# -- runs ------------------------------------------------------------------------------------------
torch = pytest.importorskip("torch")
from co3cli.simulate.fl import run_fl  # noqa: E402
from co3cli.simulate.flconfig import FLConfig  # noqa: E402
from co3cli.simulate.flplot import read_metrics  # noqa: E402

BASE = FLConfig(task="digits-mlp", clients=4, rounds=6, batch_size=16, eval_every=2,
                compressor="co3", compressor_params={"format": "fp4-co3"}, gamma=0.5)
LINKS = dict(uplink="lognormal:200kbit:0.8", downlink="10x", latency="20ms",
             compute_factor="uniform:1:3")


def _models_equal(a, b):
    sa, sb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    return all(torch.equal(sa[k], sb[k]) for k in sa)


def _clients(run):
    with open(run / "clients.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_links_without_deadline_do_not_change_training(tmp_path):
    plain = run_fl(BASE, tmp_path / "plain")
    linked = run_fl(dataclasses.replace(BASE, **LINKS, target=0.05), tmp_path / "linked")
    assert _models_equal(tmp_path / "plain", tmp_path / "linked")
    assert plain.total_uplink_bytes == linked.total_uplink_bytes
    m = read_metrics(tmp_path / "linked")
    assert np.all(np.diff(m["wallclock_s"]) > 0) and (m["late_clients"] == 0).all()
    assert np.allclose(m["wallclock_s"], np.cumsum(m["round_s"]), rtol=1e-5)
    assert (m["downlink_bytes"] == 4 * 4 * json.loads(
        (tmp_path / "linked" / "config.json").read_text())["model_parameters"]).all()
    rows = _clients(tmp_path / "linked")
    assert len(rows) == 6 * 4 and [int(r["client"]) for r in rows[:4]] == [0, 1, 2, 3]
    assert sum(int(r["uplink_bytes"]) for r in rows) == linked.total_uplink_bytes
    s = json.loads((tmp_path / "linked" / "summary.json").read_text())["clock"]
    assert s["wallclock_s"] == pytest.approx(m["wallclock_s"][-1], rel=1e-5)
    assert s["time_to_target_s"] == pytest.approx(m["wallclock_s"][1], rel=1e-5)  # first eval
    assert s["target_round"] == 1 and s["target_reason"] is None and s["measured_step_s"] > 0
    cfg = json.loads((tmp_path / "linked" / "config.json").read_text())["clock"]
    assert cfg["links"]["uplink"] == {"id": "lognormal", "quantity": "uplink",
                                      "median": 2e5, "sigma": 0.8}
    # the run's own links replay its clock; other uplinks change only the upload parts
    own = recompute(tmp_path / "linked")
    assert np.allclose(own["wallclock_s"], m["wallclock_s"], rtol=1e-5)
    fast = recompute(tmp_path / "linked", uplink="100mbit")
    assert fast["wallclock_s"][-1] < own["wallclock_s"][-1]
    slow = recompute(tmp_path / "linked", uplink="10kbit", downlink="1gbit", latency="0")
    up = np.array([int(r["uplink_bytes"]) for r in rows]).reshape(6, 4)
    assert np.all(slow["clock_upload_s"] >= 8 * up.min(1) / 1e4 - 1e-12)
    assert np.all(slow["clock_upload_s"] <= 8 * up.max(1) / 1e4 + 1e-12)
    parts = sum(slow[f"clock_{p}_s"] for p in ("download", "compute", "encode", "upload"))
    assert np.allclose(parts, slow["clock_client_s"])
    assert slow["summary"]["links"]["uplink"]["value"] == 1e4
    assert plain.clock["target_reason"] == "no target given (--target)"


def test_target_never_reached_is_said_not_invented(tmp_path):
    res = run_fl(dataclasses.replace(BASE, rounds=2, target=0.999), tmp_path / "r")
    doc = json.loads((tmp_path / "r" / "summary.json").read_text())["clock"]
    assert doc["time_to_target_s"] is None and doc["target_round"] is None
    assert doc["target_reason"].startswith("never reached 0.999: best test accuracy 0.")
    assert res.clock == doc


def test_deadline_drops_late_clients_reproducibly(tmp_path):
    cfg = dataclasses.replace(BASE, **LINKS, compute_time="2ms", round_deadline="0.25s",
                              rounds=5)
    run_fl(cfg, tmp_path / "a")
    run_fl(cfg, tmp_path / "b")
    assert _models_equal(tmp_path / "a", tmp_path / "b")
    ma, mb = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert np.array_equal(ma["late_clients"], mb["late_clients"])
    assert 0 < ma["late_clients"].sum() < 5 * 4
    late = [r["late"] for r in _clients(tmp_path / "a")]
    assert late == [r["late"] for r in _clients(tmp_path / "b")]
    run_fl(dataclasses.replace(cfg, round_deadline=None), tmp_path / "all")
    assert not _models_equal(tmp_path / "a", tmp_path / "all")  # the drops changed training
    assert np.all(ma["clock_nocodec_s"] <= 0.25)
    assert recompute(tmp_path / "a")["summary"]["late_uploads"] == ma["late_clients"].sum()
    with pytest.raises(InputError, match="ran with a round deadline: other links would drop"):
        recompute(tmp_path / "a", uplink="1gbit")


def test_stragglers_join_the_clock(tmp_path):
    cfg = dataclasses.replace(BASE, clients=3, rounds=2, compute_time="1ms", uplink="1mbit",
                              stragglers={"scheme": "ew-uep", "workers": 15, "deadline": 0.7})
    run_fl(cfg, tmp_path / "s")
    for r in _clients(tmp_path / "s"):
        assert float(r["straggler_time"]) == pytest.approx(3 * 0.7)
        assert float(r["compute_s"]) == pytest.approx(0.001 + 3 * 0.7)


def test_old_metrics_files_still_read(tmp_path):
    from co3cli.simulate.clock import CLOCK_COLUMNS
    from co3cli.simulate.fl import METRICS

    old = [k for k in METRICS if k not in CLOCK_COLUMNS]
    (tmp_path / "metrics.csv").write_text(",".join(old) + "\n" + ",".join("1" for _ in old) + "\n")
    m = read_metrics(tmp_path)
    assert m["round"].tolist() == [1.0] and np.isnan(m["wallclock_s"]).all()


@pytest.mark.slow  # ~4 s: the slow run (CI runs it)
def test_engines_agree_on_the_deterministic_clock(tmp_path):
    from co3cli.simulate.dist import launch

    cfg = dataclasses.replace(BASE, clients=3, rounds=4, **LINKS, compute_time="2ms",
                              round_deadline="0.25s")
    run_fl(cfg, tmp_path / "a")
    launch(cfg, tmp_path / "b", 3)
    assert _models_equal(tmp_path / "a", tmp_path / "b")
    ma, mb = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    for k in ("late_clients", "downlink_bytes", "clock_nocodec_s", "uplink_bytes"):
        assert np.array_equal(ma[k], mb[k]), k
    det = ("round", "client", "late", "uplink_bytes", "downlink_bytes", "straggler_time",
           "download_s", "compute_s", "upload_s")
    ca, cb = _clients(tmp_path / "a"), _clients(tmp_path / "b")
    assert [[r[k] for k in det] for r in ca] == [[r[k] for k in det] for r in cb]
    assert sum(int(r["late"]) for r in ca) > 0


# -- CLI -------------------------------------------------------------------------------------------
def test_cli_fl_clock_and_plot(tmp_path, capsys):
    run = tmp_path / "run"
    code, out, err = run_cli("simulate", "fl", "--task", "digits-mlp", "--clients", "3",
                             "--rounds", "4", "--eval-every", "2", "-c", "co3", "--format",
                             "fp4-co3", "--uplink", "lognormal:1mbit:0.5", "--downlink", "10x",
                             "--latency", "20ms", "--target", "0.05", "-o", run, "--quiet",
                             capsys=capsys)
    assert code == 0, err
    cfg = json.loads((run / "config.json").read_text())["config"]
    assert cfg["uplink"] == "lognormal:1mbit:0.5" and cfg["target"] == 0.05
    code, out, err = run_cli("simulate", "clock", run, "--uplink", "1mbit", "--uplink",
                             "100mbit", "--json", capsys=capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["uplink"] for r in rows] == ["1mbit", "100mbit"]
    assert rows[0]["wallclock_s"] > rows[1]["wallclock_s"] and rows[0]["time_to_target_s"]
    code, out, err = run_cli("simulate", "clock", run, "--uplink", "10mbit", "--target", "0.999",
                             "-o", tmp_path / "c.csv", capsys=capsys)
    assert code == 0 and "@ 10mbit:" in out and "never reached 0.999" in out
    assert (tmp_path / "c.csv").read_text().startswith("run,uplink,rounds,wallclock_s")
    code, out, err = run_cli("simulate", "clock", run, "--uplink", "warp:9", capsys=capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "unknown link spec 'warp'; allowed: fixed, lognormal" in err
    code, out, err = run_cli("simulate", "fl", "--uplink", "1mbit", "--round-deadline", "1s",
                             "-o", tmp_path / "x", capsys=capsys)
    assert code == 1 and "--round-deadline drops late clients" in err
    trace = _trace(tmp_path, "client,round,uplink\n0,0,1mbit\n")
    code, out, err = run_cli("simulate", "fl", "--clients", "3", "--uplink", trace, "-o",
                             tmp_path / "x", capsys=capsys)
    assert code == 1 and "no rows for client(s) 1, 2" in err and len(err.strip().splitlines()) == 1
    pytest.importorskip("matplotlib", reason="figures need matplotlib (co3cli[plot])")
    from co3cli.simulate.flplot import runs_figure

    fig = runs_figure([run], uplinks=["1mbit", "100mbit"])
    assert len(fig.axes) == 4 and "wall-clock" in fig.axes[3].get_xlabel()
    assert len(fig.axes[3].get_lines()) == 4  # 2 uplinks + 2 legend keys
    png = tmp_path / "p.png"
    code, out, err = run_cli("simulate", "plot", run, "-o", png, "--uplink", "10mbit",
                             capsys=capsys)
    assert code == 0 and png.stat().st_size > 0


def test_sweep_table_has_the_clock(tmp_path):
    from co3cli.simulate.flrun import run_sweep

    base = dataclasses.replace(BASE, clients=2, rounds=2, uplink="1mbit", target=0.01)
    rows = run_sweep(base, "gamma=0,0.5", tmp_path / "sw")
    assert all(r["wallclock_s"] > 0 and r["time_to_target_s"] is not None for r in rows)
    assert "wallclock_s,time_to_target_s" in (tmp_path / "sw" / "sweep.csv").read_text()
