'''Preset zlib dictionaries for the ``.co3`` header (version 1.3 and later).

A small file's header is a large share of it (a 51,220-entry dump: 1,457 bytes of zlib'd JSON
in a 41 KB file, its provenance two thirds of that): the JSON keys, the format and coder
configs, the tie rule and the source's torch module repr repeat from file to file but not
within one header, where plain zlib would find them. The writer deflates the header with a
preset dictionary of those strings; the zlib stream names it (FDICT flag, the dictionary's
Adler-32 in its first bytes), so a reader picks it from ``DICTIONARIES`` by that id and a file
naming an unknown one is refused with one line (written by a newer co3cli).

A dictionary, once shipped, never changes (old files name it by its checksum); a better one
is added as a new entry and written from then on. ``HEADER_DICT_V1`` is written by co3cli 0.1.0
(``.co3`` 1.3), ``HEADER_DICT_V2`` by ``.co3`` 1.4. zlib finds the strings nearest the dictionary's end the cheapest, so the most
common come last.
'''

from __future__ import annotations

import zlib

_MODULES = (  # torch's module repr vocabulary (no model of the benchmarks verbatim)
    'Sequential(\n  (0): BasicBlock(\n      (shortcut): Sequential()\n    )\n  )\n'
    '(conv1): Conv2d(3, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)\n'
    '(conv2): Conv2d(64, 128, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))\n'
    '(bn1): BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=True, bias=True, '
    'track_running_stats=True)\n'
    '(bn2): BatchNorm1d(128, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n'
    '(ln): LayerNorm((512,), eps=1e-05, elementwise_affine=True)\n'
    '(emb): Embedding(, )\n(drop): Dropout(p=0.1, inplace=False)\n'
    '(pool): AdaptiveAvgPool2d(output_size=1)\n(gelu): GELU(approximate=\'none\')\n'
    '(pool1): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n'
    '(relu1): ReLU()\n  (relu2): ReLU()\n'
    '(flatten): Flatten(start_dim=1, end_dim=-1)\n'
    '  (fc1): Linear(in_features=512, out_features=256, bias=True)\n'
    '  (fc): Linear(in_features=, out_features=10, bias=True)\n)'
)
_SOURCE = (  # co3cli's own recorder attributes: keys and co3 capture's defaults, no task's values
    '"source":{"batch_size":64,"co3cli_version":"0.1.0","config":"{\\"batch_size\\": 64, '
    '\\"epoch_average\\": false, \\"epochs\\": null, \\"every\\": 1, \\"layers\\": \\"*\\", '
    '\\"lr\\": 0.1, \\"momentum\\": 0.0, \\"on_nonfinite\\": \\"error\\", \\"optimizer\\": '
    '\\"sgd\\", \\"seed\\": 0, \\"steps\\": , \\"task\\": \\"'
    '\\", \\"test_fraction\\": 0.2}","created":"2026-12-01T00:00:00+00:00","dataset":"",'
    '"epochs_trained":1,"every":1,"final_loss":0.,"layers":"[\\"conv1.weight\\", '
    '\\"conv1.bias\\", \\"bn1.weight\\", \\"bn1.bias\\", \\"layer1.0.conv1.weight\\", '
    '\\"fc1.weight\\", \\"fc1.bias\\"]","lr":0.1,"model":"","model_repr":'
    '"Sequential(\\n  (conv1): ","momentum":0.0,"n_test":,"n_train":,'
    '"nonfinite_steps":0,"on_nonfinite":"error","optimizer":"sgd","recorder":'
    '"co3cli.GradientRecorder","reduction":"per-step","schema":"co3.gradients/1","seed":0,'
    '"steps_per_epoch":,"steps_trained":,"synthetic":false,"task":"",'
    '"test_accuracy":0.,"torch_version":"2.13.0+cpu"}}'
)
_HEADER = (
    '{"co3cli_version":"0.1.0","codebook":null,"coder":{"id":"ctx-steps","key_every":16,'
    '"limit":60,"precision":16},"coder":{"id":"huffman","max_len":16},"coder":{"id":"ans",'
    '"precision":16},"format":{"K":126,"bias":7,"bits":8,"exp_bits":4,"id":"fp8-e4m3",'
    '"kind":"fp","man_bits":3,"top":"fn"},"format":{"K":5,"bias":1,"bits":4,"exp_bits":2,'
    '"id":"fp4-co3","kind":"fp","man_bits":1,"top":"ieee"},"format":{"K":123,"bias":15,'
    '"bits":8,"exp_bits":5,"id":"fp8-e5m2","kind":"fp","man_bits":2,"top":"ieee"},'
    '"coder":{"id":"ctx","limit":60,"precision":16},"created":"2026-12-01T00:00:00+00:00",'
    '"layers":[{"name":"layer1.0.conv1.weight","numel":,"shape":[,3,3]},{"name":'
    '"layer1.0.bn1.running_mean","numel":,"shape":[]},{"name":"conv1.bias","numel":,'
    '"shape":[]},{"name":"fc1.weight","numel":,"shape":[,]},{"name":"fc.bias",'
    '"numel":10,"shape":[10]}],"loss":[],"model":"gennorm-zi","model":"empirical",'
    '"model":"auto","scale_rule":"absmax","scale_rule":"co3-poly","small_layers":'
    '{"group_entries":1048576,"max_entries":8192,"min_layers":8},"small_layers":'
    '{"group_entries":1048576,"max_entries":65536,"min_layers":2,"pool":"all"},"joined_steps":'
    '{"max_entries":65536},"tie_rule":"nearest, ties to even magnitude index; saturate at '
    '+-max; -0 == +0",'
)
HEADER_DICT_V1 = (_MODULES + _SOURCE + _HEADER).encode()

