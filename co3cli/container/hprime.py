'''What the ``.co3`` 1.5 header's text model is primed with (``co3cli.container.hcm``).

Two kinds of text, both known to the writer and the reader before the text they help with:

* ``PRIME``, a constant: the 1.4 header dictionary (``co3cli.container.hdict.HEADER_DICT_V2``:
  torch's module repr vocabulary, parameter names, co3cli's recorder keys and configs) and an
  example header in the 1.5 layout (the layer lines of a made-up model, the guess below for
  them, and the rest of three made-up headers, one per coder, as ``hcm`` writes them: no
  benchmark's values). Like a preset dictionary, once shipped it never changes: a better one
  is a new header kind.
* :func:`module_guess`: the torch module repr a model with the file's layer names and shapes
  would likely have (``Conv2d``/``Linear``/``Embedding``/norm lines, nested as the names are),
  primed after the layer lines are decoded and before the source's ``model_repr`` is; a
  wrong guess costs nothing but the help it does not give. Frozen with the header kind.
'''

from __future__ import annotations

from co3cli.container.hdict import HEADER_DICT_V2

MAX_DEPTH = 32
"""Modules nested deeper than this are left out of the guess."""


def _norm_kind(module: str, prev_rank: int) -> str:
    m = module.lower()
    if ("ln" in m or "norm" in m) and "bn" not in m and "batch" not in m:
        return "layer"
    return "batch1d" if prev_rank == 2 else "batch2d"


def _line(module: str, params: dict, prev_rank: int) -> str | None:
    """The guessed class and arguments of one module from its parameters' shapes."""
    w = params.get("weight")
    bias = "bias" in params
    if w is None:
        return None
    if len(w) == 4:
        o, i, kh, kw = w
        s = f"Conv2d({i}, {o}, kernel_size=({kh}, {kw}), stride=(1, 1)"
        if kh > 1 or kw > 1:
            s += f", padding=({kh // 2}, {kw // 2})"
        return s + ("" if bias else ", bias=False") + ")"
    if len(w) == 3:
        o, i, k = w
        s = f"Conv1d({i}, {o}, kernel_size=({k},), stride=(1,)"
        if k > 1:
            s += f", padding=({k // 2},)"
        return s + ("" if bias else ", bias=False") + ")"
    if len(w) == 2:
        o, i = w
        m = module.lower()
        if "emb" in m or m in ("pos", "tok", "wte", "wpe"):
            return f"Embedding({o}, {i})"
        return f"Linear(in_features={i}, out_features={o}, bias={bias})"
    if len(w) == 1:
        c = w[0]
        kind = _norm_kind(module, prev_rank)
        if kind == "layer":
            return f"LayerNorm(({c},), eps=1e-05, elementwise_affine=True, bias={bias})"
        return (f"BatchNorm{'1d' if kind == 'batch1d' else '2d'}({c}, eps=1e-05, momentum=0.1, "
                "affine=True, bias=True, track_running_stats=True)")
    return None


def module_guess(layers: list, limit: int | None = None) -> str:
    """torch's repr of a ``Sequential`` holding modules with these parameters, guessed from
    ``layers`` ((name, shape) each, in the file's order): a module per name less its last
    part, containers for the parts before, two spaces of indent a level. ``limit``: stop
    once the text has at least that many characters (its first ``limit`` are the whole
    guess's: deep names that alternate at the top would make it ~36x their lines)."""
    mods: list = []  # (path, {parameter: shape})
    for name, shape in layers:
        parts = name.split(".")
        path = tuple(parts[:-1])
        if len(path) > MAX_DEPTH:
            continue
        if mods and mods[-1][0] == path:
            mods[-1][1][parts[-1]] = shape
        else:
            mods.append((path, {parts[-1]: shape}))
    out, open_path, prev_rank = ["Sequential("], (), 0
    size, counted = 0, 0  # characters of out[:counted] joined by newlines
    for path, params in mods:
        if limit is not None:
            size += sum(len(s) + 1 for s in out[counted:])
            counted = len(out)
            if size >= limit:
                return "\n".join(out)
        if not path:
            continue
        k = 0
        while k < min(len(open_path), len(path) - 1) and open_path[k] == path[k]:
            k += 1
        out += ["  " * d + ")" for d in range(len(open_path), k, -1)]
        out += ["  " * (d + 1) + f"({path[d]}): Sequential(" for d in range(k, len(path) - 1)]
        open_path = path[:-1]
        line = _line(path[-1], params, prev_rank)
        if line is not None:
            out.append("  " * len(path) + f"({path[-1]}): {line}")
            prev_rank = len(params.get("weight", ()))
    out += ["  " * d + ")" for d in range(len(open_path), 0, -1)]
    return "\n".join(out + [")"])


