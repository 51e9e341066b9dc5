"""Errors the library raises on bad input. The CLI turns each into one line on stderr, exit 1."""


class Co3Error(Exception):
    """Base class: a problem with the user's input, files or options (never a bug)."""


class InputError(Co3Error, ValueError):
    """An argument, option or input file is not acceptable (the message names it)."""


class CorruptDataError(Co3Error):
    """Encoded data fails a structural check or checksum; nothing decoded from it is returned."""


class ConfigMismatchError(InputError):
    """The ranks of one distributed job were configured differently (format, coder, ...,
    world size): checked once, at the first step, on every rank."""


class StateMismatchError(InputError):
    """A checkpointed co3 state (DDP hook, FSDP reduce-scatter) loaded where it does not
    belong: another rank, world size, format, coder or model (the message names which)."""
