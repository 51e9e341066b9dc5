"""Quantization grids: low-precision floating-point and uniform formats.

A grid is a finite, sign-symmetric set of values. Its non-negative values are the
``K + 1`` *magnitudes* ``0 = m_0 < m_1 < ... < m_K``; a quantized entry is the *symbol*
``s = K + k`` (positive) or ``s = K - k`` (negative) for magnitude index ``k``, so there are
``nsym = 2K + 1`` symbols and ``s == K`` is the single zero (-0 and +0 are one symbol).

Floating-point grids ``fpE.M[-bB][-ieee|-fn|-full]`` have E exponent bits, M >= 1 mantissa
bits and exponent bias B (default ``2**(E-1) - 1``), with subnormals. The top exponent field is

* ``ieee`` (default): reserved entirely for Inf/NaN;
* ``fn``: used, except its all-ones mantissa (NaN), as in OCP ``e4m3fn``;
* ``full``: used entirely (no Inf/NaN), as in OCP MX ``e2m1``.

Magnitude index ``k = exponent_field * 2**M + mantissa``, so ordering by value and by code
agree and the parity of ``k`` is the parity of the mantissa's last bit.

Named grids (registered in ``FORMATS``; a new named grid is one ``FORMATS.register`` line)::

    fp8-e5m2     = fp5.2            (bias 15, max 57344)
    fp8-e4m3     = fp4.3-b7-fn      (OCP e4m3fn, max 448)
    fp8-143-b10  = fp4.3-b10        (bias 10, exponent field 15 reserved, as in the authors' code)
    fp4-co3      = fp2.1-b1         (the CO3 paper's (1,2,1), bias 1, field 3 reserved, max 3)
    fp4-e2m1     = fp2.1-b1-full    (OCP MX fp4, max 6)

Uniform grids ``uniformB`` have magnitudes ``0, 1, ..., 2**(B-1) - 1`` (``2**B - 1`` levels);
``uniformB-cX`` additionally fixes the scale so that X standard deviations (RMS, location 0)
map to the largest level (values beyond are clipped).

Lossless float formats (registered in ``LOSSLESS``; not grids: nothing is quantized, the
dump's float32 / bfloat16 / float16 words come back bit for bit, see
``co3cli.coding.lossless``)::

    f32-lossless    float32  (1, 8, 23)
    bf16-lossless   bfloat16 (1, 8, 7)
    f16-lossless    float16  (1, 5, 10)

Rounding (see ``co3cli.quantize``): nearest grid value, **ties to the even magnitude index**
(IEEE round-half-to-even), saturating at ±max; no Inf or NaN is ever produced.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np

from co3cli.errors import InputError
from co3cli.registry import Registry

MAX_SYMBOLS = 4095

FORMATS: Registry = Registry("format", describe="fpE.M[-bB][-ieee|-fn|-full], uniformB[-cX]; "
                             "lossless (co3 compress): f32-lossless, bf16-lossless, f16-lossless")
"""Named grids: id -> their generic spec (``get_grid`` parses any generic spec too)."""
FORMATS.register("fp5.2", id="fp8-e5m2", doc="IEEE-style fp8 (1,5,2), bias 15 (both papers)")
FORMATS.register("fp4.3-b7-fn", id="fp8-e4m3", doc="OCP e4m3fn, max 448 (common hardware fp8)")
FORMATS.register("fp4.3-b10", id="fp8-143-b10", doc="(1,4,3), bias 10, as in the authors' code")
FORMATS.register("fp2.1-b1", id="fp4-co3", doc="the CO3 paper's fp4 (1,2,1), bias 1, max 3")
FORMATS.register("fp2.1-b1-full", id="fp4-e2m1", doc="OCP MX fp4 e2m1, max 6")



@dataclass(frozen=True)
class LosslessFormat:
    """A float type coded bit-exactly (``co3 compress --format bf16-lossless``)."""

    id: str
    dtype: str  # the dump's storage type: float32, bfloat16, float16
    exp_bits: int
    man_bits: int
    kind = "lossless"
    nsym = None  # no grid: no symbols to count

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    def config(self) -> dict:
        return {"id": self.id, "kind": self.kind, "dtype": self.dtype, "bits": self.bits,
                "exp_bits": self.exp_bits, "man_bits": self.man_bits}


LOSSLESS: Registry = Registry("lossless format")
"""Lossless float formats: id -> :class:`LosslessFormat`."""
LOSSLESS.register(LosslessFormat("f32-lossless", "float32", 8, 23),
                  doc="float32 bit for bit (sign+exponent context-coded, mantissa raw)")
LOSSLESS.register(LosslessFormat("bf16-lossless", "bfloat16", 8, 7),
                  doc="bfloat16 bit for bit")
LOSSLESS.register(LosslessFormat("f16-lossless", "float16", 5, 10), doc="float16 bit for bit")


def get_lossless(spec) -> LosslessFormat | None:
    """The lossless format named ``spec`` (None when ``spec`` names none)."""
    name = spec.strip().lower() if isinstance(spec, str) else None
    return LOSSLESS.get(name) if name in LOSSLESS else None


_FP_RE = re.compile(r"^fp(\d+)\.(\d+)(?:-b(-?\d+))?(?:-(ieee|fn|full))?$")
_UNIFORM_RE = re.compile(r"^uniform(\d+)(?:-c(\d+(?:\.\d+)?))?$")

GRID_HELP = (
    "named: " + ", ".join(FORMATS) + "; generic: fpE.M[-bB][-ieee|-fn|-full] (e.g. fp3.2-b3), "
    "uniformB[-cX] (e.g. uniform8, uniform4-c3); lossless (co3 compress only): "
    + ", ".join(LOSSLESS)
)


@dataclass(frozen=True, eq=False)
class Grid:
    """A sign-symmetric quantization grid (see the module docstring)."""

    id: str
    kind: str  # "fp" or "uniform"
    bits: int  # bits of one fixed-length code word, sign included
    magnitudes: np.ndarray = field(repr=False)  # float64, ascending, [0] == 0
    exp_bits: int = 0
    man_bits: int = 0
    bias: int = 0
    top: str = ""
    clip_sigma: float | None = None

    @property
    def K(self) -> int:
        return len(self.magnitudes) - 1

    @property
    def nsym(self) -> int:
        return 2 * self.K + 1

    @property
    def max_value(self) -> float:
        return float(self.magnitudes[-1])

    @property
    def edges(self) -> np.ndarray:
        """Midpoints between consecutive magnitudes (exact in float64)."""
        m = self.magnitudes
        return (m[:-1] + m[1:]) / 2.0

    @functools.cached_property
    def values(self) -> np.ndarray:
        """float32 value of every symbol, index = symbol (computed once; read-only)."""
        m = self.magnitudes.astype(np.float32)
        v = np.concatenate([-m[:0:-1], m]).astype(np.float32)
        v.setflags(write=False)
        return v

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number (fp grids)."""
        return 1 - self.bias

    def config(self) -> dict:
        out = {"id": self.id, "kind": self.kind, "bits": self.bits, "K": self.K}
        if self.kind == "fp":
            out.update(exp_bits=self.exp_bits, man_bits=self.man_bits, bias=self.bias, top=self.top)
        elif self.clip_sigma is not None:
            out["clip_sigma"] = self.clip_sigma
        return out


