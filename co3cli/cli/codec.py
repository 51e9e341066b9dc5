"""``co3 compress``, ``co3 decompress``, ``co3 inspect``, ``co3 report``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from co3cli.cli.common import (CoderOpt, FormatOpt, JsonOpt, MaxLenOpt, ModelOpt, NonfiniteOpt,
                               PrecisionOpt, QuietOpt, ScaleOpt, coder_params, emit, emit_json,
                               kind_choices, summary)
from co3cli.plot import require_matplotlib

ThreadsOpt = typer.Option(None, "--threads",
                          help="Threads that code layers and steps in parallel (default: every "
                               "core this process may use; 1: no threads). The output is the "
                               "same for any number.")
# co3 compress's own defaults (co3cli.codec.DEFAULT_CODER / DEFAULT_MODEL: README "Rate")
FileCoderOpt = typer.Option(None, "--coder", "-c", help=f"Entropy coder: {kind_choices('coder', 'ctx')}.")
FileModelOpt = typer.Option(None, "--model", "-m",
                            help=f"Model behind the table: {kind_choices('model', 'auto')}.")

KeyEveryOpt = typer.Option(None, "--key-every",
                           help="ctx-steps: a key step (decodable alone) every K steps; the "
                                "others are coded given the previous step (default 16; 0: the "
                                "first step only).")
LevelOpt = typer.Option(None, "--level",
                        help="Lossless formats: fast (default: pairs of words, one table per "
                             "layer, 8-lane rANS) or max (neighbour contexts: smaller on dead "
                             "units, 7-20x slower).")


def compress_cli(
    input: str = typer.Argument(..., help="Gradient dump (.h5), or - for stdin."),
    output: str = typer.Option(..., "--output", "-o", help="Output .co3 file, or - for stdout."),
    format: Optional[str] = FormatOpt, scale: Optional[str] = ScaleOpt,
    coder: Optional[str] = FileCoderOpt, model: Optional[str] = FileModelOpt,
    codebook: Optional[Path] = typer.Option(None, "--codebook", "-b",
                                            help="Reuse a saved codebook (it fixes format, scale "
                                                 "rule, coder and tables)."),
    max_len: Optional[int] = MaxLenOpt, precision: Optional[int] = PrecisionOpt,
    nonfinite: str = NonfiniteOpt, threads: Optional[int] = ThreadsOpt, json_out: bool = JsonOpt,
    quiet: bool = QuietOpt, key_every: Optional[int] = KeyEveryOpt,
    level: Optional[str] = LevelOpt,
    references: bool = typer.Option(True, "--references/--no-references",
                                    help="ctx: code a layer given an earlier layer of its shape "
                                         "where that is smaller (the streams of an FL dump); "
                                         "--no-references: never (files that readers "
                                         "without LYX blocks read)."),
):
    """Quantize and entropy-code a gradient dump into a .co3 file.

    Example: co3 compress sample_data/mnist5k-mlp.h5 -o grads.co3 --format fp4-co3 --coder ans

    Example: co3 compress dump.h5 -o grads.co3 --coder ctx-steps --key-every 16

    Example: co3 compress dump.h5 -o exact.co3 --format f32-lossless --level max
    """
    from co3cli.codec import compress

    params = {**coder_params(max_len, precision),
              **({} if key_every is None else {"key_every": key_every})}
    res = compress(input, output, format=format, scale=scale, coder=coder,
                   coder_params=params, model=model, codebook=codebook,
                   nonfinite=nonfinite, progress=not quiet, threads=threads, level=level,
                   references=references)
    replaced = f", {res.nonfinite_replaced} NaN/Inf set to 0" if res.nonfinite_replaced else ""
    summary(res, output, json_out, quiet, f"{input} -> {output}: {res.entries} entries, "
            f"{res.nbytes} bytes, {res.bpe:.4f} bits/entry, {res.seconds:.2f} s{replaced}")


def decompress_cli(
    input: str = typer.Argument(..., help=".co3 file, or - for stdin."),
    output: str = typer.Option(..., "--output", "-o", help="Output dump (.h5), or - for stdout."),
    threads: Optional[int] = ThreadsOpt, json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Decode a .co3 file into a co3.gradients/1 dump of the dequantized gradients.

    Example: co3 decompress grads.co3 -o grads_q.h5
    """
    from co3cli.codec import decompress

    res = decompress(input, output, progress=not quiet, threads=threads)
    summary(res, output, json_out, quiet, f"{input} -> {output}: {res.entries} entries from "
            f"{res.nbytes} bytes, {res.seconds:.2f} s")


