"""The ``co3`` command line: the root Typer app, its command groups, ``main``.

::

    co3 compress | decompress | inspect | report   co3cli.cli.codec
        fit                                         co3cli.cli.fit
        capture                                     co3cli.cli.capture
        demo                                        co3cli.cli.demo
        samples                                     co3cli.cli.samples
        codebook build | show                       co3cli.cli.codebook
        simulate fl | plot                          co3cli.cli.simulate_fl
        simulate uep analyze | mc | train           co3cli.cli.simulate_uep

Each command parses its options, calls the library and prints (options and printing helpers:
``co3cli.cli.common``); library modules are imported inside the commands, so ``co3 --help``
imports no torch, scipy or h5py.

Errors from the library (``Co3Error``: bad files, bad option values such as an unknown format)
become one line on stderr and exit code 1; usage errors found by the parser (unknown options,
missing arguments, values of the wrong type) are one line too, with Click's exit code 2.
"""

from __future__ import annotations

import sys

import typer

from co3cli import __version__
from co3cli.cli import capture, codec, demo, fit, samples
from co3cli.cli.codebook import codebook_app
from co3cli.cli.simulate_fl import simulate_app
from co3cli.cli.simulate_uep import uep_app
from co3cli.errors import Co3Error

app = typer.Typer(
    name="co3",
    help="How many bits does a gradient really need? Capture, fit, codebook, compress, "
         "decompress and report gradient dumps (GenNorm models, fp8/fp4 grids; coders ans, "
         "huffman and the context coder ctx, the smallest files); simulate federated training "
         "through the codec and stragglers.\n\n"
         "Example: co3 samples && co3 compress sample_data/mnist5k-mlp.h5 -o g.co3 --coder ctx"
         "\n\nExample: co3 demo --out demo/",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
for _name, _command in (("compress", codec.compress_cli), ("decompress", codec.decompress_cli),
                        ("inspect", codec.inspect_cli), ("report", codec.report_cli),
                        ("fit", fit.fit_cli), ("capture", capture.capture_cli),
                        ("demo", demo.demo_cli), ("samples", samples.samples_cli)):
    app.command(_name)(_command)
app.add_typer(codebook_app, name="codebook")
app.add_typer(simulate_app, name="simulate")
simulate_app.add_typer(uep_app, name="uep")

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
