"""co3cli: how many bits does a gradient really need?

Data flow (see README.md for the commands)::

    training run --capture--> dump.h5 --fit--> fits --codebook--> book.json
                                 |                                   |
                                 +-----------compress--------------> grads.co3 --decompress--> dump_q.h5
                                                                         |
                                               report: bits/entry vs entropy

References: "DNN gradient lossless compression: Can GenNorm be the answer?";
"CO3: convert, compress, correct" (federated learning); "UEP codes for distributed
approximate matrix multiplication" (stragglers).
"""

__version__ = "0.1.0"

from co3cli.errors import Co3Error, CorruptDataError, InputError  # noqa: E402

__all__ = ["__version__", "Co3Error", "CorruptDataError", "GradientRecorder", "InputError"]


def __getattr__(name: str):
    # lazy, so that ``import co3cli`` does not import torch/h5py
    if name == "GradientRecorder":
        from co3cli.recorder import GradientRecorder

        return GradientRecorder
    raise AttributeError(f"module 'co3cli' has no attribute {name!r}")