EXAMPLE = (
    'features.0.weight 32,3,5,5\n'
    'features.0.bias 32\n'
    'features.1.weight 32\n'
    'features.1.bias 32\n'
    'features.3.weight 64,32,3,3\n'
    'classifier.weight 100,1024\n'
    'classifier.bias 100\n'
    'layer3.1.conv2.weight 256,256,3,3\n'
    'layer3.1.bn2.weight 256\n'
    'layer3.1.bn2.bias 256\n'
    'lm_head.weight 50257,768\n'
    'ln_f.weight 768\n'
    'ln_f.bias 768\n'
    'Sequential(\\n  (features): Sequential(\\n    (0): Conv2d(3, 32, kernel_size=(5, 5), st'
    'ride=(1, 1), padding=(2, 2))\\n    (1): BatchNorm2d(32, eps=1e-05, momentum=0.1, affine'
    '=True, bias=True, track_running_stats=True)\\n    (3): Conv2d(32, 64, kernel_size=(3, 3'
    '), stride=(1, 1), padding=(1, 1), bias=False)\\n  )\\n  (classifier): Linear(in_feature'
    's=1024, out_features=100, bias=True)\\n  (layer3): Sequential(\\n    (1): Sequential(\\'
    'n      (conv2): Conv2d(256, 256, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bia'
    's=False)\\n      (bn2): BatchNorm2d(256, eps=1e-05, momentum=0.1, affine=True, bias=Tru'
    'e, track_running_stats=True)\\n    )\\n  )\\n  (lm_head): Linear(in_features=768, out_f'
    'eatures=50257, bias=False)\\n  (ln_f): LayerNorm((768,), eps=1e-05, elementwise_affine='
    'True, bias=True)\\n){"co3cli_version":"0.1.0","codebook":null,"coder":{"id":"ctx","limi'
    't":60,"model_version":4,"precision":16},"format":{"K":5,"bias":1,"bits":4,"exp_bits":2,'
    '"id":"fp4-co3","kind":"fp","man_bits":1,"top":"ieee"},"joined_steps":{"max_entries":655'
    '36},"model":"auto","scale_rule":"absmax","small_layers":{"group_entries":1048576,"max_e'
    'ntries":65536,"min_layers":2,"pool":"all"},"tie_rule":"nearest, ties to even magnitude '
    'index; saturate at +-max; -0 == +0","source":{"batch_size":128,"co3cli_version":"0.1.0"'
    ',"dataset":"mnist","epochs_trained":1,"every":1,"final_loss":0.5,"lr":0.1,"model":"cnn-'
    'c32-c64-fc100-relu","momentum":0.0,"n_test":1000,"n_train":4000,"nonfinite_steps":0,"on'
    '_nonfinite":"error","optimizer":"sgd","recorder":"co3cli.GradientRecorder","reduction":'
    '"per-step","schema":"co3.gradients/1","seed":0,"steps_per_epoch":32,"steps_trained":100'
    ',"synthetic":false,"task":"mnist-cnn","test_accuracy":0.5,"torch_version":"2.13.0+cpu",'
    '"model_repr":"Sequential(\\n  (conv1): Conv2d(3, 32, kernel_size=(5, 5), stride=(1, 1),'
    ' padding=(2, 2))\\n  (relu1): ReLU()\\n)","config":{"batch_size":128,"epoch_average":fa'
    'lse,"epochs":null,"every":1,"layers":"*","lr":0.1,"momentum":0.0,"on_nonfinite":"error"'
    ',"optimizer":"sgd","seed":0,"steps":100,"task":"mnist-cnn","test_fraction":0.2}}}{"co3c'
    'li_version":"0.1.0","codebook":null,"coder":{"id":"ans","precision":16},"format":{"K":1'
    '26,"bias":7,"bits":8,"exp_bits":4,"id":"fp8-e4m3","kind":"fp","man_bits":3,"top":"fn"},'
    '"joined_steps":{"max_entries":65536},"model":"gennorm-zi","scale_rule":"absmax","small_'
    'layers":{"group_entries":1048576,"max_entries":65536,"min_layers":2,"pool":"all"},"tie_'
    'rule":"nearest, ties to even magnitude index; saturate at +-max; -0 == +0","source":{"b'
    'atch_size":128,"co3cli_version":"0.1.0","dataset":"mnist","epochs_trained":1,"every":1,'
    '"final_loss":0.5,"lr":0.1,"model":"cnn-c32-c64-fc100-relu","momentum":0.0,"n_test":1000'
    ',"n_train":4000,"nonfinite_steps":0,"on_nonfinite":"error","optimizer":"sgd","recorder"'
    ':"co3cli.GradientRecorder","reduction":"per-step","schema":"co3.gradients/1","seed":0,"'
    'steps_per_epoch":32,"steps_trained":100,"synthetic":false,"task":"mnist-cnn","test_accu'
    'racy":0.5,"torch_version":"2.13.0+cpu","model_repr":"Sequential(\\n  (conv1): Conv2d(3,'
    ' 32, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2))\\n  (relu1): ReLU()\\n)","confi'
    'g":{"batch_size":128,"epoch_average":false,"epochs":null,"every":1,"layers":"*","lr":0.'
    '1,"momentum":0.0,"on_nonfinite":"error","optimizer":"sgd","seed":0,"steps":100,"task":"'
    'mnist-cnn","test_fraction":0.2}}}{"co3cli_version":"0.1.0","codebook":null,"coder":{"id'
    '":"huffman","max_len":16},"format":{"K":123,"bias":15,"bits":8,"exp_bits":5,"id":"fp8-e'
    '5m2","kind":"fp","man_bits":2,"top":"ieee"},"joined_steps":{"max_entries":65536},"model'
    '":"empirical","scale_rule":"absmax","small_layers":{"group_entries":1048576,"max_entrie'
    's":65536,"min_layers":2,"pool":"all"},"tie_rule":"nearest, ties to even magnitude index'
    '; saturate at +-max; -0 == +0","source":{"batch_size":128,"co3cli_version":"0.1.0","dat'
    'aset":"mnist","epochs_trained":1,"every":1,"final_loss":0.5,"lr":0.1,"model":"cnn-c32-c'
    '64-fc100-relu","momentum":0.0,"n_test":1000,"n_train":4000,"nonfinite_steps":0,"on_nonf'
    'inite":"error","optimizer":"sgd","recorder":"co3cli.GradientRecorder","reduction":"per-'
    'step","schema":"co3.gradients/1","seed":0,"steps_per_epoch":32,"steps_trained":100,"syn'
    'thetic":false,"task":"mnist-cnn","test_accuracy":0.5,"torch_version":"2.13.0+cpu","mode'
    'l_repr":"Sequential(\\n  (conv1): Conv2d(3, 32, kernel_size=(5, 5), stride=(1, 1), padd'
    'ing=(2, 2))\\n  (relu1): ReLU()\\n)","config":{"batch_size":128,"epoch_average":false,"'
    'epochs":null,"every":1,"layers":"*","lr":0.1,"momentum":0.0,"on_nonfinite":"error","opt'
    'imizer":"sgd","seed":0,"steps":100,"task":"mnist-cnn","test_fraction":0.2}}}'
)
"""An example header in the 1.5 layout: layer lines, their :func:`module_guess` (as JSON
string text), and the rest of three headers (ctx/fp4-co3, ans/fp8-e4m3, huffman/fp8-e5m2)."""

PRIME = HEADER_DICT_V2 + EXAMPLE.encode()
"""The constant text the 1.5 header's model is primed with first (never changes: a test pins
its Adler-32)."""
