"""Examples in the docs run: the README's Python block and the docstring examples."""

import doctest
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import co3cli.coding

ROOT = Path(__file__).resolve().parents[1]


BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
OPTIONAL = ("flwr", "lightning", "accelerate", "transformers")  # the optional extras' packages


def test_readme_has_python_examples():
    assert BLOCKS


@pytest.mark.parametrize("i", range(len(BLOCKS)), ids=lambda i: f"block{i + 1}")
def test_readme_python_example_runs(i):
    """Each block in a fresh interpreter (as a reader would run it) in the repository (the
    examples name files relative to it); a block that hangs (a torch.distributed teardown) fails
    after a timeout instead of stalling. A block using an optional extra that is not installed
    is skipped, naming the extra."""
    code = BLOCKS[i]
    for mod in OPTIONAL:
        if re.search(rf"^\s*(import|from) {mod}\b", code, re.M) and not importlib.util.find_spec(mod):
            pytest.skip(f"README python block {i + 1} needs {mod!r} (an optional extra) "
                        "which is not installed")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"README python block {i + 1}:\n{run.stderr[-3000:]}"


def test_readme_commands_exist():
    from co3cli.cli.app import app

    import typer.main

    names = set(typer.main.get_command(app).commands)
    used = set(re.findall(r"`co3 ([a-z]+)", (ROOT / "README.md").read_text()))
    assert used and used <= names, used - names


def test_docstring_examples():
    assert doctest.testmod(co3cli.coding).failed == 0
