"""The figures of --plot and co3 simulate plot: what a reader needs is on them (titles, axis
labels with units, bounded legends, clipped axes, every layer or a pooled rest), and a
missing matplotlib stops a command before any work."""

import builtins
import json
import sys

import numpy as np
import pytest

from conftest import run_cli

from co3cli.errors import InputError

PNG = b"\x89PNG\r\n\x1a\n"


def _labelled(ax):
    return ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


# --- report --plot ---------------------------------------------------------------------------

def _layer(name, entries, bpe, rng, nsym=11):
    counts = rng.multinomial(entries, np.r_[np.full(5, 0.02), 0.8, np.full(5, 0.02)])
    pmf = np.r_[np.full(5, 0.02), 0.8, np.full(5, 0.02)]
    return {"name": name, "shape": [entries], "entries": entries, "zero_fraction": 0.8,
            "beta": 0.6, "entropy_bpe": 1.0, "cross_entropy_bpe": 1.05, "huffman_bpe": 1.3,
            "huffman_counts_bpe": 1.3, "bpe": bpe, "payload_bpe": bpe,
            "bytes": int(bpe * entries / 8), "payload_bytes": int(bpe * entries / 8),
            "side_bytes": 0,
            "hist": {"counts": counts.tolist(), "pmf": pmf.tolist(),
                     "values": [-3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3],
                     "model": "gennorm-zi"}}


def _report(layers):
    from co3cli.report import summarize

    total = summarize([{k: v for k, v in lay.items() if k != "hist"} for lay in layers],
                      sum(lay["bytes"] for lay in layers) + 100)
    return {"file": "/x/grads.co3", "format": "fp4-co3", "coder": {"id": "ans"},
            "model": "gennorm-zi", "scale_rule": "absmax", "steps": 1,
            "bytes": total["bytes"], "layers": layers, "total": total}


def _hist_axes(fig):
    return [ax for ax in fig.axes if ax.get_ylabel() == "probability (log)"]


def _bits_axes(fig):
    (ax,) = [ax for ax in fig.axes if ax.get_ylabel() == "bits per entry"]
    return ax


def test_report_figure_every_layer_labelled_and_the_outlier_clipped():
    pytest.importorskip("matplotlib", reason="figures need matplotlib (co3cli[plot])")
    from co3cli.plot import report_figure

    rng = np.random.default_rng(0)
    layers = [_layer("fc1.weight", 1_600_000, 1.1, rng), _layer("fc2.weight", 130_000, 1.6, rng),
              _layer("fc3.weight", 10_000, 2.3, rng), _layer("fc1.bias", 2000, 4.0, rng),
              _layer("fc2.bias", 1000, 5.4, rng), _layer("fc3.bias", 160, 22.6, rng)]
    fig = report_figure(_report(layers))
    hists = _hist_axes(fig)
    assert len(hists) == 6  # every layer gets a panel (the old figure showed 4 of 6)
    assert all(_labelled(ax) for ax in hists)
    assert [ax.get_title().split("\n")[0] for ax in hists][:2] == ["fc1.weight", "fc2.weight"]
    for ax in hists:  # few, distinct tick labels: none overlapping around zero
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert 3 <= len(ticks) <= 7 and len(set(ticks)) == len(ticks) and "0" in ticks
    assert fig.get_suptitle().startswith("co3 report: grads.co3") and "fp4-co3" in \
        fig.get_suptitle() and "ans" in fig.get_suptitle()
    bits = _bits_axes(fig)
    assert _labelled(bits)
    top = bits.get_ylim()[1]
    assert 5.4 < top < 10  # the 160-entry bias does not squash the other bars...
    assert "22.6" in [t.get_text() for t in bits.texts]  # ...its value is written on its cut bar
    keys = [t.get_text() for t in bits.get_legend().get_texts()]
    assert len(keys) == 4 and keys[0].startswith("entropy") and keys[-1].startswith("actual")
    ticks = [t.get_text() for t in bits.get_xticklabels()]
    assert ticks[0].startswith("fc1.weight") and ticks[-1].startswith("whole file")


