"""Argument checks shared by every module: one message shape, naming the parameter and value.

    check_int("refit_every", 0, lo=1)    -> InputError "refit_every=0 must be an integer >= 1"
    check_real("gamma", 2.0, 0.0, 1.0)   -> InputError "gamma=2.0 must be a number in [0, 1]"
    check_int_list("class_sizes", "1,2", lenient=True) -> (1, 2)

``who`` prefixes the message with the object that refused it (``"co3: "``). ``lenient`` accepts
integral floats and numeric strings (``3.0``, ``"3"``, ``"1,2"``) where values come from a command
line; by default only numbers are numbers (a string read from a file is refused). Booleans are
never numbers here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from co3cli.errors import InputError


def _range_text(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f"in {lo}..{hi}"
    if lo is not None:
        return f">= {lo}"
    return f"<= {hi}" if hi is not None else ""


def check_int(name: str, v: Any, lo: int | None = None, hi: int | None = None, *,
              who: str = "", lenient: bool = False, error: type[Exception] = InputError) -> int:
    """``v`` as an int within [lo, hi] (either bound optional); ``error`` is raised otherwise
    (``CorruptDataError`` where the value was read from a file)."""
    x = None
    if not isinstance(v, (bool, np.bool_)):
        if isinstance(v, (int, np.integer)):
            x = int(v)
        elif lenient:
            try:
                f = float(v)
                x = int(f) if f.is_integer() else None
            except (TypeError, ValueError, OverflowError):
                x = None
    if x is None or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise error(f"{who}{name}={v!r} must be an integer {_range_text(lo, hi)}".rstrip())
    return x


def check_real(name: str, v: Any, lo: float = -math.inf, hi: float = math.inf, *,
               lo_open: bool = False, hi_open: bool = False, who: str = "",
               lenient: bool = False) -> float:
    """``v`` as a finite float within the interval (closed unless ``lo_open``/``hi_open``);
    ``lenient``: a numeric string is a number too (only where a command line is parsed)."""
    x = None
    if not isinstance(v, (bool, np.bool_, str)) or (lenient and isinstance(v, str)):
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise InputError(f"{who}{name}={v!r} is not a number") from None
    if x is None:
        raise InputError(f"{who}{name}={v!r} is not a number")
    if not math.isfinite(x) or x < lo or x > hi or (lo_open and x == lo) or (hi_open and x == hi):
        if hi == math.inf:
            text = f"a finite number {'>' if lo_open else '>='} {lo:g}"
        else:
            text = f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise InputError(f"{who}{name}={v!r} must be {text}")
    return x


def check_int_list(name: str, v: Any, lo: int = 1, *, who: str = "",
                   lenient: bool = False) -> tuple[int, ...]:
    """A non-empty list (tuple, set, array) of integers >= ``lo``; ``lenient`` also takes a comma
    string, a scalar and integral floats (where a command line is parsed)."""
    if lenient and isinstance(v, str):
        v = [s for s in v.replace(" ", "").split(",") if s]
    if lenient and np.isscalar(v):
        v = [v]
    vals = None
    if not isinstance(v, (str, bytes)) and hasattr(v, "__iter__"):
        try:
            vals = [check_int(name, x, lo, lenient=lenient) for x in v]
        except InputError:
            vals = None
    if not vals:
        raise InputError(f"{who}{name}={v!r} must be a non-empty list of integers >= {lo}")
    return tuple(vals)
