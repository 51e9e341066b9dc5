"""A co3 file passed where another kind belongs names what it is and which command takes it
(``co3cli.fileio.sniff`` / ``misplaced``); a codebook without a layer's table gives the command
that builds a pooled one; choice options list their values as the CLI spells them."""

import json

import numpy as np
import pytest

from co3cli.fileio import CO3_MAGIC, KINDS, sniff
from conftest import run_cli


def refused(capsys, *args):
    code, _, err = run_cli(*args, capsys=capsys)
    assert "Traceback" not in err, err
    assert code == 1, (code, err)
    assert err.startswith("co3: error:") and err.count("\n") == 1, err
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A small dump, its .co3, a codebook, a dump with one more layer, a run folder."""
    from co3cli.dump import write_dump

    d = tmp_path_factory.mktemp("kinds")
    rng = np.random.default_rng(0)
    g = (rng.standard_normal((2, 256)) * 1e-3).astype(np.float32)
    write_dump(d / "dump.h5", {"fc.weight": (g, (16, 16))}, steps=[0, 1])
    write_dump(d / "more.h5", {"fc.weight": (g, (16, 16)), "fc.bias": (g[:, :16], (16,))},
               steps=[0, 1])
    from co3cli.cli.app import main

    for args in (["compress", d / "dump.h5", "-o", d / "g.co3", "-q"],
                 ["codebook", "build", d / "dump.h5", "-o", d / "book.json", "-q"]):
        try:
            main([str(a) for a in args])
        except SystemExit as e:
            assert not e.code, args
    run = d / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"schema": "co3.simulate-fl/1", "config": {}}))
    (run / "metrics.csv").write_text("round,lr,train_loss,uplink_bytes\n0,0.1,2.3,100\n")
    (d / "other.h5").write_bytes(b"")
    import h5py

    with h5py.File(d / "other.h5", "w") as f:
        f["x"] = np.zeros(3)
    return d


def test_sniff_kinds(files):
    assert sniff(files / "dump.h5") == "dump"
    assert sniff(files / "g.co3") == "co3"
    assert sniff(files / "book.json") == "codebook"
    assert sniff(files / "run" / "config.json") == "run-config"
    assert sniff(files / "run" / "metrics.csv") == "run-file"
    assert sniff(files / "other.h5") == "hdf5"
    assert sniff(files / "run") == "run-dir"
    assert sniff(files) is None  # a folder that is not a run
    with open(files / "g.co3", "rb") as f:
        f.read(3)
        assert sniff(f) == "co3"  # a file object is read from its start
    assert set(KINDS) >= {"dump", "co3", "codebook", "run-config", "run-file", "hdf5"}


def test_co3_magic_is_the_containers():
    from co3cli.container import MAGIC

    assert MAGIC == CO3_MAGIC


DUMP_COMMANDS = {"fit": ["fit", "{src}"], "compress": ["compress", "{src}", "-o", "{d}/x.co3"],
                 "codebook build": ["codebook", "build", "{src}", "-o", "{d}/b.json"]}


@pytest.mark.parametrize("command", sorted(DUMP_COMMANDS))
@pytest.mark.parametrize("name,what,takes", [
    ("book.json", "is a co3 codebook", "co3 compress --codebook"),
    ("g.co3", "is a compressed .co3 file", "co3 decompress"),
    ("run/config.json", "config.json of a co3 simulate fl run", "co3 simulate plot RUN_DIR"),
    ("run/metrics.csv", "of a co3 simulate fl run folder", "co3 simulate clock RUN_DIR"),
])
def test_not_a_dump(files, capsys, command, name, what, takes):
    cmd = [a.format(src=files / name, d=files) for a in DUMP_COMMANDS[command]]
    err = refused(capsys, *cmd)
    assert what in err and "not a gradient dump" in err and takes in err, err
    assert "not a readable HDF5" not in err


@pytest.mark.parametrize("command", ["inspect", "decompress"])
@pytest.mark.parametrize("name,what", [("dump.h5", "is a co3 gradient dump"),
                                       ("book.json", "is a co3 codebook"),
                                       ("other.h5", "HDF5 file that is not a co3 gradient dump")])
def test_not_a_co3(files, capsys, command, name, what):
    extra = ["-o", str(files / "y.h5")] if command == "decompress" else []
    err = refused(capsys, command, files / name, *extra)
    assert what in err and "not a .co3 file" in err and "bad magic" not in err, err
    if name == "dump.h5":
        assert "co3 compress" in err


@pytest.mark.parametrize("name,what", [("dump.h5", "is a co3 gradient dump"),
                                       ("g.co3", "is a compressed .co3 file")])
def test_not_a_codebook(files, capsys, name, what):
    err = refused(capsys, "codebook", "show", files / name)
    assert what in err and "not a codebook" in err and "not valid JSON" not in err, err
    err = refused(capsys, "compress", files / "dump.h5", "--codebook", files / name,
                  "-o", files / "z.co3")
    assert what in err and "not a codebook" in err, err


def test_codebook_without_a_layer_gives_the_pooled_command(files, capsys):
    err = refused(capsys, "compress", files / "more.h5", "--codebook", files / "book.json",
                  "-o", files / "z.co3")
    assert "no table for layer 'fc.bias'" in err, err
    assert "co3 codebook build DUMP --pooled --format fp8-e5m2 --coder ans" in err, err
    assert not (files / "z.co3").exists()


def test_the_pooled_command_builds_a_book_that_covers(files, capsys):
    from co3cli.codebook import load

    line = load(files / "book.json").pooled_command(str(files / "more.h5"),
                                                    str(files / "pooled.json"))
    code, _, err = run_cli(*line.split()[1:], "-q", capsys=capsys)
    assert code == 0, err
    code, _, err = run_cli("compress", files / "more.h5", "--codebook", files / "pooled.json",
                           "-o", files / "z.co3", "-q", capsys=capsys)
    assert code == 0, err


@pytest.mark.parametrize("args,values", [
    (["compress", "{d}/dump.h5", "--coder", "zz", "-o", "{d}/c.co3"], "ans, huffman, ctx"),
    (["compress", "{d}/dump.h5", "--nonfinite", "zz", "-o", "{d}/c.co3"], "error, zero"),
    (["fit", "{d}/dump.h5", "--models", "gennorm,zz"], "gennorm-zi, gennorm, normal"),
    (["compress", "{d}/dump.h5", "--scale", "zz", "-o", "{d}/c.co3"], "absmax, gennorm-mse"),
    (["capture", "--on-nonfinite", "zz", "-o", "{d}/c.h5"], "error, skip, record"),
])
def test_choices_spelled_as_the_cli_spells_them(files, capsys, args, values):
    err = refused(capsys, *[a.format(d=files) for a in args])
    assert values in err, err
    tail = err.split("allowed:")[-1].split("is not one of")[-1]
    assert "[" not in tail and "'" not in tail, err


def test_one_of_message():
    from co3cli.errors import InputError
    from co3cli.registry import one_of, spell

    assert spell(("a", "b")) == "a, b"
    assert one_of("mode", "a", ("a", "b")) == "a"
    with pytest.raises(InputError, match=r"^X: mode='c' is not one of a, b$"):
        one_of("mode", "c", ("a", "b"), who="X: ")


def test_a_run_folder_where_a_dump_belongs(files, capsys):
    err = refused(capsys, "fit", files / "run")
    assert "is a co3 simulate fl run folder, not a gradient dump" in err
    assert "co3 simulate plot RUN_DIR" in err and "transmitted.h5" not in err
    (files / "run" / "transmitted.h5").write_bytes((files / "dump.h5").read_bytes())
    try:
        err = refused(capsys, "fit", files / "run")
        assert f"the dump {files / 'run' / 'transmitted.h5'}" in err, err
    finally:
        (files / "run" / "transmitted.h5").unlink()
    err = refused(capsys, "fit", files)
    assert "is a directory" in err
