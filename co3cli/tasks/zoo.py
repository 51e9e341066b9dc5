"""The larger built-in models: a character-level transformer and ResNets with batch norm.

::

    char_transformer(vocab, context, d_model, layers, heads)   tokens (B, T) int64
        embed(vocab, d) + pos(T, d) -> layers x [LayerNorm -> causal self-attention -> +,
        LayerNorm -> Linear(d, 4d) -> GELU -> Linear(4d, d) -> +] -> LayerNorm -> head(d, vocab)
        -> logits (B, vocab, T)          class dimension second, like every classifier here

    resnet(in_channels, widths, blocks, num_classes)          images (B, C, H, W)
        conv3x3 stem + BN + ReLU -> stages of BasicBlocks (conv-BN-ReLU-conv-BN + shortcut;
        stride 2 from the second stage on) -> global average pool -> Linear -> logits (B, K)

The transformer returns its logits as ``(B, vocab, T)`` so that ``F.cross_entropy(out, y)``
with next-token targets ``y`` (B, T) is the mean next-character loss and ``out.argmax(1) == y``
the next-character accuracy: capture, the FL engines and ``co3cli.tasks.evaluate`` treat it like
any classifier. Its gradients are unlike a ReLU MLP's: GELU and LayerNorm leave no exact-zero
rows, except the embedding's, whose rows are exactly zero for the tokens a batch does not hold
(the output head is a separate matrix, not tied to the embedding, so that stays visible).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


def char_transformer(vocab: int = 128, context: int = 64, d_model: int = 256, layers: int = 4,
                     heads: int = 4) -> Any:
    """A GPT-style pre-norm causal transformer over ``vocab`` characters (see the module doc)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d_model)
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)
            self.ln2 = nn.LayerNorm(d_model)
            self.fc1 = nn.Linear(d_model, 4 * d_model)
            self.fc2 = nn.Linear(4 * d_model, d_model)

        def forward(self, h):
            b, t, d = h.shape
            q, k, v = self.qkv(self.ln1(h)).view(b, t, 3, heads, d // heads).unbind(2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))

    class CharTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            if d_model % heads:
                raise ValueError(f"d_model={d_model} is not a multiple of heads={heads}")
            self.embed = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(context, d_model)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab)

        def forward(self, x):
            t = x.shape[1]
            h = self.embed(x) + self.pos(torch.arange(t, device=x.device))
            return self.head(self.ln(self.blocks(h))).transpose(1, 2)

    return CharTransformer()


def resnet(in_channels: int = 3, widths: tuple[int, ...] = (64, 128, 256), blocks: int = 2,
           num_classes: int = 10) -> Any:
    """A CIFAR-style ResNet: conv3x3 stem, BasicBlock stages (stride 2 between), avgpool, fc."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    mods: list[tuple[str, Any]] = [
        ("conv1", nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False)),
        ("bn1", nn.BatchNorm2d(widths[0])),
        ("relu1", nn.ReLU()),
    ]
    cin = widths[0]
    for i, w in enumerate(widths):
        stage = [BasicBlock(cin if b == 0 else w, w, 2 if (b == 0 and i > 0) else 1)
                 for b in range(blocks)]
        mods.append((f"layer{i + 1}", nn.Sequential(*stage)))
        cin = w
    mods += [("pool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()),
             ("fc", nn.Linear(cin, num_classes))]
    return nn.Sequential(OrderedDict(mods))