def test_report_figure_caps_the_panels_and_pools_the_rest():
    pytest.importorskip("matplotlib", reason="figures need matplotlib (co3cli[plot])")
    from co3cli.plot import report_figure

    rng = np.random.default_rng(1)
    layers = [_layer(f"l{i}", 1000 * (20 - i), 1.5, rng) for i in range(20)]
    fig = report_figure(_report(layers), max_layers=8, max_bars=12)
    hists = _hist_axes(fig)
    assert len(hists) == 8  # 7 layers + one summary panel
    assert hists[-1].get_title().startswith("other 13 layers (pooled)")
    pooled = sum(p.get_height() for p in hists[-1].patches if np.isfinite(p.get_height()))
    assert pooled == pytest.approx(1.0)  # a probability distribution of the pooled symbols
    ticks = [t.get_text() for t in _bits_axes(fig).get_xticklabels()]
    assert len(ticks) == 13 and ticks[-2].startswith("other 9 layers")
    # nothing clipped when no bar stands out
    assert not _bits_axes(fig).texts and _bits_axes(fig).get_ylim()[1] >= 1.5


def test_report_plot_writes_a_png_of_a_real_file(dump_path, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="figures need matplotlib (co3cli[plot])")
    png = tmp_path / "r.png"
    code, out, err = run_cli("report", dump_path, "--format", "fp8-e5m2", "--plot", png, "-q",
                             capsys=capsys)
    assert code == 0, err
    assert png.read_bytes()[:8] == PNG
    assert not [p for p in tmp_path.iterdir() if p.name not in ("r.png", "dump.h5")]


# --- uep analyze --plot ----------------------------------------------------------------------

def _uep_result(error_vs_time=True):
    from co3cli.simulate.uep import report as ur

    codes = ur.build_codes(["uncoded", "repetition", "mds", "eep", "now-uep", "ew-uep"],
                           windows=[0.4, 0.35, 0.25], classes=[3, 3, 3], workers=30)
    return ur.analyze(codes, energies=[10, 1, 0.1] if error_vs_time else None, points=41)


def test_uep_figure_legends_bounded_identical_curves_named_axis_clipped():
    pytest.importorskip("matplotlib", reason="figures need matplotlib (co3cli[plot])")
    from co3cli.simulate.uep.plots import analysis_figure, scheme_groups

    res = _uep_result()
    assert min(res["error_vs_time"]["mds"]) < 1e-30  # what the old axis ran down to
    assert scheme_groups(res)["mds"] == ["mds", "eep"]
    fig = analysis_figure(res)
    dec, err = fig.axes
    assert _labelled(dec) and _labelled(err) and fig.get_suptitle()
    assert "%" not in err.get_ylabel() and "(log)" in err.get_ylabel()
    (schemes,) = fig.legends
    names = [t.get_text() for t in schemes.get_texts()]
    assert len(names) == 5 and "mds, eep (30 workers; identical curves)" in names
    assert len(dec.get_legend().get_texts()) == 3  # one per class, not 18 entries
    lo = err.get_ylim()[0]
    assert 1e-6 <= lo <= 1e-3  # clipped at a meaningful floor, not 1e-32
    assert any("below" in t.get_text() and "mds, eep" in t.get_text() for t in err.texts)
    # colour = scheme, line style = class
    lines = dec.get_lines()
    assert len({line.get_color() for line in lines}) == 5
    assert len({str(line.get_linestyle()) for line in lines}) == 3


def test_uep_figure_without_error_curves():
    pytest.importorskip("matplotlib", reason="figures need matplotlib (co3cli[plot])")
    from co3cli.simulate.uep.plots import analysis_figure

    fig = analysis_figure(_uep_result(error_vs_time=False))
    assert len(fig.axes) == 1 and _labelled(fig.axes[0])


