"""Which parameters a ``GradientRecorder`` records: globs or a regex over parameter names; tied
parameters once (the others become aliases), frozen ones listed as absent."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from co3cli.errors import InputError


def _matcher(layers: str):
    if not isinstance(layers, str) or not layers.strip():
        raise InputError(f"layers={layers!r} must be a non-empty glob list or 're:<regex>'")
    if layers.startswith("re:"):
        try:
            rx = re.compile(layers[3:])
        except re.error as exc:
            raise InputError(f"layers={layers!r} is not a valid regular expression: {exc}") from exc
        return lambda n: rx.fullmatch(n) is not None
    patterns = [p.strip() for p in layers.split(",") if p.strip()]
    if not patterns:
        raise InputError(f"layers={layers!r} holds no glob pattern")
    return lambda n: any(fnmatch.fnmatchcase(n, p) for p in patterns)


def select(model: Any, layers: str) -> tuple[list[tuple[str, Any]], dict[str, str], dict[str, str]]:
    """The parameters ``layers`` selects: ``(recorded [(name, p)], aliases, absent)``.

    A tensor reachable under several names (tied) is selected when any name matches and is
    recorded under its first name; ``aliases`` maps its other names to that one. Frozen
    parameters go to ``absent`` ({name: reason}) instead of ``recorded``.
    """
    match = _matcher(layers)
    names: dict[int, list[str]] = {}
    params: dict[int, Any] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
        params[id(p)] = p
    recorded, aliases, absent = [], {}, {}
    for key, all_names in names.items():
        if not any(match(n) for n in all_names):
            continue
        first, p = all_names[0], params[key]
        if not p.requires_grad:
            absent[first] = "frozen (requires_grad=False)"
            continue
        recorded.append((first, p))
        aliases.update({alias: first for alias in all_names[1:]})
    if not recorded:
        listed = ", ".join(n for ns in names.values() for n in ns)
        why = f" (all frozen: {', '.join(absent)})" if absent else ""
        raise InputError(
            f"layers={layers!r} selects no trainable parameter{why}; parameters: {listed}"
        )
    return recorded, aliases, absent
