"""``co3 codebook build`` and ``co3 codebook show``."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from co3cli.cli.common import (CoderOpt, FormatOpt, JsonOpt, MaxLenOpt, ModelOpt, NonfiniteOpt,
                               PrecisionOpt, QuietOpt, ScaleOpt, coder_params, emit, emit_json)

codebook_app = typer.Typer(help="Build and show codebooks (integer tables frozen from a model)."
                           "\n\nExample: co3 codebook build sample_data/mnist5k-mlp.h5 -o "
                           "book.json && co3 codebook show book.json",
                           no_args_is_help=True)


@codebook_app.command("build")
def codebook_build_cli(
    input: str = typer.Argument(..., help="Gradient dump (.h5), or - for stdin."),
    output: str = typer.Option(..., "--output", "-o", help="Codebook JSON file, or - for stdout."),
    format: Optional[str] = FormatOpt, scale: Optional[str] = ScaleOpt, coder: Optional[str] = CoderOpt,
    model: Optional[str] = ModelOpt, max_len: Optional[int] = MaxLenOpt,
    precision: Optional[int] = PrecisionOpt,
    steps: Optional[List[int]] = typer.Option(None, "--step", help="Use only these step indices "
                                              "(repeatable), e.g. --step 0 for a first-step book."),
    pooled: bool = typer.Option(False, "--pooled", help="One table for all layers ('*')."),
    nonfinite: str = NonfiniteOpt, json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Fit a model per layer and freeze it into integer tables saved as JSON.

    Example: co3 codebook build sample_data/mnist5k-mlp.h5 --format fp8-e5m2 --model gennorm-zi
    --coder huffman -o book.json
    """
    from co3cli.inspection import build_codebook

    res = build_codebook(input, output, format=format, scale=scale, coder=coder,
                         coder_params=coder_params(max_len, precision), model=model, steps=steps,
                         pooled=pooled, nonfinite=nonfinite, progress=not quiet)
    if json_out:
        emit_json(res.to_dict(), output == "-")
    elif output != "-":
        emit(f"{input} -> {output}: {len(res.layers)} table(s), format {res.format}, "
             f"coder {res.coder}, model {res.model}")


@codebook_app.command("show")
def codebook_show_cli(book: Path = typer.Argument(..., help="Codebook JSON file."),
                      json_out: bool = JsonOpt):
    """Summarize a codebook: per layer, the model, its parameters and the table's code lengths.

    Example: co3 codebook show book.json
    """
    from co3cli.inspection import codebook_summary
    from co3cli.report import format_table

    info = codebook_summary(book)
    if json_out:
        emit_json(info.to_dict())
        return
    d = info.fields
    emit(f"{book}: {d['schema']}, format {info.format_id} ({info.nsym} symbols), coder {d['coder']}, "
         f"model {d['model']}, scale {d['scale_rule']}, co3cli {d['co3cli_version']}")
    emit(format_table(info.tables, [("name", "layer", ""), ("model", "model", ""),
                                    ("beta", "beta", ".3f"), ("p0", "p0", ".3f"),
                                    ("zero_bits", "bits(0)", ".2f"), ("min", "min int", "d"),
                                    ("max", "max int", "d"), ("entropy", "table entropy", ".3f")]))