def _fp_magnitudes(E: int, M: int, bias: int, top: str) -> np.ndarray:
    fields = 2**E - 1 if top == "ieee" else 2**E  # exponent fields in use
    e = np.repeat(np.arange(fields), 2**M)
    m = np.tile(np.arange(2**M), fields)
    if top == "fn":  # drop the NaN code: top field, all-ones mantissa
        e, m = e[:-1], m[:-1]
    frac = m / 2.0**M
    mags = np.where(e == 0, frac, 1.0 + frac) * np.exp2(np.maximum(e, 1) - bias)
    return mags.astype(np.float64)


def get_grid(spec: str) -> Grid:
    """Parse a grid id (named or generic) into a validated :class:`Grid`."""
    if not isinstance(spec, str):
        raise InputError(f"format must be a string, got {spec!r}")
    name = spec.strip().lower()
    generic = FORMATS.get(name) if name in FORMATS else name
    m = _FP_RE.match(generic)
    if m:
        E, M = int(m.group(1)), int(m.group(2))
        top = m.group(4) or "ieee"
        bias = int(m.group(3)) if m.group(3) is not None else 2 ** (E - 1) - 1
        if not (1 <= E <= 8) or not (1 <= M <= 10):
            raise InputError(f"format {spec!r}: need 1 <= E <= 8 exponent bits and 1 <= M <= 10 "
                             f"mantissa bits, got E={E}, M={M}")
        if top == "ieee" and E < 2:
            raise InputError(f"format {spec!r}: an ieee grid needs E >= 2 (use -full or -fn)")
        mags = _fp_magnitudes(E, M, bias, top)
        if len(mags) * 2 - 1 > MAX_SYMBOLS:
            raise InputError(f"format {spec!r} has {2 * len(mags) - 1} symbols; at most "
                             f"{MAX_SYMBOLS} are supported")
        if mags[-1] > float(np.finfo(np.float32).max) or mags[1] < 2.0**-149:
            raise InputError(f"format {spec!r}: bias {bias} puts grid values outside float32's range")
        return Grid(id=name, kind="fp", bits=1 + E + M, magnitudes=mags,
                    exp_bits=E, man_bits=M, bias=bias, top=top)
    m = _UNIFORM_RE.match(generic)
    if m:
        B = int(m.group(1))
        if not 2 <= B <= 12:
            raise InputError(f"format {spec!r}: uniform grids need 2..12 bits, got {B}")
        clip = float(m.group(2)) if m.group(2) is not None else None
        if clip is not None and clip <= 0:
            raise InputError(f"format {spec!r}: clip must be > 0 standard deviations")
        mags = np.arange(2 ** (B - 1), dtype=np.float64)
        return Grid(id=name, kind="uniform", bits=B, magnitudes=mags, clip_sigma=clip)
    if name in LOSSLESS:
        raise InputError(f"format {spec!r} is lossless (no grid to quantize to): only co3 "
                         "compress, decompress, inspect and report take it")
    raise InputError(f"unknown format {spec!r}; allowed: {GRID_HELP}")
