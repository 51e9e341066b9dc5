"""Examples in the docs run: the README's Python block and the docstring examples."""

import doctest
import re
from pathlib import Path

import co3cli.coding

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_example_runs(monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples name files relative to the repository
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_readme_commands_exist():
    from co3cli.cli.app import app

    import typer.main

    names = set(typer.main.get_command(app).commands)
    used = set(re.findall(r"`co3 ([a-z]+)", (ROOT / "README.md").read_text()))
    assert used and used <= names, used - names


def test_docstring_examples():
    assert doctest.testmod(co3cli.coding).failed == 0
