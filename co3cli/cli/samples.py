"""``co3 samples``: copy the bundled sample data into a folder, for the README's examples.

co3cli/sample_data/ (package data) --export_samples--> DEST/{digits,mnist5k}.npz,
DEST/{digits,mnist5k}-mlp.h5; then e.g. ``co3 compress sample_data/mnist5k-mlp.h5 -o g.co3``.
"""

from __future__ import annotations

import typer


def samples_cli(
    dest: str = typer.Argument("sample_data",
                               help="Folder to copy the files into (created if missing)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing."),
):
    """Copy the bundled datasets (.npz) and gradient dumps (.h5) into DEST.

    A file already in DEST with the same bytes is kept; a different one is an error (nothing is
    copied then). Provenance and licences: co3cli/sample_data/README.md in the package.

    Example: co3 samples && co3 fit sample_data/mnist5k-mlp.h5 --json
    """
    from co3cli.data import export_samples

    paths = export_samples(dest)
    if not quiet:
        for path in paths:
            print(f"{path}  ({path.stat().st_size:,} bytes)")
