"""The ``co3`` command line: thin typed wrappers over the library; all printing happens here.

Errors from the library (``Co3Error``: bad files, bad option values such as an unknown format)
become one line on stderr and exit code 1; usage errors found by the parser (unknown options,
missing arguments, values of the wrong type) are one line too, with Click's exit code 2.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import List, Optional

import numpy as np
import typer

from co3cli import __version__
from co3cli.errors import Co3Error, InputError
from co3cli.report import bits_table, format_table as _table

app = typer.Typer(
    name="co3",
    help="How many bits does a gradient really need? Capture, fit, codebook, compress, "
         "decompress and report gradient dumps (GenNorm models, fp8/fp4 grids, Huffman/ANS).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
codebook_app = typer.Typer(help="Build and show codebooks (integer tables frozen from a model).",
                           no_args_is_help=True)
app.add_typer(codebook_app, name="codebook")

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


def _coder_params(max_len, precision) -> dict:
    return {k: v for k, v in (("max_len", max_len), ("precision", precision)) if v is not None}


def _emit(text: str, to_stderr: bool = False) -> None:
    print(text, file=sys.stderr if to_stderr else sys.stdout)


def _summary(res, output: str, json_out: bool, quiet: bool, line: str) -> None:
    """A command's result: JSON or one line; on stderr when the data itself goes to stdout."""
    to_err = output == "-"
    if json_out:
        _emit(json.dumps(res.to_dict(), indent=1), to_err)
    elif not (quiet and to_err):
        _emit(line, to_err)


