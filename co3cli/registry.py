"""One registry for every pluggable kind: grids, scale rules, models, coders, compressors, UEP
codes, capture tasks.

Each kind keeps one :class:`Registry`; an entry has a stable id (lowercase, hyphens) and, for
classes, a ``PARAMS`` dict (name -> default). Configs travel as plain dicts ``{"id": ..., **params}``
(numcodecs' ``get_config``/``from_config``), written into every output so a run can be rebuilt::

    CODERS = Registry("coder")

    @CODERS.register
    class AnsCoder(Configurable):
        id = "ans"
        PARAMS = {"precision": 16}

    coder = CODERS.build("ans", precision=12)     # unknown id/params -> InputError
    CODERS.from_config(coder.config()).config() == coder.config()  # round-trips
    CODERS.ids(), CODERS.allowed()                # CLI choices and help texts

Error messages, CLI choices and help texts all come from the registry, so a new entry is one
module plus one registration line. An entry in a heavy module (numba kernels) can be registered
lazily (``register_lazy(id, "module:attr", doc=...)``): ``ids()``/``doc()`` then cost no import.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Generic, Iterator, TypeVar

from co3cli.errors import InputError

T = TypeVar("T")


def spell(values) -> str:
    """Values as the CLI spells them: ``a, b, c`` (no brackets, no quotes)."""
    return ", ".join(str(v) for v in values)


def one_of(name: str, value: Any, allowed, who: str = "") -> Any:
    """``value`` when it is in ``allowed``, else InputError ``{who}name='x' is not one of a, b``:
    the one message of every fixed-choice option that has no registry of its own."""
    if value not in tuple(allowed):
        raise InputError(f"{who}{name}={value!r} is not one of {spell(allowed)}")
    return value


class Registry(Generic[T]):
    """Stable id -> entry (a class, a function or an object with an ``id``), in registration order.

    ``fallback`` (optional) resolves ids that are not registered by name, e.g. generic grid specs
    (``fp3.2-b3``); it returns an entry or None. ``describe`` is the text the CLI shows for the
    open-ended part (``"fpE.M[-bB]"``).
    """

    def __init__(self, kind: str, *, fallback: Callable[[str], T | None] | None = None,
                 describe: str = ""):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._doc: dict[str, str] = {}
        self._fallback = fallback
        self._describe = describe

    def register(self, entry: T | None = None, *, id: str | None = None, doc: str | None = None):
        """Add ``entry`` under ``id`` (default: ``entry.id``); usable as a decorator."""
        if entry is None:
            return lambda e: self.register(e, id=id, doc=doc)
        key = id if id is not None else getattr(entry, "id", None)
        if not isinstance(key, str) or not key:
            raise InputError(f"{self.kind}: an entry needs a non-empty string id, got {key!r}")
        if key in self._entries:
            raise InputError(f"{self.kind} {key!r} is already registered")
        self._entries[key] = entry
        text = doc if doc is not None else (getattr(entry, "__doc__", None) or "")
        self._doc[key] = text.strip().split("\n")[0]
        return entry

    def register_lazy(self, id: str, target: str, *, doc: str = "") -> None:
        """Add an entry that lives in a heavy module (``"package.module:attr"``), imported on the
        first ``get``: listing ids and docs (CLI help) then imports nothing of it."""
        if id in self._entries:
            raise InputError(f"{self.kind} {id!r} is already registered")
        self._entries[id] = _Lazy(target)
        self._doc[id] = doc

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def ids(self) -> tuple[str, ...]:
        """The registered ids, in registration order."""
        return tuple(self._entries)

    def doc(self, key: str) -> str:
        """The first line of an entry's docstring (or the ``doc`` it was registered with)."""
        return self._doc[key]

    @property
    def describe(self) -> str:
        """The open-ended part the ``fallback`` accepts, as the CLI spells it ("" if none)."""
        return self._describe

    def allowed(self) -> str:
        """The valid values as the CLI spells them: ``"a, b, c"`` (plus the open-ended form)."""
        text = ", ".join(self._entries)
        return f"{text}, {self._describe}" if self._describe else text

    def get(self, key: Any) -> T:
        """The entry registered as ``key``; an unknown id raises InputError listing the allowed."""
        if isinstance(key, str):
            if key in self._entries:
                entry = self._entries[key]
                if isinstance(entry, _Lazy):
                    entry = self._entries[key] = entry.load()
                return entry
            if self._fallback is not None:
                found = self._fallback(key)
                if found is not None:
                    return found
        raise InputError(f"unknown {self.kind} {key!r}; allowed: {self.allowed()}")

    def check(self, key: Any) -> str:
        """``key`` if it is a registered id (InputError otherwise)."""
        self.get(key)
        return key

    def build(self, key: str, **params: Any):
        """``get(key)(**params)``: an instance of a registered class."""
        return self.get(key)(**params)

    def from_config(self, config: Any):
        """Inverse of ``obj.config()``: ``{"id": ..., **params}`` -> an instance."""
        if not isinstance(config, dict) or "id" not in config:
            raise InputError(f"{self.kind} config must be a dict with an 'id'; allowed ids: "
                             f"{self.allowed()}")
        params = dict(config)
        key = params.pop("id")
        entry = self.get(key)
        defaults = getattr(entry, "PARAMS", {})
        for k, v in getattr(entry, "CONFIG_DEFAULTS", {}).items():  # what a config without
            if k in defaults:  # the key meant (written before the parameter existed)
                params.setdefault(k, v)
        nulls = sorted(k for k, v in params.items() if v is None and defaults.get(k) is not None)
        if nulls:  # a config states its values: null is not "the default" here
            raise InputError(f"{self.kind} {key!r} config: {', '.join(nulls)} is null")
        return self.build(key, **params)


class _Lazy:
    """A registry entry not imported yet: ``"package.module:attr"``."""

    def __init__(self, target: str):
        self.target = target

    def load(self):
        import importlib

        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


class Configurable:
    """Base for registered classes: ``id``, ``PARAMS`` (name -> default), ``config()``.

    The constructor refuses unknown parameters (naming the allowed ones), fills in defaults
    (a ``None`` value means "the default") and calls :meth:`check`.
    """

    id: ClassVar[str] = ""
    kind: ClassVar[str] = "entry"  # the registry's kind, for messages
    PARAMS: ClassVar[dict[str, Any]] = {}

    def __init__(self, **params: Any):
        unknown = sorted(set(params) - set(self.PARAMS))
        if unknown:
            allowed = ", ".join(self.PARAMS) or "none"
            raise InputError(f"{self.kind} {self.id!r}: unknown parameter(s) {unknown}; "
                             f"allowed: {allowed}")
        self.params = {**self.PARAMS, **{k: v for k, v in params.items() if v is not None}}
        self.check()

    def check(self) -> None:
        """Validate ``self.params`` (raise InputError naming the parameter)."""

    def config(self) -> dict[str, Any]:
        return {"id": self.id, **self.params}
