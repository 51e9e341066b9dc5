"""The bundled sample data: datasets (``digits``, ``mnist5k``) and two real gradient dumps.

The files are package data in ``co3cli/sample_data/`` (its ``README.md`` gives their provenance
and licences; ``make_sample_data.py`` there rebuilds them) and are found with
``importlib.resources``, so a wheel, an editable install and a source checkout all find them::

    co3cli/sample_data/ --load_dataset--> Dataset (torch)   --capture tasks--> dump.h5
                        --export_samples--> ./sample_data/*.npz, *.h5   (``co3 samples``)

Each ``.npz`` holds::

    x      uint8 (N, H, W)   pixel intensities, 0..x_max
    y      int64 (N,)        class labels 0..9
    x_max  int64 ()          the largest possible pixel value (16 for digits, 255 for MNIST)

``load_dataset`` returns float32 images scaled to [0, 1] in torch layout (N, 1, H, W);
``train_test_split`` splits it with a seeded permutation, so the same seed gives the same split::

    ds = load_dataset("digits")
    train, test = train_test_split(ds, test_fraction=0.2, seed=0)

``export_samples("sample_data")`` copies the datasets and the dumps into a folder, where the
README's examples (``co3 fit sample_data/mnist5k-mlp.h5``) expect them.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from co3cli.errors import InputError
from co3cli.fileio import output_file

if TYPE_CHECKING:  # importlib.resources.abc from Python 3.11 on
    from importlib.abc import Traversable

SAMPLE_DATA_DIR: Traversable = resources.files("co3cli").joinpath("sample_data")
"""Where the bundled files are looked up: the package's ``sample_data/`` (a ``Path`` on disk)."""

SAMPLE_DUMPS = ("digits-mlp.h5", "mnist5k-mlp.h5")
"""The bundled gradient dumps (schema ``co3.gradients/1``), captured from the two datasets."""

DATASETS: dict[str, dict[str, Any]] = {
    "digits": {"file": "digits.npz", "image_shape": (8, 8), "x_max": 16, "num_classes": 10},
    "mnist5k": {"file": "mnist5k.npz", "image_shape": (28, 28), "x_max": 255, "num_classes": 10},
}

SAMPLE_FILES = tuple(spec["file"] for spec in DATASETS.values()) + SAMPLE_DUMPS
"""Every bundled data file, in the order ``export_samples`` copies them."""

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Dataset:
    """Images ``x`` float32 (N, 1, H, W) in [0, 1] and labels ``y`` int64 (N,), torch tensors."""

    name: str
    x: Any
    y: Any
    num_classes: int

    def __len__(self) -> int:
        return int(self.y.shape[0])


def dataset_path(name: str) -> Traversable:
    """The bundled ``.npz`` for dataset ``name`` (a ``Path`` unless co3cli runs from a zip)."""
    if name not in DATASETS:
        raise InputError(f"unknown dataset {name!r}; allowed: {', '.join(DATASETS)}")
    return SAMPLE_DATA_DIR / DATASETS[name]["file"]