def test_error_floor_follows_the_plateaus():
    from co3cli.simulate.uep.plots import error_floor

    t = np.linspace(0, 4, 9)
    curves = {"a": np.exp(-t), "b": 1e-4 + np.exp(-20 * t), "c": np.exp(-18 * t)}
    assert error_floor(curves, ["a", "b", "c"]) == pytest.approx(1e-5)  # below b's plateau
    assert error_floor({"a": np.exp(-t)}, ["a"]) == pytest.approx(1e-3)  # >= 3 decades shown
    assert error_floor({"c": np.exp(-18 * t)}, ["c"]) == pytest.approx(1e-6)  # never lower


# --- simulate plot ---------------------------------------------------------------------------

def _fake_run(path, compressor="none", params=None, gamma=0.0, seed=0, bpe=32.0):
    from co3cli.simulate.fl import METRICS
    from co3cli.simulate.flconfig import FLConfig

    path.mkdir(parents=True)
    cfg = FLConfig(compressor=compressor, compressor_params=params or {}, gamma=gamma,
                   seed=seed, rounds=10, eval_every=5).to_dict()
    (path / "config.json").write_text(json.dumps({"schema": "co3.simulate-fl/1",
                                                  "config": cfg}))
    rows = [",".join(METRICS)]
    for r in range(10):
        acc = 0.5 + 0.04 * r if r % 5 == 4 else ""
        v = {"round": r, "test_accuracy": acc, "uplink_bits_per_entry": bpe,
             "uplink_bytes": 1000 * bpe, "cumulative_uplink_bytes": 1000 * bpe * (r + 1)}
        rows.append(",".join(str(v.get(k, 0)) for k in METRICS))
    (path / "metrics.csv").write_text("\n".join(rows) + "\n")
    return path


def test_default_labels_come_from_the_configs(tmp_path):
    from co3cli.simulate.flplot import default_labels

    runs = [_fake_run(tmp_path / "r1"),
            _fake_run(tmp_path / "r2", "co3", {"format": "fp4-co3"}, gamma=0.7, bpe=1.1),
            _fake_run(tmp_path / "r3", "qsgd", {"levels": 2}, bpe=0.05)]
    assert default_labels(runs) == ["none (float32)", "co3 fp4-co3 gamma=0.7",
                                    "qsgd levels=2 gamma=0.0"]
    seeds = [_fake_run(tmp_path / f"s{i}", "co3", {"format": "fp4-co3"}, seed=i)
             for i in range(2)]
    assert default_labels(seeds) == ["co3 seed=0", "co3 seed=1"]
    twins = [_fake_run(tmp_path / f"t{i}", "co3", {"format": "fp4-co3"}) for i in range(2)]
    assert default_labels(twins) == ["co3 (t0)", "co3 (t1)"]
    (tmp_path / "t1" / "config.json").unlink()
    assert default_labels(twins) == ["t0", "t1"]


def test_runs_figure_units_and_labels(tmp_path):
    pytest.importorskip("matplotlib", reason="figures need matplotlib (co3cli[plot])")
    from co3cli.simulate.flplot import runs_figure

    runs = [_fake_run(tmp_path / "a"), _fake_run(tmp_path / "b", "co3",
                                                 {"format": "fp4-co3"}, gamma=0.7, bpe=1.1)]
    fig = runs_figure(runs)
    assert len(fig.axes) == 3 and all(_labelled(ax) for ax in fig.axes)
    assert "%" in fig.axes[0].get_ylabel() and "MB" in fig.axes[1].get_xlabel()
    assert "bits per entry" in fig.axes[2].get_ylabel()
    assert fig.axes[2].get_yscale() == "log"  # 32 vs 1.1 bits: log helps
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["none (float32)",
                                                          "co3 fp4-co3 gamma=0.7"]
    fig = runs_figure(runs[1:], labels=["mine"])
    assert fig.axes[2].get_yscale() == "linear"  # one flat run: no log axis
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["mine"]


