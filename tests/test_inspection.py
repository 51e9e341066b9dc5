"""co3cli.inspection: inspect a .co3, summarise a codebook, report a file, build a codebook."""

import json

import pytest

from co3cli import CorruptDataError, InputError
from co3cli.codec import compress
from co3cli.inspection import (build_codebook, codebook_summary, inspect_co3, is_co3,
                               report_file)


@pytest.fixture
def co3_path(dump_path, tmp_path):
    out = tmp_path / "g.co3"
    compress(dump_path, out, format="fp8-e5m2", coder="huffman")
    return out


def test_inspect_co3_describes_a_verified_file(co3_path, dump_path):
    info = inspect_co3(co3_path)
    d = info.to_dict()
    assert list(d) == ["file", "verified", "version", "bytes", "header_bytes", "trailer_bytes",
                       "header", "layers"]
    assert d["verified"] is True and d["bytes"] == co3_path.stat().st_size
    assert "layers" not in d["header"] and d["header"]["format"]["id"] == "fp8-e5m2"
    assert [lay["name"] for lay in info.layers] == ["fc1.weight", "fc1.bias", "fc2.weight",
                                                    "dead.weight"]
    lay = info.layers[0]
    assert lay["shape"] == [60, 100] and len(lay["scales"]) == 3
    assert lay["bytes"] >= lay["payload_bytes"] + lay["table_bytes"]
    assert info.header_bytes + sum(x["bytes"] for x in info.layers) + info.trailer_bytes \
        == info.bytes
    bad = co3_path.read_bytes()
    (co3_path.parent / "bad.co3").write_bytes(bad[:-40] + bytes(b ^ 1 for b in bad[-40:]))
    with pytest.raises(CorruptDataError):
        inspect_co3(co3_path.parent / "bad.co3")
    assert is_co3(co3_path) and not is_co3(dump_path)


def test_build_and_summarise_a_codebook(dump_path, tmp_path):
    book = tmp_path / "book.json"
    res = build_codebook(dump_path, book, coder="ans", coder_params={"precision": 12},
                         steps=[0], model="gennorm-zi")
    d = res.to_dict()
    assert d["output"] == str(book) and d["format"] == "fp8-e5m2" and d["model"] == "gennorm-zi"
    assert d["coder"]["precision"] == 12 and d["checksum"] == json.loads(book.read_text())["checksum"]
    info = codebook_summary(book)
    assert info.format_id == "fp8-e5m2" and info.nsym > 0
    assert sorted(t["name"] for t in info.tables) == sorted(res.layers)  # saved sorted
    t = info.tables[0]
    assert t["model"] == "gennorm-zi" and 0 < t["entropy"] <= 8 and 0 < t["min"] <= t["max"]
    j = info.to_dict()
    assert j["file"] == str(book) and "layers" not in j and j["schema"] == "co3.codebook/1"
    pooled = build_codebook(dump_path, tmp_path / "p.json", coder="huffman", pooled=True)
    assert pooled.layers == ["*"]
    assert "max_len" in codebook_summary(tmp_path / "p.json").fields["coder"]


def test_report_file_on_a_co3_and_a_dump(co3_path, dump_path):
    rep = report_file(co3_path)
    assert {"layers", "total"} <= set(rep) and rep["total"]["bpe"] > 0
    rep = report_file(dump_path, format="fp4-co3", coder="ans")
    assert rep["source"] == str(dump_path) and "fp4-co3" in json.dumps(rep)
    with pytest.raises(InputError, match="--format, --max-len only apply to a dump"):
        report_file(co3_path, format="fp4-co3", coder_params={"max_len": 12})
    with pytest.raises(InputError, match="--nonfinite only apply to a dump"):
        report_file(co3_path, nonfinite="zero")


def test_inspect_reports_a_step_grouped_layers_own_table_bytes(tmp_path):
    """A stored (``LYS``) layer's table field is its table set, a few bytes, not the
    representative table a reader builds to describe it (hundreds of bytes)."""
    from co3cli.container import open_co3
    from co3cli.container.tableset import pack_tableset
    from co3cli.data import SAMPLE_DATA_DIR

    out = tmp_path / "m.co3"
    compress(SAMPLE_DATA_DIR / "digits-mlp.h5", out, format="fp8-e5m2", coder="ans", model="auto")
    info = inspect_co3(out)
    with open(out, "rb") as f:
        co3 = open_co3(f)
        blocks = {b.name: b for b in co3.layers()}
        nsteps = len(co3.header["steps"])
    grouped = [lay for lay in info.layers if blocks[lay["name"]].step_groups is not None]
    assert grouped, "the sample dump has no step-grouped layer any more"
    for lay in grouped:
        b = blocks[lay["name"]]
        assert lay["table_bytes"] == b.table_nbytes <= len(pack_tableset(b.step_groups, nsteps))
        assert lay["table_bytes"] < len(b.table)
        assert lay["bytes"] >= lay["payload_bytes"] + lay["table_bytes"]
