"""The registry and argument-check helpers every pluggable kind is built on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from co3cli.checks import check_int, check_int_list, check_real
from co3cli.errors import InputError
from co3cli.registry import Configurable, Registry


def _registry():
    reg = Registry("widget", fallback=lambda k: "generic" if k.startswith("gen-") else None,
                   describe="gen-N")

    @reg.register
    class Small(Configurable):
        """A small widget."""

        id, kind, PARAMS = "small", "widget", {"size": 1, "color": None}

        def check(self):
            check_int("size", self.params["size"], lo=1, who="small: ")

    reg.register(len, id="length", doc="the length")
    return reg, Small


def test_registry_builds_round_trips_and_lists():
    reg, Small = _registry()
    assert reg.ids() == ("small", "length") and "small" in reg and len(reg) == 2
    w = reg.build("small", size=3)
    assert w.config() == {"id": "small", "size": 3, "color": None}
    assert reg.from_config(w.config()).config() == w.config()
    assert reg.get("length") is len and reg.doc("small") == "A small widget."
    assert reg.get("gen-7") == "generic"
    assert reg.allowed() == "small, length, gen-N"


def test_registry_membership_and_null_configs():
    reg, Small = _registry()
    assert ["small"] not in reg and None not in reg  # unhashable or odd keys: not members
    with pytest.raises(InputError, match="unknown widget"):
        reg.get(["small"])
    with pytest.raises(InputError, match="'small' config: size is null"):
        reg.from_config({"id": "small", "size": None})
    assert reg.from_config({"id": "small", "color": None}).config()["size"] == 1


def test_registry_refuses_unknowns_naming_the_allowed():
    reg, Small = _registry()
    with pytest.raises(InputError, match=r"unknown widget 'big'; allowed: small, length, gen-N"):
        reg.get("big")
    with pytest.raises(InputError, match=r"unknown parameter\(s\) \['weight'\]; allowed: size"):
        reg.build("small", weight=2)
    with pytest.raises(InputError, match="small: size=0 must be an integer >= 1"):
        reg.build("small", size=0)
    with pytest.raises(InputError, match="already registered"):
        reg.register(Small)
    with pytest.raises(InputError, match="must be a dict with an 'id'"):
        reg.from_config(["small"])


def test_checks():
    assert check_int("n", np.int64(4), lo=1) == 4
    assert check_int("n", "3", lo=1, lenient=True) == 3
    for bad in (True, 2.5, "3", None, 0):
        with pytest.raises(InputError, match=r"n=.* must be an integer >= 1"):
            check_int("n", bad, lo=1)
    with pytest.raises(InputError, match=r"k=9 must be an integer in 1..8"):
        check_int("k", 9, lo=1, hi=8)
    assert check_real("gamma", 1, 0.0, 1.0) == 1.0
    with pytest.raises(InputError, match=r"gamma=2.0 must be a number in \[0, 1\]"):
        check_real("gamma", 2.0, 0.0, 1.0)
    with pytest.raises(InputError, match=r"lr=0 must be a finite number > 0"):
        check_real("lr", 0, 0.0, lo_open=True)
    for bad in (math.nan, "x", "0.5", False):  # strings are numbers only when lenient
        with pytest.raises(InputError):
            check_real("lr", bad, 0.0)
    assert check_real("lr", "0.5", 0.0, lenient=True) == 0.5
    assert check_int_list("sizes", (1, np.int64(2))) == (1, 2)
    assert check_int_list("sizes", "1, 2,6", lenient=True) == (1, 2, 6)
    assert check_int_list("sizes", 3, lenient=True) == (3,)
    for bad in ("1,2", 3, [2.0], [True], [], [0]):  # strict: a list of integers only
        with pytest.raises(InputError, match="non-empty list of integers >= 1"):
            check_int_list("sizes", bad)
    for bad in ("", [0], [1.5], "a"):
        with pytest.raises(InputError, match="non-empty list of integers >= 1"):
            check_int_list("sizes", bad, lenient=True)