def test_simulate_plot_labels_option(tmp_path, capsys):
    runs = [_fake_run(tmp_path / "a"), _fake_run(tmp_path / "b", bpe=8.0)]
    png = tmp_path / "p.png"
    code, out, err = run_cli("simulate", "plot", *runs, "-o", png, "--labels", "x,y,z",
                             capsys=capsys)
    assert code == 1 and not png.exists()
    assert err.strip().splitlines() == [
        "co3: error: --labels 'x,y,z' gives 3 label(s) for 2 run(s): give one non-empty "
        "label per run, comma-separated"]
    code, out, err = run_cli("simulate", "plot", *runs, "-o", png, "--labels", "x,",
                             capsys=capsys)
    assert code == 1 and "one non-empty label per run" in err and not png.exists()
    pytest.importorskip("matplotlib", reason="figures need matplotlib (co3cli[plot])")
    code, out, err = run_cli("simulate", "plot", *runs, "-o", png, "--labels", "float32,fp8",
                             capsys=capsys)
    assert code == 0, err
    assert png.read_bytes()[:8] == PNG


# --- matplotlib checked before any work ------------------------------------------------------

@pytest.fixture
def no_matplotlib(monkeypatch):
    """matplotlib made unimportable, as on an install without co3cli[plot]."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    real = builtins.__import__

    def fake(name, *args, **kw):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", fake)


def _never(what):
    def fail(*a, **k):
        raise AssertionError(f"{what} ran although --plot cannot be drawn")
    return fail


@pytest.mark.parametrize("command", ["report", "uep", "fl"])
def test_missing_matplotlib_stops_before_any_work(command, tmp_path, dump_path, capsys,
                                                  monkeypatch, no_matplotlib):
    import co3cli.inspection
    import co3cli.simulate.flplot
    import co3cli.simulate.uep.report

    png = tmp_path / "out.png"
    if command == "report":
        monkeypatch.setattr(co3cli.inspection, "report_file", _never("the report"))
        args = ["report", dump_path, "--format", "fp4-co3", "--plot", png]
    elif command == "uep":
        monkeypatch.setattr(co3cli.simulate.uep.report, "build_codes", _never("the analysis"))
        args = ["simulate", "uep", "analyze", "--error-vs-time", "--plot", png]
    else:
        monkeypatch.setattr(co3cli.simulate.flplot, "read_metrics", _never("reading runs"))
        args = ["simulate", "plot", _fake_run(tmp_path / "a"), "-o", png]
    code, out, err = run_cli(*args, capsys=capsys)
    assert code == 1
    assert err.strip().splitlines() == [
        "co3: error: --plot needs matplotlib: pip install 'co3cli[plot]'"]
    assert "Traceback" not in err + out and not png.exists()


def test_plot_output_checked_before_any_work(tmp_path, dump_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib", reason="figures need matplotlib (co3cli[plot])")
    import co3cli.inspection

    monkeypatch.setattr(co3cli.inspection, "report_file", _never("the report"))
    code, out, err = run_cli("report", dump_path, "--plot", tmp_path / "no" / "r.png",
                             capsys=capsys)
    assert code == 1 and "plot output folder" in err and "does not exist" in err
    code, out, err = run_cli("report", dump_path, "--plot", tmp_path, capsys=capsys)
    assert code == 1 and "is a directory" in err


def test_require_matplotlib_message(no_matplotlib):
    from co3cli.plot import require_matplotlib

    with pytest.raises(InputError, match=r"^--plot needs matplotlib: pip install "
                       r"'co3cli\[plot\]'$"):
        require_matplotlib()


def test_report_file_checks_matplotlib_before_any_work(tmp_path, dump_path, monkeypatch,
                                                        no_matplotlib):
    """The library call, not only the CLI: no report is computed when the PNG cannot be drawn."""
    import co3cli.inspection
    import co3cli.report

    monkeypatch.setattr(co3cli.report, "report_dump", _never("the report"))
    with pytest.raises(InputError, match=r"^--plot needs matplotlib"):
        co3cli.inspection.report_file(dump_path, format="fp4-co3", plot=tmp_path / "r.png")
    assert not (tmp_path / "r.png").exists()
