"""The package's structure, read from its imports with ``ast`` (nothing is imported or run).

Layers (``co3cli/__init__.py`` documents them): imports point downwards only, never up, and no
group of modules imports itself in a circle (counting imports inside functions too). The
transports (the DDP hook, the gradient recorder) import nothing of the simulator.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "co3cli"

# layer -> module name prefixes (a prefix matches the module and everything under it)
LAYERS = {
    0: ("errors", "registry", "checks", "varint", "detmath", "formats", "quantize", "scales",
        "models", "mixture", "coding", "tables", "segments", "workers"),
    1: ("fileio", "progress", "container", "dump", "data", "codec", "references", "codebook", "fitting",
        "report", "inspection", "plot", "lossless"),
    2: ("compressors",),
    3: ("ddp", "fsdp", "integrations", "recorder", "capture", "tasks", "jobs", "simulate", "demo",
        "flower"),
    4: ("cli", "__main__", "sample_data.make_sample_data"),
}
NAMES = {0: "core", 1: "I/O", 2: "compressors", 3: "transports and simulators", 4: "CLI and scripts"}
TRANSPORTS = ("co3cli.ddp", "co3cli.fsdp", "co3cli.integrations.lightning",
              "co3cli.integrations.accelerate", "co3cli.recorder", "co3cli.flower")


def _modules() -> dict[str, Path]:
    mods = {}
    for f in PKG.rglob("*.py"):
        parts = f.relative_to(PKG.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports (anywhere in the file)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in mods:  # "co3cli.coding.CODERS" -> "co3cli.coding"
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        deps = _imports(name, path, mods)
        # a package's __init__ gathering its submodules, and a submodule reading its package's
        # __init__ (``from co3cli import __version__``), are not circles of design
        deps = {d for d in deps if not (path.name == "__init__.py" and d.startswith(name + "."))}
        deps = {d for d in deps if not (mods[d].name == "__init__.py" and name.startswith(d + "."))}
        graph[name] = deps
    return graph


def _layer(module: str) -> int | None:
    rel = module.split(".", 1)[1] if "." in module else ""
    for layer, prefixes in LAYERS.items():
        if any(rel == p or rel.startswith(p + ".") for p in prefixes):
            return layer
    return None


def _closure(graph, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for d in graph[todo.pop()]:
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def upward_imports(graph) -> list[str]:
    return [f"{m} ({NAMES[_layer(m)]}) imports {d} ({NAMES[_layer(d)]})"
            for m, deps in sorted(graph.items()) if m != "co3cli"
            for d in sorted(deps) if d != "co3cli" and _layer(d) > _layer(m)]


def circles(graph) -> list[str]:
    reach = {m: _closure(graph, m) for m in graph}
    return sorted({" <-> ".join(sorted({m} | {d for d in reach[m] if m in reach[d]}))
                   for m in graph if m in reach[m]})


def test_every_module_has_a_layer():
    missing = sorted(m for m in _graph() if m != "co3cli" and _layer(m) is None)
    assert not missing, f"modules without a layer (add them to LAYERS here): {missing}"


def test_imports_point_downwards():
    bad = upward_imports(_graph())
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_circle():
    bad = circles(_graph())
    assert not bad, "import circles:\n" + "\n".join(bad)


def test_transports_do_not_import_the_simulator():
    graph = _graph()
    for t in TRANSPORTS:
        bad = sorted(d for d in _closure(graph, t) if d.startswith("co3cli.simulate"))
        assert not bad, f"{t} imports the simulator: {bad}"


def test_the_checks_can_fail(tmp_path, monkeypatch):
    """A fake package with a circle through a function-level import, which is also upward."""
    import sys

    pkg = tmp_path / "co3cli"
    (pkg / "compressors").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0'\n")
    (pkg / "formats.py").write_text("def f():\n    from co3cli.compressors import g\n")
    (pkg / "compressors" / "__init__.py").write_text("from co3cli.formats import f\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    graph = _graph()
    assert circles(graph) == ["co3cli.compressors <-> co3cli.formats"]
    assert upward_imports(graph) == ["co3cli.formats (core) imports co3cli.compressors (compressors)"]
