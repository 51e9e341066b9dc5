"""What the ``co3`` commands share: option definitions, printing, the one-thread torch setup.

Nothing here imports torch, scipy or h5py at import time (``co3 --help`` stays fast).
"""

from __future__ import annotations

import json
import os
import sys

import typer


def choices(registry, default: str | None = None, docs: bool = False) -> str:
    """A registry's ids as the CLI spells them (``a (default), b, c``; ``docs``: with their
    one-line docs), for help texts: a new entry shows up here without touching the CLI."""
    parts = []
    for key in registry.ids():
        notes = [n for n in ("default" if key == default else "", registry.doc(key) if docs else "")
                 if n]
        parts.append(f"{key} ({'; '.join(notes)})" if notes else key)
    return ", ".join(parts)


def kind_choices(kind: str, default: str | None = None) -> str:
    """The valid values of an option of ``kind``, from its registry (for help texts); ``default``
    marks the default where the command sets its own (tasks, optimizers)."""
    if kind == "format":
        from co3cli.formats import FORMATS

        return f"{choices(FORMATS, 'fp8-e5m2')}, {FORMATS.describe}"
    if kind == "scale":
        from co3cli.scales import SCALE_RULES

        return choices(SCALE_RULES, "absmax")
    if kind == "coder":
        from co3cli.coding import CODERS

        return choices(CODERS, default or "ans", docs=True)
    if kind == "model":
        from co3cli.tables import TABLE_MODELS

        return choices(TABLE_MODELS, default or "gennorm-zi")
    if kind == "compressor":
        from co3cli.compressors import COMPRESSORS

        return choices(COMPRESSORS, "none")
    if kind in ("task", "optimizer"):
        from co3cli.tasks import OPTIMIZERS, TASKS

        return choices(TASKS if kind == "task" else OPTIMIZERS, default)
    if kind == "uep code":
        from co3cli.simulate.uep import CODES

        return choices(CODES)
    raise ValueError(f"no registry for {kind!r}")


FormatOpt = typer.Option(None, "--format", "-f", help=f"Grid: {kind_choices('format')}.")
ScaleOpt = typer.Option(None, "--scale", "-s", help=f"Scale rule: {kind_choices('scale')}.")
CoderOpt = typer.Option(None, "--coder", "-c", help=f"Entropy coder: {kind_choices('coder')}.")
ModelOpt = typer.Option(None, "--model", "-m", help=f"Model behind the table: {kind_choices('model')}.")
MaxLenOpt = typer.Option(None, "--max-len", help="Huffman: longest code length (default 16).")
PrecisionOpt = typer.Option(None, "--precision", help="ANS: frequency table bits (default 16).")
NonfiniteOpt = typer.Option("error", "--nonfinite",
                            help="NaN/Inf in the dump: error (default) or zero (replace by 0).")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of a table.")
QuietOpt = typer.Option(False, "--quiet", "-q", help="No progress bars.")


def coder_params(max_len, precision) -> dict:
    """--max-len / --precision as the coder's parameters (only those given)."""
    return {k: v for k, v in (("max_len", max_len), ("precision", precision)) if v is not None}


def emit(text: str, to_stderr: bool = False) -> None:
    print(text, file=sys.stderr if to_stderr else sys.stdout)


def emit_json(obj, to_stderr: bool = False, **kw) -> None:
    emit(json.dumps(obj, indent=1, **kw), to_stderr)


def summary(res, output: str, json_out: bool, quiet: bool, line: str) -> None:
    """A command's result: JSON or one line; on stderr when the data itself goes to stdout."""
    to_err = output == "-"
    if json_out:
        emit_json(res.to_dict(), to_err)
    elif not (quiet and to_err):
        emit(line, to_err)


def torch_one_thread() -> None:
    """One torch (and OpenMP) thread for the commands that train."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


def given(ctx: typer.Context, values: dict, names) -> dict:
    """The values of the options ``names`` that the command line (or the environment) set."""
    def set_by_user(name: str) -> bool:
        source = ctx.get_parameter_source(name)  # Click's ParameterSource (typer may vendor it)
        return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")

    return {n: values[n] for n in names if set_by_user(n)}
