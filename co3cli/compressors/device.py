"""The co3 compressor on torch tensors, on their own device: the GPU bucket path of the DDP hook
and the FSDP reduce-scatter.

::

    g (device, float32/bf16/fp16)
      v = g + gamma * e          e: float32 on g's device (built in e's buffer: no copy of g)
      rms = sqrt(<v, v> / n)     the one reduction (see "Bits" below)
      [refit: v to the host once; CO3's own refit (scale rule, table fit)]   1 in refit_every
      sym = quantize(v * scale)  torch integer ops on the float32 bit pattern (quantize.py's
                                 branch-free fp kernel, op for op), counts = bincount(sym)
      v_hat = lut[sym]           lut = grid.values / scale (float32, computed on the host)
      e = v - v_hat              on the device
      sym (uint8) --> host       pinned buffer, non_blocking copy (CUDA only; CPU: a view)
      payload = head || table.encode(sym)   the entropy coder, on the host (CPU threads)

Only the uint8 symbols (1 byte per entry), the counts (one int64 per symbol) and the scalars
cross to the host; a refit step (the first, then one in ``refit_every``) also copies ``v`` once
for CO3's table fit. The payload is byte-for-byte :class:`co3cli.compressors.CO3`'s.

Bits. Everything elementwise (the correction ``g + gamma * e`` as two float32 roundings, the
product ``v * scale``, the rounding, the lookup, ``v - v_hat``) is IEEE float32 or integer
arithmetic and gives the same bits on every device; the tests run this path and the numba path
on CPU on the same inputs and compare symbols, payload bytes, ``v_hat`` and memories exactly.
The rms is a float32 BLAS reduction: on CPU tensors this path calls the very ``np.dot`` CO3
calls (so the CPU test covers it exactly); on CUDA it is ``torch.dot`` (cuBLAS), whose
summation order differs, so the scale between refits may differ from the CPU path's in its last
bit (no GPU was available to measure how often). That changes nothing for the replicas: the
scale travels in the payload and every receiver decodes with it.

Which path a CPU tensor takes: the numba path (``co3cli.quantize``), because it is faster on
CPU: one fused pass against ~12 torch passes, a whole co3 step on 1 M entries 2.5-3.6x faster
(one thread; ``benchmarks/gpu_check.py --cpu`` measures it);
this module serves CUDA tensors and is tested on CPU through the same code. bf16/fp16 inputs:
``e += g`` upcasts elementwise inside the add (no float32 copy of ``g``); without a memory
(the first call, or ``gamma = 0``) ``g`` is upcast in chunks of ``CHUNK`` entries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable

import numpy as np

from co3cli.checks import check_real
from co3cli.compressors.co3 import CO3
from co3cli.errors import InputError
from co3cli.formats import Grid
from co3cli.quantize import dequantize_table
from co3cli.tables import entropy_bits

CHUNK = 1 << 20  # entries per torch pass (bounds every temporary)
PATHS = ("auto", "torch")  # auto: numba for CPU tensors, torch ops elsewhere; torch: always


def supported(grid: Grid) -> bool:
    """Grids this path quantizes: uniform grids and fp grids whose normal range lies inside
    float32's (every named format); up to 256 symbols (uint8 on the wire to the host). A CUDA
    tensor of another grid is copied to the host and takes the numba path."""
    return grid.nsym <= 256 and (grid.kind != "fp" or grid.emin >= -126)


def quantize_t(v: Any, grid: Grid, scale: np.float32, out: Any) -> int:
    """Symbols of float32 tensor ``v`` on ``grid`` at ``scale`` into ``out`` (int32, same
    device): the numba kernels' results bit for bit; returns the number of non-finite
    products (their symbols are undefined)."""
    import torch

    s = torch.tensor(float(scale), dtype=torch.float32, device=v.device)
    km = grid.K
    bad = torch.zeros((), dtype=torch.int64, device=v.device)
    for lo in range(0, v.numel(), CHUNK):
        y = v[lo:lo + CHUNK] * s  # float32 * float32 -> float32
        u = y.view(torch.int32)
        b = u & 0x7FFFFFFF
        bad += (b >= 0x7F800000).sum()
        if grid.kind == "fp":
            sh, m = 23 - grid.man_bits, grid.man_bits
            offset = (127 + grid.emin - 1) << m
            kn = ((b.clamp_max(0x7F800000) + ((1 << (sh - 1)) - 1) + ((b >> sh) & 1)) >> sh) \
                - offset
            sub_mul = torch.tensor(math.ldexp(1.0, m - grid.emin), dtype=torch.float32,
                                   device=v.device)
            ks = torch.round(y.abs() * sub_mul).to(torch.int32)  # half to even, exact product
            k = torch.where(b < ((127 + grid.emin) << 23), ks, kn).clamp_max_(km)
        else:  # uniform: rint(|y|), saturating
            k = torch.round(y.abs()).clamp_max_(km).to(torch.int32)
        out[lo:lo + CHUNK] = torch.where(u < 0, km - k, km + k)
    return int(bad)


@dataclass
class DevicePacket:
    """One compressed tensor of the device path: ``payload`` as :meth:`CO3.compress` makes it,
    ``v_hat`` on the tensor's device."""

    payload: bytes
    v_hat: Any
    entropy_bits: float
    scale_fallbacks: int = 0


