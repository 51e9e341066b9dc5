"""A new coder is one class plus one registration: the file pipeline, the co3 compressor and the
CLI take it from the registry with no other change (the layout the README promises)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from co3cli.coding import CODERS
from co3cli.errors import CorruptDataError
from co3cli.registry import Configurable


class _RawTable:
    """Every symbol as a little-endian uint16: no model, 16 bits per entry."""

    def __init__(self, nsym: int):
        self.nsym = nsym

    def encode(self, sym, cols=None) -> bytes:
        return np.asarray(sym, dtype="<u2").tobytes()

    def decode(self, payload, n, cols=None):
        if len(payload) != 2 * n:
            raise CorruptDataError(f"raw16: {len(payload)} bytes for {n} symbols")
        return np.frombuffer(payload, dtype="<u2").astype(np.uint16)

    def expected_bits(self, counts) -> float:
        return 16.0 * float(np.sum(counts))

    def to_bytes(self) -> bytes:
        return self.nsym.to_bytes(2, "little")

    def ints(self):
        return np.ones(self.nsym, np.int64)

    def pmf(self):
        return np.full(self.nsym, 1.0 / self.nsym)


class Raw16(Configurable):
    """uint16 symbols as they are (a test coder)."""

    id, kind, PARAMS = "raw16", "coder", {}

    def table_from_weights(self, weights):
        return _RawTable(len(weights))

    def table_from_ints(self, ints):
        return _RawTable(len(ints))

    def table_from_bytes(self, data, nsym):
        if int.from_bytes(data, "little") != nsym:
            raise CorruptDataError("raw16: table size mismatch")
        return _RawTable(nsym)


@pytest.fixture
def raw16(monkeypatch):
    monkeypatch.setattr(CODERS, "_entries", dict(CODERS._entries))
    monkeypatch.setattr(CODERS, "_doc", dict(CODERS._doc))
    CODERS.register(Raw16)  # the one registration line
    return Raw16


def test_a_registered_coder_runs_the_file_pipeline(raw16, dump_path, tmp_path, capsys):
    from conftest import run_cli

    from co3cli.dump import Dump

    out, back = tmp_path / "g.co3", tmp_path / "back.h5"
    code, _, err = run_cli("compress", dump_path, "-o", out, "--coder", "raw16", "--model",
                           "gennorm-zi", "-q", capsys=capsys)  # auto would store its layers
    assert code == 0, err
    assert run_cli("decompress", out, "-o", back, "-q", capsys=capsys)[0] == 0
    with Dump.open(back) as d:
        assert d.read_layer("fc1.weight").shape == (3, 6000)
    info = json.loads(run_cli("inspect", out, "--json", capsys=capsys)[1])
    payload = sum(layer["payload_bytes"] for layer in info["layers"])
    assert payload == 2 * 3 * (6000 + 60 + 1 + 40)  # 16 bits per entry, nothing else


def test_a_registered_coder_runs_in_the_co3_compressor(raw16):
    from co3cli.compressors import get_compressor

    comp = get_compressor("co3", coder="raw16", format="fp8-e5m2")
    v = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    packet = comp.compress(v, {}, np.random.default_rng(0))
    assert np.array_equal(comp.decompress(packet.payload, v.size, {}), packet.v_hat)


def test_unregistered_coder_is_refused_naming_the_registered():
    from co3cli.compressors import get_compressor
    from co3cli.errors import InputError

    with pytest.raises(InputError, match="unknown coder 'raw16'; allowed: ans, huffman, ctx"):
        get_compressor("co3", coder="raw16")
