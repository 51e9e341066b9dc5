"""Error feedback with memory decay: the "correct" of CO3, once, for every transport.

Per sender and tensor (``key``), around any compressor::

    v = g + gamma * e          correct(key, g)      (v = g while there is no memory or gamma = 0)
    packet = compress(v)        the compressor
    e = v - v_hat               update(key, v, v_hat)

``gamma`` in [0, 1] is the memory-decay coefficient (1: classic error feedback, 0: none; the CO3
authors used 0.5, 0.7, 0.9). The in-process and torchrun FL engines keep one
:class:`ErrorFeedback` per client (keys: layer indices), the DDP hook one per rank (keys: parameter
keys). ``v`` is built in the memory's own buffer (no temporaries), so ``update`` overwrites it: a
caller that needs ``v`` afterwards (a dump of the corrected stream) copies it before. Arithmetic is float32 throughout,
``g + gamma * e`` rounded as written, so every transport computes the same bits.

Checkpoints: ``state_dict()`` is ``{"gamma": float, "memories": {key: float32 array}}`` (copies);
``load_state_dict`` restores it.

Reference: Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "Convert, compress, correct: Three
steps toward communication-efficient DNN training", arXiv:2203.09044.
"""

from __future__ import annotations

from typing import Any, Hashable

import numpy as np

from co3cli.checks import check_real
from co3cli.compressors.base import Compressor, Packet


class ErrorFeedback:
    """Error-feedback memories ``e`` (float32, one per key) with decay ``gamma``."""

    def __init__(self, gamma: float):
        self.gamma = gamma
        self._memory: dict[Hashable, np.ndarray] = {}

    @property
    def gamma(self) -> float:
        return self._gamma

    @gamma.setter
    def gamma(self, value: float) -> None:
        self._gamma = check_real("gamma", value, 0.0, 1.0)
        self._gamma32 = np.float32(self._gamma)

    def correct(self, key: Hashable, g: np.ndarray) -> np.ndarray:
        """``v = g + gamma * e`` for ``key`` (float32 1-D; ``g`` itself without a memory)."""
        e = self._memory.get(key)
        if e is None or self.gamma == 0.0 or e.shape != g.shape:
            return g
        e *= self._gamma32
        e += g
        return e

    def update(self, key: Hashable, v: np.ndarray, v_hat: np.ndarray) -> None:
        """``e = v - v_hat``: the part of ``v`` that was not sent (kept only when gamma > 0)."""
        if self.gamma == 0.0:
            return
        e = self._memory.get(key)
        if e is None or e.shape != v.shape:
            self._memory[key] = np.subtract(v, v_hat, dtype=np.float32)
        else:
            np.subtract(v, v_hat, out=e)

    def step(self, key: Hashable, g: np.ndarray, compressor: Compressor, state: dict,
             rng: np.random.Generator) -> Packet:
        """Correct, compress (with the sender ``state``), update; the packet to send."""
        v = self.correct(key, g)
        packet = compressor.compress(v, state, rng)
        self.update(key, v, packet.v_hat)
        return packet

    def memory(self, key: Hashable) -> np.ndarray | None:
        """The memory of ``key`` (the live buffer), or None before its first update."""
        return self._memory.get(key)

    def reset(self, key: Hashable) -> None:
        """Forget ``key``'s memory (e.g. its tensor changed size)."""
        self._memory.pop(key, None)

    def keys(self) -> list[Hashable]:
        return list(self._memory)

    def state_dict(self) -> dict[str, Any]:
        return {"gamma": self.gamma,
                "memories": {k: e.copy() for k, e in self._memory.items()}}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.gamma = sd["gamma"]
        self._memory = {k: np.array(e, dtype=np.float32).reshape(-1)
                        for k, e in sd["memories"].items()}
