"""Hostile codebooks: crafted from the documented ``co3.codebook/1`` JSON layout, each with a
valid checksum (recomputed here as the codebook module does), so only the structure checks of
``codebook.load`` stand between them and ``co3 compress --codebook`` / ``co3 codebook show``.

Both commands load through ``codebook.load``, so they accept exactly the same books; every
refusal is one ``co3: error:`` line, exit 1, no traceback, no output file left.
"""

from __future__ import annotations

import json
import os
import zlib

import numpy as np
import pytest

from conftest import run_cli, synthetic_layers

DEEP = 100_000
_HOLE = "@@hole@@"


def _canonical(doc: dict) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def write_book(path, doc: dict, hole: str | None = None) -> None:
    """Write ``doc`` with its checksum (crc32 of the canonical JSON of everything else);
    ``hole``: raw JSON text put where the string ``_HOLE`` stands (too deep for json.dumps)."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    fill = (lambda t: t) if hole is None else (lambda t: t.replace(json.dumps(_HOLE), hole))
    crc = zlib.crc32(fill(_canonical(body)).encode())
    path.write_text(fill(_canonical({**body, "checksum": crc})))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A dump and the JSON document of a valid codebook built from it."""
    from co3cli import codebook as cb
    from co3cli.coding import get_coder
    from co3cli.dump import Dump, write_dump
    from co3cli.formats import get_grid

    dump = tmp_path_factory.mktemp("hostile-book") / "dump.h5"
    write_dump(dump, synthetic_layers(np.random.default_rng(1)), steps=np.array([0, 1, 2]))
    with Dump.open(dump) as d:
        book = cb.build(d, get_grid("fp8-e5m2"), get_coder("ans"))
    return dump, book.doc


def _first(doc):
    return doc["layers"][next(iter(doc["layers"]))]


def _set(path, value):
    def edit(doc):
        *keys, last = path
        node = doc
        for k in keys:
            node = node[next(iter(node))] if k == "<layer>" else node[k]
        node[last] = value
    return edit


def _delete(path):
    def edit(doc):
        *keys, last = path
        node = doc
        for k in keys:
            node = node[next(iter(node))] if k == "<layer>" else node[k]
        del node[last]
    return edit


def _first_layer(value):
    def edit(doc):
        doc["layers"][next(iter(doc["layers"]))] = value
    return edit


CASES = {
    "deep-meta": (_set(("layers", "<layer>", "meta", "deep"), _HOLE), "nests deeper"),
    "meta-list": (_set(("layers", "<layer>", "meta"), [1, 2]), "meta"),
    "meta-number": (_set(("layers", "<layer>", "meta"), 3), "meta"),
    "meta-missing": (_delete(("layers", "<layer>", "meta")), "meta"),
    "params-string": (_set(("layers", "<layer>", "meta", "params"), "beta"), "params"),
    "p0-string": (_set(("layers", "<layer>", "meta", "p0"), "half"), "p0"),
    "meta-model-list": (_set(("layers", "<layer>", "meta", "model"), ["x"]), "model"),
    "entry-list": (_first_layer([1, 2, 3]), "object"),
    "table-missing": (_delete(("layers", "<layer>", "table")), "table"),
    "table-floats": (lambda doc: _first(doc).update(table=[v + 0.5 for v in _first(doc)["table"]]),
                     "integers"),
    "table-string": (_set(("layers", "<layer>", "table"), "abc"), "table"),
    "table-negative": (lambda doc: _first(doc)["table"].__setitem__(0, -1), "table"),
    "table-huge": (lambda doc: _first(doc)["table"].__setitem__(0, 1 << 70), "table"),
    "layers-empty": (_set(("layers",), {}), "layers"),
    "layers-list": (_set(("layers",), [1]), "layers"),
    "model-missing": (_delete(("model",)), "model"),
    "model-unknown": (_set(("model",), "nope"), "nope"),
    "scale-unknown": (_set(("scale_rule",), "nope"), "nope"),
    "scale-clip-on-fp8": (_set(("scale_rule",), "clip"), "clip"),
    "version-missing": (_delete(("co3cli_version",)), "co3cli_version"),
    "source-list": (_set(("source",), [1]), "source"),
    "coder-unknown": (_set(("coder",), {"id": "nope"}), "nope"),
    "coder-bad-param": (lambda doc: doc["coder"].update(precision="x"), "codebook"),
    "format-string": (_set(("format",), "fp8-e5m2"), "format"),
}


def assert_refused(code, err, needle):
    assert "Traceback" not in err, err
    assert code == 1, (code, err)
    assert err.startswith("co3: error:") and err.endswith("\n") and err.count("\n") == 1, err
    assert "codebook" in err and needle.lower() in err.lower(), (needle, err)


def _both_refuse(base, book, tmp_path, capsys, needle):
    dump, _ = base
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = run_cli("compress", dump, "-o", out / "x.co3", "--codebook", book,
                           capsys=capsys)
    assert_refused(code, err, needle)
    assert os.listdir(out) == []
    code, _, err = run_cli("codebook", "show", book, capsys=capsys)
    assert_refused(code, err, needle)


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_codebook_refused(base, tmp_path, capsys, case):
    edit, needle = CASES[case]
    doc = json.loads(json.dumps(base[1]))
    edit(doc)
    book = tmp_path / f"{case}.json"
    write_book(book, doc, hole="[" * DEEP + "]" * DEEP if case == "deep-meta" else None)
    _both_refuse(base, book, tmp_path, capsys, needle)


def test_deep_nesting_anywhere_refused(base, tmp_path, capsys):
    """Nesting is refused before parsing, wherever it is (here: the top level's source)."""
    doc = json.loads(json.dumps(base[1]))
    doc["source"]["deep"] = _HOLE
    book = tmp_path / "deep.json"
    write_book(book, doc, hole="{\"a\":" * DEEP + "1" + "}" * DEEP)
    _both_refuse(base, book, tmp_path, capsys, "nests deeper")


def test_brackets_inside_strings_do_not_count(base, tmp_path, capsys):
    doc = json.loads(json.dumps(base[1]))
    doc["source"]["note"] = "[{" * 1000 + '\\"' + "[" * 100
    book = tmp_path / "strings.json"
    write_book(book, doc)
    code, _, err = run_cli("codebook", "show", book, capsys=capsys)
    assert code == 0, err
    code, _, err = run_cli("compress", base[0], "-o", tmp_path / "x.co3", "--codebook", book,
                           capsys=capsys)
    assert code == 0, err


def test_oversized_codebook_refused(base, tmp_path, capsys):
    from co3cli.codebook import MAX_BYTES

    book = tmp_path / "big.json"
    write_book(book, base[1])
    text = book.read_text()
    book.write_text(" " * (MAX_BYTES + 1 - len(text) + 1) + text)  # valid JSON, too large
    _both_refuse(base, book, tmp_path, capsys, "MiB")


@pytest.mark.parametrize("fmt", [None, "uniform4-c3"])
def test_valid_book_accepted_by_both(base, tmp_path, capsys, fmt):
    book = tmp_path / "ok.json"
    if fmt is None:
        write_book(book, base[1])
    else:  # a format that fixes its scale ('clip')
        code, _, err = run_cli("codebook", "build", base[0], "-o", book, "--format", fmt, "-q",
                               capsys=capsys)
        assert code == 0, err
    code, out, err = run_cli("codebook", "show", book, capsys=capsys)
    assert code == 0, err
    code, _, err = run_cli("compress", base[0], "-o", tmp_path / "x.co3", "--codebook", book,
                           capsys=capsys)
    assert code == 0, err