class TorchCO3:
    """:class:`CO3` plus error feedback (decay ``gamma``) for torch tensors on any device.

    ``step(key, g, state)`` is ``ErrorFeedback(gamma).step(key, g, co3, state, rng)`` (the same
    bits) with the memory ``e`` kept as a float32 tensor on ``g``'s device (``memories``); a
    CPU tensor is quantized by CO3's numba kernels (``path="auto"``, faster on CPU) or by the
    torch ops (``path="torch"``: what CUDA tensors always get; the tests compare the two)."""

    def __init__(self, compressor: CO3, gamma: float, path: str = "auto"):
        if path not in PATHS:
            raise InputError(f"co3: path {path!r} is not one of {', '.join(PATHS)}")
        if path == "torch" and not supported(compressor.grid):
            raise InputError(f"co3 torch path: format {compressor.grid.id} is not supported "
                             "(more than 256 symbols, or an fp grid below float32's range)")
        self.comp = compressor
        self.gamma = gamma
        self.path = path
        self.memories: dict[Hashable, Any] = {}
        self._rng = np.random.default_rng(0)  # co3 is deterministic; the API wants a generator
        self._pinned: Any = None  # host staging buffer for CUDA symbols (grown on demand)

    @property
    def gamma(self) -> float:
        return self._gamma

    @gamma.setter
    def gamma(self, value: float) -> None:
        self._gamma = check_real("gamma", value, 0.0, 1.0)

    # ----------------------------------------------------------------- error feedback
    def correct(self, key: Hashable, g: Any) -> tuple[Any, bool]:
        """``v = g + gamma * e`` as a float32 tensor (built in ``e``'s buffer; ``g`` itself, or
        its upcast, while there is no memory), and whether the caller may overwrite it (not
        when it is ``g``)."""
        import torch

        e = self.memories.get(key)
        if e is not None and self.gamma != 0.0 and e.shape == g.shape:
            if e.device != g.device:
                e = self.memories[key] = e.to(g.device)
            if not e.is_cuda and g.dtype == torch.float32:  # numpy's in-place ops: faster
                x = e.numpy()
                x *= np.float32(self.gamma)
                x += g.numpy()
            else:
                e.mul_(torch.tensor(self.gamma, dtype=torch.float32, device=e.device))
                e.add_(g)  # float32 += g: bf16/fp16 upcast inside the add, exactly
            return e, True
        if g.dtype == torch.float32:
            return g, False
        v = torch.empty(g.shape, dtype=torch.float32, device=g.device)
        for lo in range(0, g.numel(), CHUNK):
            v[lo:lo + CHUNK] = g[lo:lo + CHUNK]
        return v, True

    def step(self, key: Hashable, g: Any, state: dict) -> DevicePacket:
        """Correct, compress (sender ``state``, CO3's), update ``e``; the packet to send. CPU
        tensors go through :meth:`CO3.compress` (numba) unless ``path="torch"``."""
        import torch

        g = g.detach().reshape(-1)
        v, owned = self.correct(key, g)
        if (v.is_cuda or self.path == "torch") and supported(self.comp.grid):
            packet = self.compress(v, state)
        else:  # numba on the host (a device tensor of an unsupported grid: copied there)
            p = self.comp.compress(_host(v), state, self._rng)
            packet = DevicePacket(p.payload, torch.from_numpy(p.v_hat).to(v.device),
                                  p.entropy_bits or 0.0, p.scale_fallbacks)
        if self.gamma == 0.0:
            return packet
        if not v.is_cuda:  # e = v - v_hat with numpy (faster on CPU; the same bits)
            e = v.numpy() if owned else np.empty(v.numel(), np.float32)
            np.subtract(v.numpy(), packet.v_hat.numpy(), out=e)
            self.memories[key] = v if owned else torch.from_numpy(e)
        elif owned:
            self.memories[key] = v.sub_(packet.v_hat)
        else:
            self.memories[key] = torch.sub(v, packet.v_hat)
        return packet

    # ----------------------------------------------------------------- compressor
    def _rms(self, v: Any) -> float:
        if v.is_cuda:
            import torch

            return math.sqrt(float(torch.dot(v, v)) / v.numel())
        x = v.numpy()
        return math.sqrt(float(np.dot(x, x)) / x.size)  # CO3.compress's own reduction

    def compress(self, v: Any, state: dict) -> DevicePacket:
        """:meth:`CO3.compress` of float32 tensor ``v`` (see the module docstring)."""
        import torch

        comp, grid = self.comp, self.comp.grid
        sym = torch.empty(v.numel(), dtype=torch.int32, device=v.device)
        frame = comp.frame(state, self._rms(v), v.numel(), lambda: _host(v),
                           lambda scale: (sym, self._quantize(v, scale, sym)))
        lut = torch.from_numpy(dequantize_table(grid, frame.scale)).to(v.device)
        v_hat = torch.index_select(lut, 0, sym)
        body = frame.encode(state, self._to_host(sym))
        return DevicePacket(frame.head + body, v_hat, entropy_bits(frame.quantized[1]),
                            frame.fell_back)

    def _quantize(self, v: Any, scale: np.float32, sym: Any) -> np.ndarray:
        import torch

        if quantize_t(v, self.comp.grid, scale, sym):
            raise InputError("non-finite value(s) (NaN/Inf, or overflow of x*scale) cannot be "
                             "quantized")
        return torch.bincount(sym, minlength=self.comp.grid.nsym).cpu().numpy()

    def _to_host(self, sym: Any) -> np.ndarray:
        """The symbols as a host uint16 array (the coders' input); from CUDA through a pinned
        uint8 buffer with a non_blocking copy (one byte per entry crosses)."""
        import torch

        small = sym.to(torch.uint8)
        if not small.is_cuda:
            return small.numpy().astype(np.uint16)
        n = small.numel()
        if self._pinned is None or self._pinned.numel() < n:
            self._pinned = torch.empty(max(n, 1 << 16), dtype=torch.uint8, pin_memory=True)
        host = self._pinned[:n]
        host.copy_(small, non_blocking=True)
        torch.cuda.current_stream(small.device).synchronize()
        return host.numpy().astype(np.uint16)

    # ----------------------------------------------------------------- checkpoints
    def memory(self, key: Hashable) -> np.ndarray | None:
        """A host float32 copy of ``key``'s memory, or None."""
        e = self.memories.get(key)
        return None if e is None else e.detach().cpu().numpy().copy()

    def load(self, key: Hashable, memory: np.ndarray) -> None:
        """Restore ``key``'s memory (moved to the tensor's device on its first use)."""
        import torch

        self.memories[key] = torch.from_numpy(np.array(memory, np.float32).reshape(-1))

    def reset(self, key: Hashable) -> None:
        self.memories.pop(key, None)

    def keys(self) -> list[Hashable]:
        return list(self.memories)


def _host(v: Any) -> np.ndarray:
    """``v`` as a host float32 array (a view on CPU; a copy from a device: refits only)."""
    return v.detach().cpu().numpy()
