"""The pair coder's speed paths (table version 3): the bytes and the words do not depend on
how a layer's chunks are handed to the kernels.

A layer whose chunk bodies are over ``JOIN_MAX`` bytes is decoded one body at a time where
it lies (no joined copy); below, in one call over the bodies joined. Both must give the
same words, name the same bad step, and the raw mode's words must be writable.
"""

from __future__ import annotations

import numpy as np
import pytest

from co3cli.coding import lossless_pairs as LP
from co3cli.coding.lossless import LAYOUTS
from co3cli.errors import CorruptDataError
from test_lossless import gradient_words


@pytest.mark.parametrize("dtype", sorted(LAYOUTS))
def test_big_layers_decode_body_by_body_as_joined(dtype, monkeypatch):
    layout = LAYOUTS[dtype]
    words = gradient_words(dtype, 3, 5001, seed=5)
    before = words.copy()
    table, bodies = LP.fit_encode(words, layout)
    assert table.mode == LP.MODE_PAIRS
    assert table.encode_steps(words) == bodies  # the fit's split and the table's agree
    for join in (0, 1 << 40):  # body by body; joined
        monkeypatch.setattr(LP, "JOIN_MAX", join)
        assert np.array_equal(table.decode_steps(bodies, words.shape[1]), before)
        for r in range(3):  # each step's damage is named
            bad = list(bodies)
            bad[r] = bad[r][:-1]
            with pytest.raises(CorruptDataError, match=f"step {r}"):
                table.decode_steps(bad, words.shape[1])
    assert np.array_equal(words, before)


def test_raw_layers_decode_to_writable_words():
    layout = LAYOUTS["bfloat16"]
    words = gradient_words("bfloat16", 2, 100)
    raw = LP.PairTable(layout, LP.MODE_RAW)
    back = raw.decode_steps(raw.encode_steps(words), 100)
    assert back.flags.writeable and back.dtype == layout.word_dtype
    assert np.array_equal(back, words)
    back[0, 0] ^= 1  # (a copy of its own, not a view of the chunk bytes)