def inspect_cli(input: str = typer.Argument(..., help=".co3 file, or - for stdin."),
                decode: bool = typer.Option(False, "--decode", help="Also decode every chunk "
                                            "(nothing is written)."),
                json_out: bool = JsonOpt):
    """Verify a .co3 file (magic, version, every checksum and size) and describe its contents.

    Example: co3 inspect grads.co3 --json
    """
    from co3cli.inspection import inspect_co3
    from co3cli.report import format_table

    info = inspect_co3(input, decode=decode)
    if json_out:
        emit_json(info.to_dict())
        return
    h = info.header
    emit(f"{input}: .co3 v{info.version}, {info.bytes} bytes, all checksums verified"
         + (", every chunk decoded" if decode else ""))
    emit(f"format {h['format']['id']}, scale {h['scale_rule']}, coder {h['coder']}, model {h['model']}, "
         f"{len(h['steps'])} step(s), made by co3cli {h['co3cli_version']} at {h['created']}")
    cols = [("name", "layer", ""), ("shape", "shape", ""), ("bytes", "bytes", "d"),
            ("payload_bytes", "payload", "d"), ("table_bytes", "table", "d"), ("model", "model", "")]
    if any(lay["same_as"] for lay in info.layers):  # references to an equal earlier layer
        cols.append(("same_as", "same as", ""))
    config_version = h["coder"].get("model_version", 1) if h["coder"].get("id") == "ctx" else None
    if any(lay["ctx_model_version"] not in (None, config_version) for lay in info.layers):
        cols.append(("ctx_model_version", "ctx model", "d"))  # a group's or a given layer's
    if any(lay["given"] for lay in info.layers):  # coded given an earlier layer (LYX)
        cols.append(("given", "coded given", ""))
    if any(lay["scale_fallbacks"] is not None for lay in info.layers):  # a rule that can fall back
        cols.append(("scale_fallbacks", "scale fallbacks (steps)", "d"))
    emit(format_table(info.layers, cols))


def report_cli(
    input: str = typer.Argument(..., help=".co3 file or gradient dump (.h5), or - for stdin."),
    format: Optional[str] = FormatOpt, scale: Optional[str] = ScaleOpt, coder: Optional[str] = CoderOpt,
    model: Optional[str] = ModelOpt, max_len: Optional[int] = MaxLenOpt,
    precision: Optional[int] = PrecisionOpt, nonfinite: str = NonfiniteOpt,
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw a PNG: each layer's "
                                        "symbols against the model, bits per entry against "
                                        "the bounds (needs matplotlib)."),
    json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Bits per entry against entropy, per layer and in total, from real bytes.

    On a dump, it compresses (to a temporary file) with the given options first.

    Example: co3 report grads.co3 --json;  co3 report sample_data/mnist5k-mlp.h5 --format fp4-co3
    """
    from co3cli.inspection import report_file
    from co3cli.report import bits_table

    if plot is not None:
        require_matplotlib(plot)  # before any work
    rep = report_file(input, format=format, scale=scale, coder=coder,
                      coder_params=coder_params(max_len, precision), model=model,
                      nonfinite=nonfinite, progress=not quiet, plot=plot)
    if json_out:
        emit_json(rep)
    else:
        emit(bits_table(rep))
