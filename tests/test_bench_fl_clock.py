"""The clock suite of benchmarks/bench_fl.py on a tiny task: one run per compressor, the
recomputed clock per uplink, the target rule, the break-even bandwidth, not-run cells."""

import importlib.util
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _bench(monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_fl", ROOT / "benchmarks" / "bench_fl.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "CLOCK_TASKS", {"digits-mlp": dict(
        clients=3, rounds=4, algorithm="fedsgd", batch_size=16, lr=0.3, eval_every=2)})
    monkeypatch.setattr(mod, "CLOCK_RUNS", [r for r in mod.CLOCK_RUNS if r[0] in (
        "none", "co3 fp4 ans g=0.7", "topk 1% ef")])
    return mod


def test_clock_suite_tables_and_break_even(monkeypatch, tmp_path):
    from co3cli.simulate.flplot import read_metrics

    mod = _bench(monkeypatch)
    work, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    mod.run_clock(["digits-mlp"], ["none", "co3 fp4 ans g=0.7"], work, None)
    none_dir = mod._clock_dir(work, "digits-mlp", "none")
    stamp = (none_dir / "summary.json").stat().st_mtime_ns
    mod.run_clock(["digits-mlp"], ["none"], work, None)  # finished: skipped
    assert (none_dir / "summary.json").stat().st_mtime_ns == stamp
    assert not (none_dir / "model.pt").exists() and (none_dir / "clients.csv").exists()

    doc = mod.clock_results(work, out)
    t = doc["tasks"]["digits-mlp"]
    acc = t["runs"]["none"]["final_accuracy"]
    assert t["target"] == np.floor(1000 * 0.95 * acc) / 1000
    none, co3 = t["runs"]["none"], t["runs"]["co3 fp4 ans g=0.7"]
    assert none["break_even_bit_s"] is None
    m = read_metrics(mod._clock_dir(work, "digits-mlp", "co3 fp4 ans g=0.7"))
    enc = np.median(m["t_compress"][1:]) / 3
    dec = np.median(m["t_decompress"][1:])
    up = np.median(np.diff(np.r_[0, m["cumulative_uplink_bytes"]])[1:]) / 3
    want = 8 * (none["uplink_bytes_per_client"] - up) / (enc + dec)
    assert np.isclose(co3["break_even_bit_s"], want)
    assert co3["bits_per_entry"] < 8 < none["bits_per_entry"]
    # a slower uplink never makes the run faster; float32 feels it more than co3
    w = {k: [r["clock"][u]["wallclock_s"] for u in mod.UPLINKS] for k, r in t["runs"].items()}
    assert w["none"][0] > w["none"][1] > w["none"][2]
    assert w["none"][0] - w["none"][2] > w["co3 fp4 ans g=0.7"][0] - w["co3 fp4 ans g=0.7"][2]
    md = (out / "fl_clock.md").read_text()
    assert "| topk 1% ef | not run" in md and "B* = 8 x" in md
    assert (out / "fl_clock_digits-mlp.png").exists()
    assert json.loads((out / "fl_clock.json").read_text())["uplinks"] == list(mod.UPLINKS)
