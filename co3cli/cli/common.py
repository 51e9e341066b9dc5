"""What the ``co3`` commands share: option definitions, printing, the one-thread torch setup.

Nothing here imports torch, scipy or h5py at import time (``co3 --help`` stays fast).
"""

from __future__ import annotations

import json
import os
import sys

import typer

FormatOpt = typer.Option(None, "--format", "-f",
                         help="Grid: fp8-e5m2 (default), fp8-e4m3, fp8-143-b10, fp4-co3, fp4-e2m1, "
                              "fpE.M[-bB][-ieee|-fn|-full], uniformB[-cX].")
ScaleOpt = typer.Option(None, "--scale", "-s",
                        help="Scale rule: absmax (default), gennorm-mse, co3-poly.")
CoderOpt = typer.Option(None, "--coder", "-c",
                        help="Entropy coder: ans (default; order-0 rANS), huffman, or ctx "
                             "(context-adaptive: smallest files, ~5x slower).")
ModelOpt = typer.Option(None, "--model", "-m",
                        help="Model behind the table: gennorm-zi (default), gennorm2-zi (GenNorm mixture "
                             "fitted to the cells; closest to the counts), gennorm, normal, "
                             "normal-zi, laplace, laplace-zi, dweibull, empirical.")
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