def load_arrays(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Load dataset ``name`` as numpy: float32 (N, H, W) in [0, 1] and int64 (N,) labels."""
    path = dataset_path(name)
    spec = DATASETS[name]
    if not path.is_file():
        raise InputError(
            f"sample dataset {name!r} not found: {path} is missing (co3cli reads its sample "
            "data from the package folder co3cli/sample_data/: reinstall co3cli, or rebuild the "
            "file with co3cli/sample_data/make_sample_data.py)"
        )
    try:
        with resources.as_file(path) as real, np.load(real, allow_pickle=False) as npz:
            missing = [k for k in ("x", "y", "x_max") if k not in npz.files]
            if missing:
                raise InputError(f"{path}: arrays {missing} are missing (has {npz.files})")
            x, y, x_max = npz["x"], npz["y"], int(npz["x_max"])
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path} is not a readable .npz file: {exc}") from exc
    n = y.shape[0] if y.ndim == 1 else -1
    if x.dtype != np.uint8 or x.shape != (n, *spec["image_shape"]):
        raise InputError(
            f"{path}: array 'x' must be uint8 (N, {spec['image_shape'][0]}, "
            f"{spec['image_shape'][1]}) matching 'y', got {x.dtype} {x.shape}"
        )
    if y.dtype.kind not in "iu" or n < 1 or y.min() < 0 or y.max() >= spec["num_classes"]:
        raise InputError(f"{path}: array 'y' must hold labels 0..{spec['num_classes'] - 1}")
    if x_max != spec["x_max"] or int(x.max()) > x_max:
        raise InputError(f"{path}: pixel range does not match x_max={spec['x_max']}")
    return (x.astype(np.float32) / np.float32(x_max)), y.astype(np.int64)


def load_dataset(name: str) -> Dataset:
    """Load dataset ``name`` (``digits`` or ``mnist5k``) as torch tensors; see the module doc."""
    import torch

    x, y = load_arrays(name)
    return Dataset(
        name=name,
        x=torch.from_numpy(x).unsqueeze(1),
        y=torch.from_numpy(y),
        num_classes=DATASETS[name]["num_classes"],
    )


def split_indices(
    n: int, test_fraction: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of ``range(n)`` into sorted (train, test) index arrays."""
    if not 0.0 <= test_fraction < 1.0:
        raise InputError(f"test_fraction={test_fraction!r} must be in [0, 1)")
    if n < 2 and test_fraction > 0:
        raise InputError(f"cannot split {n} example(s) into train and test")
    perm = np.random.Generator(np.random.PCG64(seed)).permutation(n)
    n_test = int(round(n * test_fraction))
    if test_fraction > 0:
        n_test = min(max(n_test, 1), n - 1)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def train_test_split(
    ds: Dataset, test_fraction: float = 0.2, seed: int = 0
) -> tuple[Dataset, Dataset]:
    """Split ``ds`` into (train, test) with a seeded permutation (same seed, same split)."""
    import torch

    train_idx, test_idx = split_indices(len(ds), test_fraction, seed)
    tr = torch.from_numpy(train_idx)
    te = torch.from_numpy(test_idx)
    return (
        Dataset(ds.name, ds.x[tr], ds.y[tr], ds.num_classes),
        Dataset(ds.name, ds.x[te], ds.y[te], ds.num_classes),
    )


def export_samples(dest: str | os.PathLike = "sample_data") -> list[Path]:
    """Copy the bundled datasets and gradient dumps (``SAMPLE_FILES``) into folder ``dest``.

    ``dest`` is created if missing. A file already there with the bundled content is left as it
    is; if any differs, nothing is copied and one ``InputError`` names them. Each copy appears
    whole or not at all (written beside the target, then renamed). Returns the paths in ``dest``
    of all ``SAMPLE_FILES``, which afterwards hold the bundled bytes::

        export_samples("sample_data")  # then: co3 compress sample_data/mnist5k-mlp.h5 -o g.co3
    """
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise InputError(f"sample folder {str(dest)!r} exists and is not a folder")
    sources = [SAMPLE_DATA_DIR.joinpath(name) for name in SAMPLE_FILES]
    missing = [src.name for src in sources if not src.is_file()]
    if missing:
        raise InputError(
            f"bundled sample file(s) {', '.join(missing)} missing from {SAMPLE_DATA_DIR} "
            "(a broken co3cli installation: reinstall co3cli)"
        )
    targets = [dest / name for name in SAMPLE_FILES]
    present = [t.exists() or t.is_symlink() for t in targets]
    differ = [t.name for src, t, there in zip(sources, targets, present)
              if there and not (t.is_file() and _same_bytes(src, t))]
    if differ:
        raise InputError(
            f"sample folder {str(dest)!r} already holds {', '.join(differ)}, different from the "
            "bundled file(s); nothing was copied (move them away or choose another folder)"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for src, target, there in zip(sources, targets, present):
        if not there:
            with src.open("rb") as f, output_file(target) as out:
                shutil.copyfileobj(f, out, _CHUNK)
    return targets


def _same_bytes(src: Traversable, path: Path) -> bool:
    """Whether the file ``path`` holds exactly the bytes of ``src``."""
    with src.open("rb") as a, path.open("rb") as b:
        while True:
            x, y = a.read(_CHUNK), b.read(_CHUNK)
            if x != y:
                return False
            if not x:
                return True
