"""Real architectures nobody in this project wrote, in plain torch.nn (torchvision does not work
here): the models the importers are tested on. Random weights, built on demand; torch imported
by the caller's first use."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


class BasicBlock(nn.Module):
    """ResNet basic block with a projection shortcut, then a classifier head."""

    def __init__(self, cin: int = 3, cout: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2, bias=False), nn.BatchNorm2d(cout))
        self.fc = nn.Linear(cout, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y = F.relu(y + self.down(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class MobileNetV3Block(nn.Module):
    """Inverted residual: expand, depthwise conv, squeeze-excite (hardsigmoid), hardswish, project."""

    def __init__(self, c: int = 16, expand: int = 48, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c), nn.Hardswish())
        self.expand = nn.Sequential(nn.Conv2d(c, expand, 1, bias=False), nn.BatchNorm2d(expand), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(expand, expand, 3, padding=1, groups=expand, bias=False), nn.BatchNorm2d(expand), nn.Hardswish())
        self.se_reduce = nn.Conv2d(expand, 12, 1)
        self.se_expand = nn.Conv2d(12, expand, 1)
        self.project = nn.Sequential(nn.Conv2d(expand, c, 1, bias=False), nn.BatchNorm2d(c))
        self.head = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.dw(self.expand(x))
        s = F.adaptive_avg_pool2d(y, 1)
        s = F.hardsigmoid(self.se_expand(F.relu(self.se_reduce(s))))
        y = self.project(y * s) + x
        return self.head(y.mean((2, 3)))


class EfficientNetBlock(nn.Module):
    """MBConv with SiLU and a mean-based squeeze-excite."""

    def __init__(self, c: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c), nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(c, c, 5, padding=2, groups=c, bias=False), nn.BatchNorm2d(c), nn.SiLU())
        self.se1, self.se2 = nn.Conv2d(c, 4, 1), nn.Conv2d(4, c, 1)
        self.pw = nn.Sequential(nn.Conv2d(c, 2 * c, 1, bias=False), nn.BatchNorm2d(2 * c))
        self.head = nn.Linear(2 * c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.dw(x)
        s = torch.sigmoid(self.se2(F.silu(self.se1(y.mean((2, 3), keepdim=True)))))
        y = self.pw(y * s + x)
        return self.head(F.silu(y).mean((2, 3)))


class TinyViT(nn.Module):
    """Patch embedding conv, class token, positional embedding, nn.TransformerEncoder, head."""

    def __init__(self, image: int = 16, patch: int = 4, dim: int = 32, depth: int = 2, heads: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1) + self.pos
        t = self.encoder(t)
        return self.head(self.norm(t[:, 0]))


CNNS = {"resnet_block": BasicBlock, "mobilenetv3_block": MobileNetV3Block, "efficientnet_block": EfficientNetBlock}


def build(name: str, seed: int = 0) -> nn.Module:
    """A model of the zoo with seeded random weights and non-trivial batch-norm statistics."""
    torch.manual_seed(seed)
    model = {**CNNS, "vit": TinyViT}[name]()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model.eval()


def tiny_bert(seed: int = 0) -> Any:
    """A Hugging Face BertModel from a small config (random weights, nothing downloaded)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=64)
    return BertModel(config).eval()


def max_rel_err(got: Any, want: Any) -> float:
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
