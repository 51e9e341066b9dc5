"""Text every machine has: the Python standard library's own sources, as character windows.

::

    STDLIB_MODULES --sysconfig stdlib folder--> the modules' .py files (this interpreter's)
        --read, join in list order, non-ASCII -> 0--> one ASCII text (its sha256: provenance)
        --cut into windows of context + 1 characters (no overlap)--> x = w[:-1], y = w[1:]
        --> Dataset(x int64 (N, T), y int64 (N, T), num_classes=128)

The sources differ between Python versions, so ``stdlib_corpus`` returns the text's provenance
with it (Python version, the modules' files, the text's length and sha256), which the FL engine
records in ``config.json``. The modules are a fixed list of pure-Python modules present in every
CPython from 3.10 on; one that is missing (a stripped install without ``.py`` sources) is an
InputError naming it. The Python Software Foundation License covers these sources.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sysconfig
from functools import lru_cache
from typing import Any

import numpy as np

from co3cli.errors import InputError

STDLIB_MODULES = (
    "argparse", "functools", "dataclasses", "textwrap", "random", "heapq", "bisect",
    "fractions", "statistics", "shlex", "string", "csv", "pprint", "contextlib", "copy",
    "calendar", "difflib", "abc", "enum", "typing", "inspect",
)
"""The modules whose sources make the corpus, in order."""

VOCAB = 128  # ASCII; every other character becomes 0 (NUL, absent from the sources)


@lru_cache(maxsize=4)
def stdlib_corpus(max_chars: int | None = None) -> tuple[bytes, dict[str, Any]]:
    """The ASCII text of ``STDLIB_MODULES`` (the first ``max_chars`` characters) and its
    provenance: ``python``, ``modules``, ``chars``, ``sha256``."""
    parts, folder = [], sysconfig.get_path("stdlib")
    for name in STDLIB_MODULES:
        path = os.path.join(folder, name + ".py")
        try:
            with open(path, "rb") as f:
                parts.append(f.read())
        except OSError:
            raise InputError(f"the stdlib text corpus needs the source of module {name!r} "
                             f"({path}), which this Python ({platform.python_version()}) "
                             "does not have") from None
    raw = np.frombuffer(b"\n".join(parts), dtype=np.uint8)
    text = np.where(raw < VOCAB, raw, 0).astype(np.uint8).tobytes()
    if max_chars is not None:
        text = text[:max_chars]
    prov = {"source": "python-stdlib", "python": platform.python_version(),
            "modules": list(STDLIB_MODULES), "chars": len(text),
            "sha256": hashlib.sha256(text).hexdigest()}
    return text, prov


def char_windows(name: str, context: int, max_chars: int | None = None) -> Any:
    """The corpus as a ``co3cli.data.Dataset`` of next-character windows of ``context``."""
    import torch

    from co3cli.data import Dataset

    text, _ = stdlib_corpus(max_chars)
    codes = np.frombuffer(text, dtype=np.uint8)
    n = (len(codes) - 1) // context
    if n < 2:
        raise InputError(f"the text corpus holds {len(codes)} characters, too few for "
                         f"windows of {context}")
    idx = np.arange(n)[:, None] * context + np.arange(context + 1)[None, :]
    w = torch.from_numpy(codes[idx].astype(np.int64))
    return Dataset(name, w[:, :-1].contiguous(), w[:, 1:].contiguous(), VOCAB)
