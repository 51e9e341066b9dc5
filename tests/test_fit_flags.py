"""``co3 fit`` flags what must not pass silently (``co3cli.models.flags``): a fit at its search
bound, a degenerate scale, a degenerate layer, a failed goodness of fit, and a best model that
switched because the first one was flagged; in the JSON and in the table."""

import json

import numpy as np
import pytest

from co3cli.fitting import fit_dump
from co3cli.models import BETA_BOUNDS
from co3cli.models.flags import FLAGS, layer_flags, model_flags, switch_note
from conftest import run_cli

N = 4000


def _cases():
    rng = np.random.default_rng(0)
    sign = np.sign(rng.standard_normal(N))
    return {
        "ok": rng.standard_normal(N),
        "spread": sign * np.exp(-rng.exponential(30, N)),  # magnitudes over many decades
        "flat": rng.uniform(-1, 1, N),                      # flat top: beta -> infinity
        "bimodal": sign * (1 + 0.2 * rng.standard_normal(N)),
        "zeros": np.zeros(64),
        "const": np.full(64, 0.5),
        "tiny": rng.standard_normal(10),
    }


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    from co3cli.dump import write_dump

    path = tmp_path_factory.mktemp("flags") / "flags.h5"
    layers = {k: (v.astype(np.float32)[None], (v.size,)) for k, v in _cases().items()}
    write_dump(path, layers, steps=[0])
    res = fit_dump(path, ["gennorm-zi", "gennorm", "normal-zi", "laplace-zi", "dweibull"])
    return path, {r["layer"]: r for r in res["fits"]}


def test_clean_layer_has_no_flags(fitted):
    r = fitted[1]["ok"]
    assert r["flags"] == [] and r["switched"] is None
    assert all(m["flags"] == [] for name, m in r["models"].items() if name != "dweibull")


def test_beta_at_lower_bound_and_degenerate_scale_switch_the_best(fitted):
    r = fitted[1]["spread"]
    g = r["models"]["gennorm-zi"]
    assert g["params"]["beta"] == pytest.approx(BETA_BOUNDS[0])
    assert "beta-at-lower-bound" in g["flags"] and "scale-degenerate" in g["flags"]
    assert r["best"] == "dweibull"
    assert r["switched"]["from"] == "gennorm-zi" and r["switched"]["to"] == "dweibull"
    assert "beta-at-lower-bound" in r["switched"]["because"]


def test_beta_at_upper_bound_marks_the_best(fitted):
    r = fitted[1]["flat"]
    assert "beta-at-upper-bound" in r["models"]["gennorm-zi"]["flags"]
    assert r["best"] == "gennorm-zi" and r["switched"] is None
    assert "best-flagged" in r["flags"]


def test_failed_goodness_of_fit(fitted):
    r = fitted[1]["bimodal"]
    g = r["models"]["gennorm-zi"]
    assert g["gof"]["ks"] > 0.1 and "gof-failed" in g["flags"]
    assert not any("bound" in f for f in g["flags"])
    assert r["switched"] == {"from": "gennorm-zi", "to": "dweibull", "because": ["gof-failed"]}


@pytest.mark.parametrize("layer,flag", [("zeros", "all-zero"), ("const", "constant"),
                                        ("tiny", "few-entries")])
def test_degenerate_layers(fitted, layer, flag):
    assert flag in fitted[1][layer]["flags"]


def test_small_sample_is_not_failed_by_chance(fitted):
    """KS of 10 entries is large by chance: below the 1 % critical value it is no failure."""
    g = fitted[1]["tiny"]["models"]["gennorm-zi"]
    assert g["gof"]["ks"] > 0.1 and "gof-failed" not in g["flags"]


def test_flag_functions_directly():
    assert layer_flags(np.zeros(5)) == ["all-zero"]
    assert layer_flags(np.array([0.0, 1.0, -1.0] * 40)) == ["constant"]
    assert layer_flags(np.arange(1.0, 200.0)) == []
    assert model_flags({"beta": 20.0, "scale": 1.0}, {}, 1.0) == ["beta-at-upper-bound"]
    assert model_flags({"c": 0.05, "scale": 1.0}, {}, 1.0) == ["c-at-lower-bound"]
    assert model_flags({"sigma": 1e-20}, {}, 1.0) == ["scale-degenerate"]
    assert model_flags({"b": 1.0}, {"ks": 0.5, "sample": 10000, "n_nonzero": 1}, 1.0) == \
        ["gof-failed"]
    assert switch_note("a", "b", {"a": ["gof-failed"], "b": []})["to"] == "b"
    assert switch_note("a", "a", {"a": ["gof-failed"]}) is None
    assert switch_note("a", "b", {"a": []}) is None
    assert set(FLAGS) >= {"all-zero", "constant", "few-entries", "beta-at-lower-bound",
                          "beta-at-upper-bound", "scale-degenerate", "gof-failed"}


def test_table_and_json_show_the_flags(fitted, capsys):
    path = fitted[0]
    code, out, err = run_cli("fit", path, "-q", capsys=capsys)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("spread"))
    assert "dweibull*" in line and "beta-at-lower-bound" in line
    assert "* spread: best switched from gennorm-zi to dweibull: gennorm-zi is flagged" in out
    assert "beta-at-lower-bound: GenNorm beta at its search bound" in out  # the legend
    ok = next(x for x in out.splitlines() if x.startswith("ok "))
    assert ok.rstrip().endswith("-") and "*" not in ok
    code, out, err = run_cli("fit", path, "--json", "-q", capsys=capsys)
    doc = json.loads(out)
    r = next(f for f in doc["fits"] if f["layer"] == "spread")
    assert isinstance(r["flags"], list) and r["switched"]["to"] == "dweibull"
    assert "flags" in r["models"]["gennorm-zi"]
