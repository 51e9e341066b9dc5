"""co3 simulate fl --config FILE / --set key=value: precedence, typing, errors, reruns."""

import csv
import json

import pytest

from conftest import run_cli

from co3cli import InputError
from co3cli.simulate import flconfig
from co3cli.simulate.flconfig import FLConfig, load_config_file, parse_field, resolve_config

FAST = {"task": "digits-mlp", "clients": 3, "rounds": 3, "batch_size": 16, "eval_every": 3}


def write(path, doc):
    path.write_text(json.dumps(doc))
    return path


def test_defaults_file_options_sets_in_that_order(tmp_path):
    assert resolve_config() == FLConfig()
    f = write(tmp_path / "c.json", {"clients": 3, "gamma": 0.5, "lr": 0.2})
    cfg = resolve_config({"clients": 4, "lr": None}, file=f)  # None: not given
    assert (cfg.clients, cfg.gamma, cfg.lr, cfg.rounds) == (4, 0.5, 0.2, 200)
    cfg = resolve_config({"clients": 4}, file=f, sets=["clients=5", "gamma=0.7"])
    assert (cfg.clients, cfg.gamma) == (5, 0.7)


def test_set_is_typed_by_the_field(tmp_path):
    cfg = resolve_config(sets=["participation=none", "dump_rounds=0,2", "test_fraction=0.1",
                               "task=digits-cnn", "local-steps=3",
                               'stragglers={"scheme": "mds", "workers": 15}'])
    assert cfg.participation is None and cfg.dump_rounds == (0, 2) and cfg.local_steps == 3
    assert cfg.test_fraction == 0.1 and cfg.task == "digits-cnn"
    assert cfg.stragglers == {"scheme": "mds", "workers": 15}
    assert resolve_config(sets=["participation=3"]).participation == 3
    with pytest.raises(InputError, match=r"--set clients: 'x' is not an integer"):
        resolve_config(sets=["clients=x"])
    with pytest.raises(InputError, match=r"--set lr: 'fast' is not a number"):
        resolve_config(sets=["lr=fast"])
    with pytest.raises(InputError, match=r"--set stragglers: '\[1\]' is not a JSON object"):
        resolve_config(sets=["stragglers=[1]"])
    with pytest.raises(InputError, match=r"--set 'gamma' must look like key=value"):
        resolve_config(sets=["gamma"])
    assert parse_field("participation", "NONE", "--x") is None


def test_set_compressor_parameters_and_unknown_keys():
    cfg = resolve_config({"compressor": "qsgd"}, sets=["levels=8"])
    assert cfg.compressor_params == {"levels": 8}
    cfg = resolve_config({"compressor": "co3", "format": "fp4-co3"}, sets=["coder=huffman"])
    assert cfg.compressor_params == {"format": "fp4-co3", "coder": "huffman"}
    with pytest.raises(InputError) as e:
        resolve_config({"compressor": "topk"}, sets=["colour=red"])
    msg = str(e.value)
    assert "--set colour: unknown key" in msg and "\n" not in msg
    assert "clients" in msg and "gamma" in msg and "'topk' (fraction)" in msg
    with pytest.raises(InputError, match=r"compressor 'none' \(none\)"):
        resolve_config(sets=["levels=2"])


def test_another_compressor_drops_the_file_parameters(tmp_path):
    f = write(tmp_path / "c.json", {"compressor": "co3", "compressor_params": {"format": "fp4-co3"}})
    assert resolve_config({"compressor": "co3", "coder": "ctx"}, file=f).compressor_params == {
        "format": "fp4-co3", "coder": "ctx"}
    cfg = resolve_config({"compressor": "qsgd", "param": ["levels=2"]}, file=f)
    assert cfg.compressor == "qsgd" and cfg.compressor_params == {"levels": 2}
    cfg = resolve_config(file=f, sets=["compressor=topk", "fraction=0.1"])
    assert cfg.compressor_params == {"fraction": 0.1}
    with pytest.raises(InputError, match="--format applies to --compressor co3 only"):
        resolve_config({"compressor": "qsgd", "format": "fp4-co3"}, file=f)


def test_straggler_options_over_a_file(tmp_path):
    f = write(tmp_path / "c.json", {"stragglers": {"scheme": "mds", "workers": 15, "rate": 2.0}})
    s = resolve_config({"deadline": 1.0, "classes": "2,2,5"}, file=f).stragglers
    assert s == {"scheme": "mds", "workers": 15, "rate": 2.0, "deadline": 1.0,
                 "class_sizes": (2, 2, 5)}
    s = resolve_config({"stragglers": "ew-uep", "wait_for": 9}, file=f).stragglers
    assert s == {"scheme": "ew-uep", "rate": 1.0, "wait_for": 9}  # another scheme: a new one
    assert resolve_config({"rate": 3.0}).stragglers is None  # --rate alone: nothing to apply to
    with pytest.raises(InputError, match="need --stragglers SCHEME"):
        resolve_config({"deadline": 1.0})


