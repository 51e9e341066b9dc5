"""Progress on stderr: a heartbeat line when stderr is not a terminal, nothing with -q.

The terminal bar itself is tested in test_capture_cli.py (on a pty); here stderr is captured
(pytest's capsys: not a terminal), and ``CO3_HEARTBEAT=0`` makes every update print a line.
"""

import io
import re

import pytest

from co3cli.errors import InputError
from co3cli.progress import Heartbeat, duration, heartbeat_interval, progress_bar, progress_iter
from tests.conftest import run_cli


def beats(err: str, desc: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith(f"co3: {desc}: ")]


def test_heartbeat_lines_count_postfix_eta_and_done():
    out = io.StringIO()
    hb = Heartbeat("fl co3", total=4, unit="round", interval=0.0, stream=out)
    hb.set_postfix({"bpe": "1.146"}, refresh=False)
    hb.update(1)
    hb.set_postfix(acc="0.8812")
    hb.update(1)
    hb.close()
    hb.close()  # once only
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert re.fullmatch(r"co3: fl co3: round 1/4 \(25 %\), bpe 1\.146, [\d.]+ s elapsed, "
                        r"ETA [\d.]+ s", lines[0]), lines[0]
    assert lines[1].startswith("co3: fl co3: round 2/4 (50 %), acc 0.8812, "), lines[1]
    assert lines[2].endswith(" elapsed, done") and "round 2/4" in lines[2], lines[2]


def test_heartbeat_is_silent_for_a_run_shorter_than_its_interval():
    out = io.StringIO()
    with Heartbeat("capture", total=3, interval=3600.0, stream=out) as hb:
        for _ in range(3):
            hb.update(1)
    assert out.getvalue() == ""  # and no "done" line either: it never spoke


def test_heartbeat_iterates_with_the_iterable_length():
    out = io.StringIO()
    hb = Heartbeat("compress", unit="layer", iterable=["a", "b"], interval=0.0, stream=out)
    assert list(hb) == ["a", "b"]
    assert "layer 2/2 (100 %)" in out.getvalue().splitlines()[1]


def test_duration_spellings():
    assert [duration(s) for s in (0.04, 4.2, 42, 124, 3900)] == [
        "0.0 s", "4.2 s", "42 s", "2 min 4 s", "1 h 05 min"]


def test_interval_from_the_environment(monkeypatch):
    monkeypatch.delenv("CO3_HEARTBEAT", raising=False)
    assert heartbeat_interval() == 20.0
    monkeypatch.setenv("CO3_HEARTBEAT", "5s")
    assert heartbeat_interval() == 5.0
    for bad in ("x", "-1", "inf", "nan"):
        monkeypatch.setenv("CO3_HEARTBEAT", bad)
        with pytest.raises(InputError, match="CO3_HEARTBEAT=.* must be a number of seconds >= 0"):
            heartbeat_interval()


def test_progress_bar_kinds(capsys, monkeypatch):
    monkeypatch.setenv("CO3_HEARTBEAT", "0")
    assert isinstance(progress_bar(True, "x"), Heartbeat)  # captured stderr: not a terminal
    silent = progress_bar(False, "x", total=2)
    assert silent.disable and not isinstance(silent, Heartbeat)
    silent.update(2)
    assert list(progress_iter([1, 2], False, "x")) == [1, 2]
    assert list(progress_iter([1, 2], True, "x")) == [1, 2]
    err = capsys.readouterr().err
    assert beats(err, "x")[-1].endswith("done") and "layer 2/2" in err


# the commands: one line per update with CO3_HEARTBEAT=0, none with -q


def _heartbeat_cli(args, desc, capsys, monkeypatch, again=()):
    """The heartbeat lines of ``args``; then the same with -q (and ``again``) prints none."""
    monkeypatch.setenv("CO3_HEARTBEAT", "0")
    code, out, err = run_cli(*args, capsys=capsys)
    assert code == 0, err
    loud = beats(err, desc)
    code, out, err = run_cli(*args, "-q", *again, capsys=capsys)
    assert code == 0, err
    assert beats(err, desc) == [] and "co3: " not in err, err
    return loud


def test_capture_heartbeat(tmp_path, capsys, monkeypatch):
    lines = _heartbeat_cli(["capture", "--task", "digits-mlp", "--steps", "3",
                            "-o", tmp_path / "d.h5"], "digits-mlp", capsys, monkeypatch)
    assert [ln.split(",")[0] for ln in lines[:3]] == [
        "co3: digits-mlp: step 1/3 (33 %)", "co3: digits-mlp: step 2/3 (67 %)",
        "co3: digits-mlp: step 3/3 (100 %)"]
    assert "ETA" in lines[0] and lines[-1].endswith("done")


def test_simulate_fl_heartbeat(tmp_path, capsys, monkeypatch):
    lines = _heartbeat_cli(["simulate", "fl", "--task", "digits-mlp", "--clients", "2",
                            "--rounds", "2", "--eval-every", "1", "-c", "co3",
                            "--format", "fp4-co3", "-o", tmp_path / "r"], "fl co3", capsys,
                           monkeypatch, again=["--overwrite"])
    assert re.match(r"co3: fl co3: round 1/2 \(50 %\), loss [\d.]+, bpe [\d.]+, acc [\d.]+, "
                    r".* elapsed, ETA ", lines[0]), lines
    assert lines[-1].endswith("done")


def test_uep_train_heartbeat(tmp_path, capsys, monkeypatch):
    lines = _heartbeat_cli(["simulate", "uep", "train", "--task", "digits-mlp", "--scheme",
                            "ew-uep", "--workers", "15", "--deadline", "1", "--steps", "2",
                            "--eval-every", "1", "-o", tmp_path / "u.csv"],
                           "uep train ew-uep", capsys, monkeypatch)
    assert "step 2/2 (100 %), loss " in lines[1] and " acc " in lines[1] and " sim " in lines[1]


def test_compress_heartbeat(dump_path, tmp_path, capsys, monkeypatch):
    lines = _heartbeat_cli(["compress", dump_path, "-o", tmp_path / "g.co3"], "compress",
                           capsys, monkeypatch)
    assert lines and "layer 1/" in lines[0]