_NAMES = (  # 1.4: layer names go in the binary section (co3cli.container.hcompact): torch's
    # parameter and buffer vocabulary, and a group block's metadata
    'running_meanrunning_varnum_batches_trackedin_proj_weightout_proj.weight'
    'downsample.0.weightdownsample.1.biasshortcut.0.weightembed.weightlm_head.weight'
    'attn.qkv.weightmlp.fc1.weightnorm1.weightln_f.biasclassifier.weight'
    'features.0.weightencoder.layers.0.linear2.bias'
    'conv2.weightconv2.biasbn2.weightbn2.biasfc2.weightfc2.biasfc.weightfc.bias'
    '{"model":"empirical-octaves"}{"model":"uniform"}{"model":"empirical"}'
)
_HEADER_V2 = _HEADER[:_HEADER.index('"layers":[')] + _HEADER[_HEADER.index('"loss":[],'):]
HEADER_DICT_V2 = (_MODULES + _NAMES + _SOURCE + _HEADER_V2).encode()
"""Written by ``.co3`` 1.4 (the compact header): V1 less the JSON layer list (now binary),
with torch's parameter-name vocabulary and the group metadata of the ``ctx`` priors."""

DICTIONARIES = {zlib.adler32(d): d for d in (HEADER_DICT_V1, HEADER_DICT_V2)}
"""Every preset dictionary a reader knows, by its Adler-32 (the zlib stream's DICTID)."""

WRITE_DICT = HEADER_DICT_V2
"""The dictionary new files are written with."""


def deflate(raw: bytes, zdict: bytes = WRITE_DICT) -> bytes:
    """``raw`` zlib-compressed (level 9) with preset dictionary ``zdict``."""
    c = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, zdict=zdict)
    return c.compress(raw) + c.flush()


def stream_dict_id(js: bytes) -> int | None:
    """The DICTID a zlib stream names (a valid zlib header with the FDICT flag set), else None
    (zlib then says what is wrong with the stream)."""
    if len(js) >= 6 and js[0] & 0x0F == 8 and (js[0] << 8 | js[1]) % 31 == 0 and js[1] & 0x20:
        return int.from_bytes(js[2:6], "big")
    return None
