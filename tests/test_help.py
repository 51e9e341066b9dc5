"""Every help level shows a runnable example, and every example parses.

Walks the Click tree that typer builds from ``co3cli.cli.app``: the root, every group
(``codebook``, ``simulate``, ``simulate uep``) and every leaf command must have an
``Example:`` line in the help the user sees; each example's ``co3 ...`` commands (split at
``&&``, ``;`` and ``|``) must name a real command and parse against it: options, arguments and
their types, as Click would check them before running (nothing runs).
"""

import re
import shlex

import pytest
import typer.main
from typer.testing import CliRunner

from co3cli.cli.app import app

ROOT = typer.main.get_command(app)


def _walk(cmd, path=("co3",)):
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _walk(sub, path + (name,))


LEVELS = list(_walk(ROOT))
IDS = [" ".join(p) for p, _ in LEVELS]


def examples(help_text: str) -> list[str]:
    """The examples of a help text: each ``Example:`` paragraph, its wrapped lines joined."""
    found = []
    for para in re.split(r"\n\s*\n", help_text or ""):
        para = " ".join(para.split())
        if para.startswith("Example:"):
            found += [m.strip() for m in re.findall(r"Example:\s*(.*?)(?=Example:|$)", para)]
    return found


def commands(example: str) -> list[list[str]]:
    """The ``co3`` commands of one example, as argument lists without ``co3``."""
    out = []
    for part in re.split(r"&&|;|\|", example):
        words = shlex.split(part.split(" # ")[0])
        if words and words[0] == "co3":
            out.append(words[1:])
    return out


def parse(args: list[str]):
    """Resolve ``args`` to a leaf command and parse its options and arguments (no run)."""
    Context = typer.main.click.Context
    ctx = Context(ROOT, info_name="co3")
    cmd, rest = ROOT, list(args)
    while hasattr(cmd, "commands"):
        assert rest, f"co3 {' '.join(args)}: names a group, not a command"
        name, rest = rest[0], rest[1:]
        assert name in cmd.commands, f"co3 {' '.join(args)}: no command {name!r}"
        cmd = cmd.commands[name]
        if hasattr(cmd, "commands"):
            ctx = Context(cmd, info_name=name, parent=ctx)
    return cmd, cmd.make_context(name, rest, parent=ctx)


def test_the_tree_has_every_group():
    assert {"co3", "co3 codebook", "co3 simulate", "co3 simulate uep"} <= set(IDS)
    assert len(IDS) >= 18


@pytest.mark.parametrize("i", range(len(LEVELS)), ids=IDS)
def test_every_help_level_shows_an_example_that_parses(i):
    path, cmd = LEVELS[i]
    shown = CliRunner().invoke(app, [*path[1:], "--help"], prog_name="co3")
    assert shown.exit_code == 0, shown.output
    assert "Example:" in shown.output, f"{' '.join(path)} --help has no Example: line"
    found = examples(cmd.help)
    assert found, f"{' '.join(path)}: no example in its help"
    for ex in found:
        cmds = commands(ex)
        assert cmds, f"{' '.join(path)}: example {ex!r} runs no co3 command"
        for args in cmds:
            parse(args)  # raises click's UsageError for an unknown option or a bad value
        if len(path) > 1:  # a command's example runs that command (or one below a group)
            assert any(tuple(a[:len(path) - 1]) == path[1:] for a in cmds), (path, ex)


def test_top_level_help_names_the_coders():
    text = ROOT.help
    assert all(c in text for c in ("ans", "huffman", "ctx"))


def test_a_bad_example_is_caught():
    with pytest.raises(Exception, match="no such option|No such option"):
        parse(["compress", "d.h5", "-o", "g.co3", "--colour", "red"])
    with pytest.raises(AssertionError, match="no command"):
        parse(["simulate", "flying"])
    with pytest.raises(Exception, match="not a valid integer|is not a valid"):
        parse(["simulate", "fl", "--rounds", "many", "-o", "r/"])