@app.command("compress")
def compress_cli(
    input: str = typer.Argument(..., help="Gradient dump (.h5), or - for stdin."),
    output: str = typer.Option(..., "--output", "-o", help="Output .co3 file, or - for stdout."),
    format: Optional[str] = FormatOpt, scale: Optional[str] = ScaleOpt, coder: Optional[str] = CoderOpt,
    model: Optional[str] = ModelOpt,
    codebook: Optional[Path] = typer.Option(None, "--codebook", "-b",
                                            help="Reuse a saved codebook (it fixes format, scale "
                                                 "rule, coder and tables)."),
    max_len: Optional[int] = MaxLenOpt, precision: Optional[int] = PrecisionOpt,
    nonfinite: str = NonfiniteOpt, json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Quantize and entropy-code a gradient dump into a .co3 file.

    Example: co3 compress sample_data/mnist5k-mlp.h5 -o grads.co3 --format fp4-co3 --coder ans
    """
    from co3cli.codec import compress

    res = compress(input, output, format=format, scale=scale, coder=coder,
                   coder_params=_coder_params(max_len, precision), model=model, codebook=codebook,
                   nonfinite=nonfinite, progress=not quiet)
    replaced = f", {res.nonfinite_replaced} NaN/Inf set to 0" if res.nonfinite_replaced else ""
    _summary(res, output, json_out, quiet, f"{input} -> {output}: {res.entries} entries, "
             f"{res.nbytes} bytes, {res.bpe:.4f} bits/entry, {res.seconds:.2f} s{replaced}")


@app.command("decompress")
def decompress_cli(
    input: str = typer.Argument(..., help=".co3 file, or - for stdin."),
    output: str = typer.Option(..., "--output", "-o", help="Output dump (.h5), or - for stdout."),
    json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Decode a .co3 file into a co3.gradients/1 dump of the dequantized gradients.

    Example: co3 decompress grads.co3 -o grads_q.h5
    """
    from co3cli.codec import decompress

    res = decompress(input, output, progress=not quiet)
    _summary(res, output, json_out, quiet, f"{input} -> {output}: {res.entries} entries from "
             f"{res.nbytes} bytes, {res.seconds:.2f} s")


@app.command("inspect")
def inspect_cli(input: str = typer.Argument(..., help=".co3 file, or - for stdin."),
                json_out: bool = JsonOpt):
    """Verify a .co3 file (magic, version, every checksum) and describe its contents.

    Example: co3 inspect grads.co3 --json
    """
    from co3cli.codec import read_co3_setup
    from co3cli.container import open_co3
    from co3cli.fileio import input_path

    with input_path(input, ".co3 file") as p, open(p, "rb") as f:
        co3 = open_co3(f, input)
        grid, coder = read_co3_setup(co3.header)
        layers = []
        for block in co3.layers():
            lay = co3.header["layers"][block.index]
            layers.append({"name": lay["name"], "shape": lay["shape"], "numel": lay["numel"],
                           "bytes": block.nbytes, "payload_bytes": block.payload_bytes,
                           "table_bytes": len(block.table), "model": block.meta.get("model"),
                           "scales": block.scales.tolist()})
            coder.table_from_bytes(block.table, grid.nsym)  # the integer table parses
        h = co3.header
        info = {"file": input, "verified": True, "version": "%d.%d" % co3.version, "bytes": co3.size,
                "header_bytes": co3.header_bytes, "trailer_bytes": co3.trailer_bytes,
                "header": {k: v for k, v in h.items() if k != "layers"}, "layers": layers}
    if json_out:
        _emit(json.dumps(info, indent=1))
        return
    _emit(f"{input}: .co3 v{info['version']}, {co3.size} bytes, all checksums verified")
    _emit(f"format {h['format']['id']}, scale {h['scale_rule']}, coder {h['coder']}, model {h['model']}, "
          f"{len(h['steps'])} step(s), made by co3cli {h['co3cli_version']} at {h['created']}")
    _emit(_table(layers, [("name", "layer", ""), ("shape", "shape", ""), ("bytes", "bytes", "d"),
                          ("payload_bytes", "payload", "d"), ("table_bytes", "table", "d"),
                          ("model", "model", "")]))


def _is_co3(path: Path) -> bool:
    from co3cli.container import MAGIC

    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


@app.command("report")
def report_cli(
    input: str = typer.Argument(..., help=".co3 file or gradient dump (.h5), or - for stdin."),
    format: Optional[str] = FormatOpt, scale: Optional[str] = ScaleOpt, coder: Optional[str] = CoderOpt,
    model: Optional[str] = ModelOpt, max_len: Optional[int] = MaxLenOpt,
    precision: Optional[int] = PrecisionOpt, nonfinite: str = NonfiniteOpt,
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw a PNG (needs matplotlib)."),
    json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Bits per entry against entropy, per layer and in total, from real bytes.

    On a dump, it compresses (to a temporary file) with the given options first.

    Example: co3 report grads.co3 --json;  co3 report sample_data/mnist5k-mlp.h5 --format fp4-co3
    """
    from co3cli import report
    from co3cli.fileio import input_path

    with input_path(input, "input") as p:
        if _is_co3(p):
            given = {"--format": format, "--scale": scale, "--coder": coder, "--model": model,
                     "--max-len": max_len, "--precision": precision}
            given = [k for k, v in given.items() if v is not None]
            if given or nonfinite != "error":
                raise InputError(f"{', '.join(given) or '--nonfinite'} only apply to a dump; "
                                 f"{input} is a .co3 file, reported as it was compressed")
            rep = report.report_co3(p, name=input, progress=not quiet, keep_hist=plot is not None)
        else:
            rep = report.report_dump(p, format=format, scale=scale, coder=coder,
                                     coder_params=_coder_params(max_len, precision), model=model,
                                     nonfinite=nonfinite, progress=not quiet,
                                     keep_hist=plot is not None)
            rep["source"] = input
    if plot is not None:
        from co3cli.plot import plot_report

        plot_report(rep, plot)
        for lay in rep["layers"]:
            lay.pop("hist")
    _emit(json.dumps(rep, indent=1) if json_out else bits_table(rep))


@app.command("fit")
def fit_cli(
    input: str = typer.Argument(..., help="Gradient dump (.h5), or - for stdin."),
    models: str = typer.Option("gennorm-zi,gennorm,normal-zi,laplace-zi,dweibull", "--models",
                               help="Comma-separated model ids to fit and compare."),
    per_step: bool = typer.Option(False, "--per-step", help="Fit every step separately "
                                  "(default: pool each layer's steps)."),
    layers: str = typer.Option("*", "--layers", help="Comma-separated globs over layer names, "
                               "e.g. '*.weight'."),
    nonfinite: str = NonfiniteOpt, json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Fit GenNorm (and rivals) to every layer: parameters, zero fraction, goodness of fit.

    Example: co3 fit sample_data/mnist5k-mlp.h5 --json
    """
    from co3cli.fitting import fit_dump

    ids = [m.strip() for m in models.split(",") if m.strip()]
    res = fit_dump(input, ids, per_step=per_step, layers=layers, nonfinite=nonfinite,
                   progress=not quiet)
    if json_out:
        _emit(json.dumps(res, indent=1))
        return
    rows = []
    for r in res["fits"]:
        main = r["models"].get(ids[0], {"params": {}, "gof": {}})
        rows.append({"name": r["layer"] + ("" if r["step"] is None else f"@{r['step']}"),
                     "n": r["entries"], "p0": r["zero_fraction"], "beta": main["params"].get("beta"),
                     "scale": main["params"].get("scale"), "ks": main["gof"].get("ks"),
                     "w2": main["gof"].get("w2"), "best": r["best"],
                     **{f"aic:{m}": r["models"].get(m, {}).get("gof", {}).get("aic") for m in ids}})
    cols = [("name", "layer", ""), ("n", "entries", "d"), ("p0", "zeros", ".3f"),
            ("beta", "beta", ".3f"), ("scale", "alpha", ".3g"), ("ks", f"KS({ids[0]})", ".4f"),
            ("w2", "W2", ".4f"), ("best", "best (AIC)", "")]
    _emit(f"{input}: model fits per layer (AIC on the non-zero entries; lower is better)")
    _emit(_table(rows, cols))
    _emit("\n" + _table(rows, [("name", "layer", "")] + [(f"aic:{m}", m, ".4g") for m in ids]))


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
    from co3cli import codebook as cb
    from co3cli.coding import get_coder
    from co3cli.dump import Dump
    from co3cli.fileio import output_file
    from co3cli.formats import get_grid

    from co3cli.codec import DEFAULT_CODER, DEFAULT_FORMAT, DEFAULT_MODEL

    grid = get_grid(format or DEFAULT_FORMAT)
    coder_obj = get_coder(coder or DEFAULT_CODER, **_coder_params(max_len, precision))
    model = model or DEFAULT_MODEL
    with Dump.open(input, nonfinite=nonfinite) as dump:
        book = cb.build(dump, grid, coder_obj, model=model, scale_rule=scale, pooled=pooled,
                        steps=steps, progress=not quiet)
    with output_file(output) as f:
        book.save(f)
    if json_out:
        _emit(json.dumps({"output": output, "layers": list(book.doc["layers"]), "format": grid.id,
                          "coder": coder_obj.config(), "model": model,
                          "checksum": book.checksum}, indent=1), output == "-")
    elif output != "-":
        _emit(f"{input} -> {output}: {len(book.doc['layers'])} table(s), format {grid.id}, "
              f"coder {coder_obj.config()}, model {model}")


@codebook_app.command("show")
def codebook_show_cli(book: Path = typer.Argument(..., help="Codebook JSON file."),
                      json_out: bool = JsonOpt):
    """Summarize a codebook: per layer, the model, its parameters and the table's code lengths.

    Example: co3 codebook show book.json
    """
    from co3cli import codebook as cb
    from co3cli.formats import get_grid

    b = cb.load(book)
    grid = get_grid(b.format_id)
    rows = []
    for name, entry in b.doc["layers"].items():
        t = b.table_for(name)
        ints = cb.table_ints(t)
        p = np.exp2(-ints.astype(float)) if "max_len" in b.doc["coder"] else ints / ints.sum()
        p = p / p.sum()
        meta = entry.get("meta", {})
        params = meta.get("params", {})
        rows.append({"name": name, "model": meta.get("model"), "beta": params.get("beta"),
                     "p0": meta.get("p0"), "zero_bits": float(-np.log2(p[grid.K])),
                     "min": int(ints[ints > 0].min()), "max": int(ints.max()),
                     "entropy": float(-(p[p > 0] * np.log2(p[p > 0])).sum())})
    if json_out:
        _emit(json.dumps({"file": str(book), **{k: v for k, v in b.doc.items() if k != "layers"},
                          "tables": rows}, indent=1))
        return
    _emit(f"{book}: {b.doc['schema']}, format {grid.id} ({grid.nsym} symbols), coder {b.doc['coder']}, "
          f"model {b.doc['model']}, scale {b.doc['scale_rule']}, co3cli {b.doc['co3cli_version']}")
    _emit(_table(rows, [("name", "layer", ""), ("model", "model", ""), ("beta", "beta", ".3f"),
                        ("p0", "p0", ".3f"), ("zero_bits", "bits(0)", ".2f"),
                        ("min", "min int", "d"), ("max", "max int", "d"),
                        ("entropy", "table entropy", ".3f")]))


@app.command("capture")
def capture_cli(
    task: Optional[str] = typer.Option(None, "--task", "-t",
                                       help="Built-in task (default digits-mlp): digits-mlp, "
                                            "digits-cnn, mnist5k-mlp, mnist5k-cnn, "
                                            "synthetic-cifar-resnet (synthetic 3x32x32 data)."),
    entry: Optional[str] = typer.Option(None, "--entry", "-e",
                                        help="Your code instead of a task: module:function or "
                                             "path/to/file.py:function returning a job dict "
                                             "{model, data, loss_fn[, optimizer][, lr]}."),
    output: str = typer.Option(..., "--output", "-o", help="Dump file (.h5), or - for stdout."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Training steps (default 100)."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="Train whole epochs instead "
                                         "of --steps."),
    every: int = typer.Option(1, "--every", help="Record every N-th step (or epoch)."),
    epoch_average: bool = typer.Option(False, "--epoch-average", help="Record the mean of each "
                                       "epoch's minibatch gradients, one row per epoch."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Tasks only (default 64)."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Learning rate (default: 0.1 sgd, 1e-3 adam)."),
    momentum: Optional[float] = typer.Option(None, "--momentum", help="SGD momentum (default 0)."),
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="sgd (default) or adam."),
    layers: str = typer.Option("*", "--layers", help="Glob over parameter names."),
    seed: int = typer.Option(0, "--seed"),
    on_nonfinite: str = typer.Option("error", "--on-nonfinite",
                                     help="NaN/Inf gradient: error (default; names step and "
                                          "layer), skip (leave the step out) or record."),
    json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Train a model and record its gradients into a dump, step by step (memory: one step).

    Example: co3 capture --task mnist5k-mlp --steps 200 --every 20 -o dump.h5

    Example: co3 capture --entry examples/my_job.py:make_job --epochs 2 --epoch-average -o d.h5

    Example: co3 capture --task digits-mlp --steps 100 -o - | co3 report - --format fp8-e5m2
    """
    from co3cli.capture import capture, summary_dict
    from co3cli.jobs import capture_entry

    _torch_one_thread()
    common = dict(steps=steps, epochs=epochs, seed=seed, every=every, layers=layers,
                  epoch_average=epoch_average, on_nonfinite=on_nonfinite, progress=not quiet)
    if entry is not None:
        if task is not None:
            raise InputError("give --task or --entry, not both")
        if batch_size is not None:
            raise InputError("--batch-size applies to --task only; the --entry job's data "
                             "makes the batches")
        s = capture_entry(entry, output, optimizer=optimizer, lr=lr, momentum=momentum,
                          **common)
        name = entry
    else:
        name = task or "digits-mlp"
        s = capture(name, output, batch_size=64 if batch_size is None else batch_size, lr=lr,
                    momentum=momentum or 0.0, optimizer=optimizer or "sgd", **common)
    if json_out:
        _emit(json.dumps(summary_dict(s), indent=1), output == "-")
    elif not quiet or output != "-":
        _emit(f"captured {name} -> {output}: {s}", output == "-")


simulate_app = typer.Typer(help="Simulate training through the codec: federated (fl, plot) "
                           "and against stragglers (uep).",
                           no_args_is_help=True)
app.add_typer(simulate_app, name="simulate")

_CO3_ONLY = ("format", "scale", "coder", "model", "refit_every")


@simulate_app.command("fl")
def simulate_fl_cli(
    output: str = typer.Option(..., "--output", "-o", help="Run folder (config.json, "
                               "metrics.csv, summary.json; with --sweep one folder per point "
                               "plus sweep.csv)."),
    task: str = typer.Option("mnist5k-mlp", "--task", "-t", help="digits-mlp, digits-cnn, "
                             "mnist5k-mlp, mnist5k-cnn, synthetic-cifar-resnet."),
    clients: int = typer.Option(10, "--clients"),
    rounds: int = typer.Option(200, "--rounds"),
    algorithm: str = typer.Option("fedsgd", "--algorithm", help="fedsgd (one gradient per "
                                  "round) or fedavg (E local steps; the upload is the delta)."),
    local_steps: int = typer.Option(1, "--local-steps", help="FedAvg: local SGD steps E."),
    batch_size: int = typer.Option(64, "--batch-size"),
    lr: float = typer.Option(0.1, "--lr", help="Server lr (FedSGD) or client lr (FedAvg)."),
    server_lr: float = typer.Option(1.0, "--server-lr", help="FedAvg: server step on the "
                                    "averaged delta."),
    momentum: float = typer.Option(0.0, "--momentum", help="Server momentum."),
    lr_schedule: str = typer.Option("constant", "--lr-schedule", help="constant, cosine, step."),
    partition: str = typer.Option("iid", "--partition", help="iid, dirichlet (--alpha), shards "
                                  "(--shards-per-client)."),
    alpha: float = typer.Option(0.3, "--alpha", help="Dirichlet concentration over labels."),
    shards_per_client: int = typer.Option(2, "--shards-per-client"),
    participation: Optional[int] = typer.Option(None, "--participation", help="Clients per "
                                                "round (default: all)."),
    compressor: str = typer.Option("none", "--compressor", "-c", help="none, co3, qsgd, topk, "
                                   "signsgd, sketch, tinyscript."),
    format: Optional[str] = typer.Option(None, "--format", help="co3: grid (default fp8-e5m2)."),
    scale: Optional[str] = typer.Option(None, "--scale", help="co3: scale rule absmax, "
                                        "gennorm-mse, co3-poly."),
    coder: Optional[str] = typer.Option(None, "--coder", help="co3: ans (default), huffman, "
                                        "or ctx (context-adaptive: smaller, slower)."),
    model: Optional[str] = typer.Option(None, "--model", help="co3: symbol model (default "
                                        "gennorm-zi)."),
    refit_every: Optional[int] = typer.Option(None, "--refit-every", help="co3: refit the model "
                                              "and scale every N rounds (default 10)."),
    param: List[str] = typer.Option([], "--param", "-p", help="Other compressor parameter "
                                    "name=value (e.g. levels=4, fraction=0.01); repeatable."),
    gamma: float = typer.Option(0.0, "--gamma", help="Error-feedback memory decay in [0, 1]."),
    eval_every: int = typer.Option(10, "--eval-every"),
    seed: int = typer.Option(0, "--seed"),
    dump_rounds: Optional[str] = typer.Option(None, "--dump-rounds", help="Comma-separated "
                                              "rounds whose uploads of --dump-client go to "
                                              "transmitted.h5 (streams raw, corrected, decoded)."),
    dump_client: int = typer.Option(0, "--dump-client"),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="name=v1,v2,... over a config "
                                        "field or compressor parameter (e.g. gamma=0,0.5,1)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a run in --output."),
    stragglers: Optional[str] = typer.Option(None, "--stragglers", help="Code each client's "
                                             "backward products against stragglers: uncoded, "
                                             "repetition, mds, eep, now-uep, ew-uep."),
    windows: Optional[str] = typer.Option(None, "--windows", help="--stragglers: window "
                                          "probabilities (default 0.45,0.35,0.20)."),
    classes: Optional[str] = typer.Option(None, "--classes", help="--stragglers: blocks per "
                                          "class (default 1,2,6)."),
    straggler_workers: Optional[int] = typer.Option(None, "--straggler-workers",
                                                    help="--stragglers: workers n."),
    deadline: Optional[float] = typer.Option(None, "--deadline", help="--stragglers: stop "
                                             "each product at this time (1/rate units)."),
    wait_for: Optional[int] = typer.Option(None, "--wait-for", help="--stragglers: stop after "
                                           "this many results."),
    rate: float = typer.Option(1.0, "--rate", help="--stragglers: exponential latency rate."),
    engine: str = typer.Option("inprocess", "--engine", help="inprocess (default) or torchrun: "
                               "rank 0 the server, ranks 1..N-1 the clients, real bytes over "
                               "torch.distributed (gloo) between processes."),
    nproc: int = typer.Option(3, "--nproc", help="torchrun engine: processes on this machine."),
    timeout: float = typer.Option(300.0, "--timeout", help="torchrun engine: seconds a rank "
                                  "may wait for another before the job fails."),
    print_torchrun: bool = typer.Option(False, "--print-torchrun", help="Write the config to "
                                        "--output and print the torchrun line for running the "
                                        "job on several machines, instead of running it."),
    json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Federated training where every upload is really compressed, sent as bytes and decoded.

    Example: co3 simulate fl --task mnist5k-mlp --clients 10 --rounds 200 --compressor co3
    --format fp4-co3 --gamma 0.7 --coder ans --seed 0 -o run/

    Example: co3 simulate fl -c co3 --format fp4-co3 --sweep gamma=0,0.5,0.7,0.9,1 -o sweep/

    Example: co3 simulate fl -c qsgd -p levels=2 --partition dirichlet --alpha 0.3 -o q/

    Example: co3 simulate fl -c co3 --format fp8-e5m2 --engine torchrun --nproc 4 -o tr/

    Example: co3 simulate fl -c co3 --format fp4-co3 --stragglers ew-uep --straggler-workers 15
    --deadline 1.0 -o uep/
    """
    from co3cli.simulate.fl import FLConfig, parse_value, run_fl, run_sweep

    _torch_one_thread()
    params: dict = {}
    for name, value in (("format", format), ("scale", scale), ("coder", coder), ("model", model),
                        ("refit_every", refit_every)):
        if value is not None:
            if compressor != "co3":
                raise InputError(f"--{name.replace('_', '-')} applies to --compressor co3 only; "
                                 f"use --param for {compressor!r}")
            params[name] = value
    for item in param:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise InputError(f"--param {item!r} must look like name=value")
        params[key.strip().replace("-", "_")] = parse_value(value.strip())
    rounds_list: tuple = ()
    if dump_rounds:
        from co3cli.simulate.uep_report import parse_ints

        rounds_list = tuple(parse_ints(dump_rounds, "--dump-rounds"))
    straggler_cfg = None
    if stragglers is not None:
        from co3cli.simulate import uep_report as ur

        straggler_cfg = {"scheme": stragglers, "rate": rate}
        if windows is not None:
            straggler_cfg["windows"] = tuple(ur.parse_floats(windows, "--windows"))
        if classes is not None:
            straggler_cfg["class_sizes"] = tuple(ur.parse_ints(classes, "--classes"))
        for key, value in (("workers", straggler_workers), ("deadline", deadline),
                           ("wait_for", wait_for)):
            if value is not None:
                straggler_cfg[key] = value
    elif any(v is not None for v in (windows, classes, straggler_workers, deadline, wait_for)):
        raise InputError("--windows, --classes, --straggler-workers, --deadline and --wait-for "
                         "need --stragglers SCHEME")
    cfg = FLConfig(task=task, clients=clients, rounds=rounds, algorithm=algorithm,
                   local_steps=local_steps, batch_size=batch_size, lr=lr, server_lr=server_lr,
                   momentum=momentum, lr_schedule=lr_schedule, partition=partition, alpha=alpha,
                   shards_per_client=shards_per_client, participation=participation,
                   compressor=compressor, compressor_params=params, gamma=gamma,
                   eval_every=eval_every, seed=seed, dump_rounds=rounds_list,
                   dump_client=dump_client, stragglers=straggler_cfg)
    if engine not in ("inprocess", "torchrun"):
        raise InputError(f"--engine {engine!r} is not one of inprocess, torchrun")
    if engine == "torchrun" or print_torchrun:
        from co3cli.simulate import dist
        from co3cli.simulate.fl import check_config

        if sweep is not None:
            raise InputError("--sweep runs with the in-process engine only")
        if nproc < 2:
            raise InputError(f"--nproc {nproc} must be >= 2 (a server and at least one client)")
        if not (math.isfinite(timeout) and timeout > 0):
            raise InputError(f"--timeout {timeout} must be > 0 seconds")
        check_config(cfg)
        if print_torchrun:
            out_dir = Path(output)
            out_dir.mkdir(parents=True, exist_ok=True)
            cfg_path = out_dir / "fl-config.json"
            cfg_path.write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
            _emit(dist.torchrun_command(cfg_path, out_dir, nproc, nnodes=2))
            return
        res = dist.launch(cfg, output, nproc, overwrite=overwrite, timeout=timeout,
                          progress=not quiet)
    elif sweep is not None:
        rows = run_sweep(cfg, sweep, output, progress=not quiet, overwrite=overwrite)
        if json_out:
            _emit(json.dumps(rows, indent=1))
        else:
            for r in rows:
                acc = r["final_accuracy"]
                _emit(f"{r['run']}: accuracy {'-' if acc is None else f'{100 * acc:.2f} %'}, "
                      f"{r['mean_bits_per_entry']:.3f} bits/entry, "
                      f"{r['total_uplink_bytes']:,} uplink bytes ({r['stopped']})")
        return
    else:
        res = run_fl(cfg, output, progress=not quiet, overwrite=overwrite)
    if json_out:
        _emit(json.dumps(res.to_dict(), indent=1))
    elif not quiet:
        _emit(f"{compressor}: {res.rounds_done} rounds, final accuracy "
              f"{100 * res.final_accuracy:.2f} % (best {100 * res.best_accuracy:.2f} %), "
              f"{res.mean_bits_per_entry:.3f} bits/entry, {res.total_uplink_bytes:,} uplink "
              f"bytes, {res.seconds:.1f} s -> {output}")


@simulate_app.command("plot")
def simulate_plot_cli(
    runs: List[str] = typer.Argument(..., help="Run folders of co3 simulate fl."),
    output: str = typer.Option(..., "--output", "-o", help="PNG file."),
):
    """Accuracy vs round, accuracy vs cumulative uplink bits, bits/entry vs round (one PNG).

    Example: co3 simulate plot run-none run-co3 run-qsgd -o compare.png
    """
    from co3cli.fileio import output_path
    from co3cli.simulate.fl import plot_runs

    with output_path(output) as tmp:
        plot_runs(runs, tmp)


uep_app = typer.Typer(help="UEP-coded matrix multiplication against stragglers: exact "
                       "analysis, Monte Carlo, coded back-propagation.", no_args_is_help=True)
simulate_app.add_typer(uep_app, name="uep")

_UEP_SETTING = dict(
    windows=typer.Option("0.40,0.35,0.25", "--windows", help="Window probabilities Gamma "
                         "(sum 1), one per class (now-uep, ew-uep)."),
    classes=typer.Option("3,3,3", "--classes", help="Blocks per class, most important first."),
    workers=typer.Option(30, "--workers", help="Workers of mds, eep, now-uep, ew-uep (uncoded "
                         "uses one per block, repetition r per block)."),
    repetition=typer.Option(2, "--repetition", help="Copies per block for the repetition "
                            "scheme."),
    schemes=typer.Option("now-uep,ew-uep,eep", "--schemes", help="Comma-"
                         "separated: uncoded, repetition, mds, eep, now-uep, ew-uep."),
)


def _uep_codes(windows, classes, workers, repetition, schemes):
    from co3cli.simulate import uep_report as ur

    return ur.build_codes([x.strip() for x in schemes.split(",") if x.strip()],
                          windows=ur.parse_floats(windows, "--windows"),
                          classes=ur.parse_ints(classes, "--classes"), workers=workers,
                          r=repetition)


@uep_app.command("analyze")
def uep_analyze_cli(
    windows: str = _UEP_SETTING["windows"], classes: str = _UEP_SETTING["classes"],
    workers: int = _UEP_SETTING["workers"], repetition: int = _UEP_SETTING["repetition"],
    schemes: str = _UEP_SETTING["schemes"],
    error_vs_time: bool = typer.Option(False, "--error-vs-time", help="Also the expected "
                                       "normalised error vs time (exact)."),
    energies: Optional[str] = typer.Option(None, "--energies", help="Energy of one block of "
                                           "each class (default 10,1,0.1,... decreasing)."),
    rate: float = typer.Option(1.0, "--rate", help="Exponential latency rate lambda."),
    shift: float = typer.Option(0.0, "--shift", help="Latency shift (shifted exponential)."),
    t_max: Optional[float] = typer.Option(None, "--t-max", help="Last time of the error curve "
                                          "(default shift + 4/rate)."),
    points: int = typer.Option(41, "--points", help="Times on the error curve."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="PNG: decoding probability vs N "
                                        "(and error vs time)."),
    json_out: bool = JsonOpt,
):
    """Exact P(class decoded | N received) per scheme, N = 0..workers; error vs time.

    Example: co3 simulate uep analyze --windows 0.40,0.35,0.25 --classes 3,3,3 --workers 30 --json

    Example: co3 simulate uep analyze --error-vs-time --schemes uncoded,repetition,mds,eep,now-uep,ew-uep --plot uep.png
    """
    from co3cli.fileio import output_path
    from co3cli.simulate import uep_report as ur

    codes = _uep_codes(windows, classes, workers, repetition, schemes)
    L = next(iter(codes.values())).n_classes
    e = None
    if error_vs_time or energies is not None:
        e = ur.parse_floats(energies, "--energies") if energies else [10.0 ** (1 - c)
                                                                       for c in range(L)]
        if len(e) != L or any(not (math.isfinite(v) and v >= 0) for v in e):
            raise InputError(f"--energies needs {L} values >= 0 (one per class), got {e}")
    res = ur.analyze(codes, energies=e, rate=rate, shift=shift, t_max=t_max, points=points)
    if plot is not None:
        with output_path(plot) as tmp:
            ur.plot_analysis(res, tmp)
    if json_out:
        _emit(json.dumps(res, indent=1))
        return
    for sid, sres in res["schemes"].items():
        _emit(f"{sid} ({sres['workers']} workers): P(class decoded | N)")
        N = sres["N"]
        show = sorted(set([0] + list(range(0, N[-1] + 1, max(1, N[-1] // 10))) + [N[-1]]))
        _emit("   N  " + "  ".join(f"class{c + 1:>2}" for c in range(L)))
        for n in show:
            _emit(f"{n:4d}  " + "  ".join(f"{p[n]:7.4f}" for p in sres["p_decode"]))
    if "error_vs_time" in res:
        cur = res["error_vs_time"]
        _emit("expected normalised error vs time")
        _emit("     t  " + "  ".join(f"{sid:>10}" for sid in res["schemes"]))
        for i in range(0, len(cur["t"]), max(1, len(cur["t"]) // 8)):
            _emit(f"{cur['t'][i]:6.2f}  " + "  ".join(f"{cur[sid][i]:10.4g}"
                                                     for sid in res["schemes"]))


@uep_app.command("mc")
def uep_mc_cli(
    windows: str = _UEP_SETTING["windows"], classes: str = _UEP_SETTING["classes"],
    workers: int = _UEP_SETTING["workers"], repetition: int = _UEP_SETTING["repetition"],
    schemes: str = _UEP_SETTING["schemes"],
    n_received: str = typer.Option("6,9,12,18,24", "--n", help="Numbers of results received."),
    trials: int = typer.Option(500, "--trials"),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = JsonOpt,
):
    """Monte Carlo with the real encoder/decoder next to the exact decoding probabilities.

    Example: co3 simulate uep mc --windows 0.40,0.35,0.25 --classes 3,3,3 --workers 30 --trials 500
    """
    from co3cli.simulate import uep_report as ur

    codes = _uep_codes(windows, classes, workers, repetition, schemes)
    rows = ur.monte_carlo_check(codes, ur.parse_ints(n_received, "--n"), trials=trials,
                                seed=seed)
    if json_out:
        _emit(json.dumps(rows, indent=1))
        return
    _emit(f"{'scheme':<11} {'N':>3} {'class':>5} {'exact':>8} {'MC':>8} {'z':>6}")
    for r in rows:
        _emit(f"{r['scheme']:<11} {r['N']:3d} {r['class'] + 1:5d} {r['exact']:8.4f} "
              f"{r['monte_carlo']:8.4f} {r['z']:6.2f}")
    worst = max((abs(r["z"]) for r in rows), default=0.0)
    _emit(f"{len(rows)} points, {trials} trials each; largest |z| = {worst:.2f}")


@uep_app.command("train")
def uep_train_cli(
    output: Path = typer.Option(..., "--output", "-o", help="Per-step CSV (loss, accuracy, "
                                "compute and simulated straggler time)."),
    task: str = typer.Option("mnist5k-mlp", "--task", "-t", help="A built-in task; every "
                             "nn.Linear's backward products are coded (CNNs: the dense layers)."),
    scheme: str = typer.Option("ew-uep", "--scheme", help="uncoded, repetition, mds, eep, "
                               "now-uep, ew-uep, or exact (plain autograd, no stragglers)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Workers n (mds, eep, UEP: "
                                          "required; uncoded: K; repetition: r K)."),
    windows: str = typer.Option("0.45,0.35,0.20", "--windows"),
    classes: str = typer.Option("1,2,6", "--classes", help="Blocks per class (sum = 9 for the "
                                "default 3x3 row-by-column blocks)."),
    repetition: int = typer.Option(2, "--repetition"),
    deadline: Optional[float] = typer.Option(None, "--deadline"),
    wait_for: Optional[int] = typer.Option(None, "--wait-for"),
    rate: float = typer.Option(1.0, "--rate"),
    shift: float = typer.Option(0.0, "--shift"),
    steps: int = typer.Option(300, "--steps"),
    batch_size: int = typer.Option(64, "--batch-size"),
    lr: float = typer.Option(0.1, "--lr"),
    seed: int = typer.Option(0, "--seed"),
    eval_every: int = typer.Option(25, "--eval-every"),
    target: Optional[float] = typer.Option(None, "--target", help="Accuracy whose simulated "
                                           "time-to-reach is reported (e.g. 0.85)."),
    json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Train with coded back-propagation against stragglers, on a simulated clock.

    Each dense layer's two backward products go through the coded distributed multiplication
    with stragglers; the clock adds each product's waiting time to the compute time.

    Example: co3 simulate uep train --scheme ew-uep --workers 15 --deadline 1.0 --steps 300 -o ew.csv

    Example: co3 simulate uep train --scheme mds --workers 15 --wait-for 9 --target 0.85 -o mds.csv

    Writes the CSV and, next to it, CSV.json with the config, versions and summary.
    """
    from co3cli.fileio import output_path
    from co3cli.simulate import uep_report as ur
    from co3cli.simulate.uep_train import StragglerConfig, train_coded

    _torch_one_thread()
    cfg = None
    if scheme != "exact":
        cfg = StragglerConfig(scheme=scheme, workers=workers,
                              windows=tuple(ur.parse_floats(windows, "--windows")),
                              class_sizes=tuple(ur.parse_ints(classes, "--classes")),
                              r=repetition, rate=rate, shift=shift, deadline=deadline,
                              wait_for=wait_for, seed=seed).check()
    from co3cli.simulate.fl import versions

    def plain(o):
        return o.tolist() if hasattr(o, "tolist") else str(o)

    import contextlib

    to_stdout = str(output) == "-"
    side = None if to_stdout else output.with_name(output.name + ".json")
    with output_path(output) as tmp, (contextlib.nullcontext() if to_stdout
                                      else output_path(side)) as tmp_side:
        res = train_coded(task, cfg, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                          eval_every=eval_every, out_csv=tmp, target_accuracy=target,
                          progress=not quiet)
        # the CSV's provenance: config, versions, summary (the CSV itself has no header room)
        doc = {"schema": "co3.simulate-uep-train/1", "task": task, "steps": steps,
               "batch_size": batch_size, "lr": lr, "seed": seed, "eval_every": eval_every,
               "straggler": None if cfg is None else cfg.to_dict(), "versions": versions(),
               "summary": res}
        if tmp_side is not None:
            tmp_side.write_text(json.dumps(doc, indent=1, default=plain) + "\n")
    if json_out:
        _emit(json.dumps(res, indent=1, default=plain))
    elif not quiet:
        ttt = res.get("time_to_target")
        _emit(f"{res.get('label', scheme)}: final accuracy {100 * res['final_accuracy']:.2f} %, "
              f"simulated time {res['total_sim_time']:.1f}"
              + (f", reached {100 * target:.0f} % at {ttt:.1f}" if target and ttt is not None
                 else (f", never reached {100 * target:.0f} %" if target else ""))
              + f" -> {output}")


def _torch_one_thread():
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


@app.command("demo")
def demo_cli(
    out: Path = typer.Option(Path("co3-demo"), "--out", help="Folder for the demo's files."),
    task: str = typer.Option("mnist5k-mlp", "--task", help="Built-in task to train and capture."),
    steps: int = typer.Option(60, "--steps", help="Training steps (every 5th is recorded)."),
    json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Run the whole pipeline on bundled data and print the bits-per-entry table.

    capture (train on bundled MNIST) -> fit -> codebook -> compress -> decompress -> verify
    bit for bit -> report.

    Example: co3 demo --out demo/
    """
    from co3cli.demo import run_demo

    _torch_one_thread()
    res = run_demo(out, task=task, steps=steps, progress=not quiet, log=None if json_out else _emit)
    if json_out:
        _emit(json.dumps(res, indent=1))


_USAGE_ERROR = typer.BadParameter.__mro__[1]  # Click's UsageError (vendored by typer)


def version_callback(value: bool):
    if value:
        print(f"co3 {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=version_callback,
                                       is_eager=True, help="Print the version and exit.")):
    pass


def main(argv: list[str] | None = None) -> None:
    try:
        code = app(args=argv, prog_name="co3", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except typer.Abort:
        print("co3: aborted", file=sys.stderr)
        sys.exit(1)
    except _USAGE_ERROR as e:  # unknown option, bad value: one line, exit 2 (as Click would)
        msg = " ".join(e.format_message().split())
        if msg:  # (no message: the help was shown because no arguments were given)
            cmd = f"{e.ctx.command_path}: " if getattr(e, "ctx", None) else ""
            print(f"co3: error: {cmd}{msg} (see --help)", file=sys.stderr)
        sys.exit(2)
    except Co3Error as e:
        print(f"co3: error: {e}", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:
        sys.exit(1)
    except KeyboardInterrupt:
        print("co3: interrupted", file=sys.stderr)
        sys.exit(130)
    except MemoryError:
        print("co3: error: out of memory", file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        print(f"co3: error: {e.strerror or e}{where}", file=sys.stderr)
        sys.exit(1)

