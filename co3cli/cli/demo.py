"""``co3 demo``: the whole pipeline on bundled data."""

from __future__ import annotations

from pathlib import Path

import typer

from co3cli.cli.common import JsonOpt, QuietOpt, emit, emit_json, torch_one_thread


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

    torch_one_thread()
    res = run_demo(out, task=task, steps=steps, progress=not quiet, log=None if json_out else emit)
    if json_out:
        emit_json(res)
