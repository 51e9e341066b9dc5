"""co3 simulate uep analyze / mc: the JSON contract, agreement, plots, bad input."""

import json

import numpy as np
import pytest

from conftest import run_cli

from co3cli.simulate import uep


def test_analyze_json_contract_matches_the_library(capsys):
    code, out, err = run_cli("simulate", "uep", "analyze", "--windows", "0.40,0.35,0.25",
                             "--classes", "3,3,3", "--workers", "30", "--json", capsys=capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["schemes"]) == {"now-uep", "ew-uep", "eep"}
    for sid in ("now-uep", "ew-uep"):
        s = doc["schemes"][sid]
        assert s["N"] == list(range(31)) and len(s["p_decode"]) == 3
        ref = uep.decode_probability(
            uep.get_code(sid, class_sizes=(3, 3, 3), workers=30, windows=(0.4, 0.35, 0.25)),
            np.arange(31))
        assert np.allclose(np.array(s["p_decode"]).T, ref, rtol=0, atol=1e-12)
        p = np.array(s["p_decode"])
        assert np.all(np.diff(p, axis=1) >= -1e-12)  # more results never hurt
        assert p[0, 0] == 0.0 and p[0, -1] > 0.98
    # expanding windows protect class 1 more than non-overlapping ones at small N
    assert doc["schemes"]["ew-uep"]["p_decode"][0][6] > doc["schemes"]["now-uep"]["p_decode"][0][6]
    assert "error_vs_time" not in doc


def test_analyze_error_vs_time_and_plot(tmp_path, capsys):
    import importlib.util

    png = tmp_path / "a.png"
    args = ["simulate", "uep", "analyze", "--error-vs-time", "--schemes",
            "uncoded,repetition,mds,eep,now-uep,ew-uep", "--energies", "10,1,0.1", "--points",
            "9", "--json"]
    has_mpl = importlib.util.find_spec("matplotlib") is not None  # optional: co3cli[plot]
    code, out, err = run_cli(*args, "--plot", png, capsys=capsys)
    if has_mpl:
        assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    else:
        assert code == 1 and "needs matplotlib" in err and not png.exists()
        code, out, err = run_cli(*args, capsys=capsys)
    assert code == 0, err
    cur = json.loads(out)["error_vs_time"]
    assert len(cur["t"]) == 9 and cur["t"][0] == 0.0
    for sid in ("uncoded", "repetition", "mds", "eep", "now-uep", "ew-uep"):
        e = np.array(cur[sid])
        assert e[0] == pytest.approx(1.0) and np.all(np.diff(e) <= 1e-12) and e[-1] < 0.1
    assert cur["repetition"][4] < cur["uncoded"][4]  # copies help
    code, out, err = run_cli("simulate", "uep", "analyze", "--error-vs-time", capsys=capsys)
    assert code == 0 and "expected normalised error vs time" in out


def test_mc_agrees_with_the_exact_probabilities(capsys):
    code, out, err = run_cli("simulate", "uep", "mc", "--n", "6,12,18", "--trials", "300",
                             "--seed", "3", "--json", capsys=capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert len(rows) == 3 * 3 * 3
    assert max(abs(r["z"]) for r in rows if np.isfinite(r["z"])) < 4.0
    assert all(np.isfinite(r["z"]) for r in rows)


@pytest.mark.parametrize("args,needle", [
    (["--windows", "0.5,0.4,0.2"], "sum"),
    (["--classes", "3,3"], "windows"),
    (["--windows", "a,b"], "--windows 'a,b' must be comma-separated numbers"),
    (["--schemes", "raptor"], "unknown scheme(s) ['raptor']"),
    (["--workers", "0"], "workers"),
    (["--rate", "0", "--error-vs-time"], "rate"),
    (["--energies", "1,2", "--error-vs-time"], "--energies needs 3 values"),
])
def test_bad_input_is_one_line(args, needle, capsys):
    code, out, err = run_cli("simulate", "uep", "analyze", *args, capsys=capsys)
    assert code == 1 and needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_uep_train_cli_and_fl_straggler_options(tmp_path, capsys):
    out = tmp_path / "ew.csv"
    code, o, e = run_cli("simulate", "uep", "train", "--task", "digits-mlp", "--scheme", "ew-uep",
                         "--workers", "15", "--deadline", "1.0", "--steps", "6",
                         "--eval-every", "3", "--json", "-o", out, capsys=capsys)
    assert code == 0, e
    res = json.loads(o)
    assert res["steps"] == 6 and res["total_straggler_time"] == pytest.approx(6 * 3 * 1.0)
    assert out.read_text().startswith("step,train_loss,test_accuracy")
    assert json.loads((tmp_path / "ew.csv.json").read_text())["straggler"]["partition"] == "sorted"
    code, o, e = run_cli("simulate", "uep", "train", "--task", "digits-mlp", "--scheme", "mds",
                         "--workers", "15", "--wait-for", "9", "--partition", "contiguous",
                         "--steps", "2", "--json", "-o", tmp_path / "c.csv", capsys=capsys)
    assert code == 0, e
    assert json.loads(o)["config"]["straggler"]["partition"] == "contiguous"
    for opt, bad in (("--partition", "random"), ("--sort-by", "max")):
        for scheme in ("ew-uep", "exact"):
            code, o, e = run_cli("simulate", "uep", "train", "--scheme", scheme, "--workers", "15",
                                 opt, bad, "-o", tmp_path / "p.csv", capsys=capsys)
            assert code == 1 and f"got '{bad}'" in e and e.count("\n") == 1 and "Traceback" not in e
            assert not (tmp_path / "p.csv").exists()
    code, o, e = run_cli("simulate", "uep", "train", "--scheme", "mds", "-o", tmp_path / "m.csv",
                         capsys=capsys)
    assert code == 1 and "workers" in e and not (tmp_path / "m.csv").exists()
    code, o, e = run_cli("simulate", "fl", "--deadline", "1", "-o", tmp_path / "f", capsys=capsys)
    assert code == 1 and "need --stragglers SCHEME" in e
    code, o, e = run_cli("simulate", "fl", "--stragglers", "ew-uep", "--windows", "0.5,0.6,0.1",
                         "--straggler-workers", "15", "-o", tmp_path / "f", capsys=capsys)
    assert code == 1 and "sum" in e


def test_mc_points_out_of_range_and_huge_energies(capsys):
    code, o, e = run_cli("simulate", "uep", "mc", "--n", "100", capsys=capsys)
    assert code == 1 and "--n [100]" in e and "0..30" in e
    code, o, e = run_cli("simulate", "uep", "mc", "--n", "-1", capsys=capsys)
    assert code == 1 and "--n [-1]" in e
    code, o, e = run_cli("simulate", "uep", "analyze", "--error-vs-time", "--energies",
                         "1e308,1e308,1e308", "--json", capsys=capsys)
    assert code == 0 and "NaN" not in o
    code, o, e = run_cli("simulate", "uep", "analyze", "--error-vs-time", "--energies", "0,0,0",
                         capsys=capsys)
    assert code == 1 and "not all 0" in e