def test_config_files_json_toml_and_errors(tmp_path, monkeypatch):
    run_doc = {"schema": "co3.simulate-fl/1", "config": {**FAST, "dump_rounds": [0, 2]},
               "versions": {}}
    assert resolve_config(file=write(tmp_path / "config.json", run_doc)).dump_rounds == (0, 2)
    toml = tmp_path / "c.toml"
    toml.write_text('task = "digits-mlp"\nclients = 3\ncompressor = "co3"\n\n'
                    '[compressor_params]\nformat = "fp4-co3"\n')
    if flconfig.tomllib is not None:
        cfg = resolve_config(file=toml)
        assert cfg.clients == 3 and cfg.compressor_params == {"format": "fp4-co3"}
    monkeypatch.setattr(flconfig, "tomllib", None)  # Python 3.10
    with pytest.raises(InputError, match="TOML needs Python 3.11 or later.*give the config as JSON"):
        load_config_file(toml)
    with pytest.raises(InputError, match=r"unknown field\(s\) \['clinets'\]; allowed: task, "):
        resolve_config(file=write(tmp_path / "typo.json", {"clinets": 3}))
    bad = tmp_path / "bad.json"
    bad.write_text("clients = 3")
    with pytest.raises(InputError, match="is not valid JSON .*the .toml suffix"):
        resolve_config(file=bad)
    with pytest.raises(InputError, match="must hold a table of config fields"):
        resolve_config(file=write(tmp_path / "list.json", [1, 2]))
    with pytest.raises(InputError, match="cannot read config file"):
        resolve_config(file=tmp_path / "missing.json")
    with pytest.raises(InputError, match="dump_rounds must be a list"):
        resolve_config(file=write(tmp_path / "dr.json", {"dump_rounds": 3}))


def test_cli_precedence_through_print_torchrun(tmp_path, capsys):
    f = write(tmp_path / "c.json", {**FAST, "gamma": 0.5, "seed": 7})
    out = tmp_path / "tr"
    code, o, e = run_cli("simulate", "fl", "--config", f, "--clients", "2", "--gamma", "0.5",
                         "--set", "rounds=4", "--print-torchrun", "-o", out, capsys=capsys)
    assert code == 0, e
    assert "torchrun" in o and "fl-config.json" in o
    cfg = json.loads((out / "fl-config.json").read_text())
    assert (cfg["clients"], cfg["rounds"], cfg["gamma"], cfg["seed"]) == (2, 4, 0.5, 7)
    assert cfg["task"] == "digits-mlp"  # from the file: --task was not given
    assert resolve_config(file=out / "fl-config.json") == FLConfig.from_dict(cfg)
    code, o, e = run_cli("simulate", "fl", "--set", "colour=red", "-o", tmp_path / "x",
                         capsys=capsys)
    assert code == 1 and e.startswith("co3: error: --set colour: unknown key")
    assert len(e.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


def metrics(run):
    with open(run / "metrics.csv", newline="") as f:
        return [(r["train_loss"], r["test_accuracy"], r["uplink_bytes"]) for r in csv.DictReader(f)]


def test_a_runs_config_json_reruns_it(tmp_path, capsys):
    pytest.importorskip("torch")
    args = ["--task", "digits-mlp", "--clients", "3", "--rounds", "3", "--eval-every", "3",
            "-c", "co3", "--format", "fp4-co3", "--set", "gamma=0.5", "--set", "batch_size=16",
            "--dump-rounds", "1", "-q"]
    code, o, e = run_cli("simulate", "fl", *args, "-o", tmp_path / "a", capsys=capsys)
    assert code == 0, e
    code, o, e = run_cli("simulate", "fl", "--config", tmp_path / "a" / "config.json", "-q",
                         "-o", tmp_path / "b", capsys=capsys)
    assert code == 0, e
    a, b = (json.loads((tmp_path / r / "config.json").read_text()) for r in "ab")
    assert a["config"] == b["config"] and a["config"]["gamma"] == 0.5
    assert a["config"]["compressor_params"] == {"format": "fp4-co3"}
    assert metrics(tmp_path / "a") == metrics(tmp_path / "b")
    assert (tmp_path / "b" / "transmitted.h5").exists()
