"""Models: CIFAR-scale networks for CPU runs and ImageNet-scale networks for GPU runs.

All definitions are our own (no torchvision needed); parameter counts match the references:

========================  ==========================================  =====================
name                      reference                                   parameters (classes)
========================  ==========================================  =====================
``resnet20/32/56``        He et al. 2016, CIFAR variant, option A      269,722 / 464,154 /
                          (identity shortcuts with zero padding)       853,018 (10)
``vgg16``                 Simonyan & Zisserman 2015, CIFAR variant     14,728,266 (10)
                          with BatchNorm, one linear classifier
``cnn``                   3 conv + 2 fc, sized for 2-core CPUs         356,810 (10, 32x32x3)
``mlp``                   784-512-256-10 style perceptron              535,818 (10, 28x28x1)
``lenet5``                LeCun et al. 1998 (``lowbw.train.lenet``)    61,706 (10, 28x28x1)
``resnet50``              torchvision ``resnet50``                     25,557,032 (1000)
``vgg16_imagenet``        torchvision ``vgg16`` (no BN)                138,357,544 (1000)
``inception_v4``          Szegedy et al. 2017 (timm ``inception_v4``)  42,679,816 (1000)
``gpt-tiny``              character-level GPT for tests, 2 x 32 wide   27,840 (65, context 32)
``gpt-mini``              2 layers, 4 heads, 64 wide, for the default  106,880 (65, context 64)
                          profile's grid of many short CPU runs
``gpt-mid``               3 layers, 4 heads, 96 wide, between mini     344,832 (65, context 64)
                          and small on the scaling ladder (issue 44)
``gpt-small``             nanoGPT's CPU Shakespeare configuration:     804,096 (65, context 64)
                          4 layers, 4 heads, 128 wide
``gpt-medium``            nanoGPT's GPU Shakespeare configuration:     10,745,088 (65, context 256)
                          6 layers, 6 heads, 384 wide
========================  ==========================================  =====================

A ``gpt-*`` model is a classifier over its vocabulary at every position: ``num_classes`` is the vocabulary
size and ``image_size`` its context length (``block_size``); its input is ``int64 [B, T]`` character ids and
its output ``[B, T, vocab]`` logits. :func:`model_kind` tells image and text models apart.

``torchvision:<name>`` builds a torchvision model instead when torchvision is importable.

Every model can be built on the meta device (``param_count``/``grad_bytes``), which allocates nothing.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from lowbw.train.workload_specs import GPT_SIZES, WORKLOADS, GPTSize

__all__ = ["MODELS", "build_model", "param_count", "grad_bytes", "model_names", "IMAGENET_MODELS", "GPT",
           "GPTSize", "GPT_SIZES", "model_kind"]


# ----------------------------------------------------------------------------------------------- ResNet (CIFAR)
class _ShortcutA(nn.Module):
    """Option A shortcut: subsample by 2 and zero-pad the new channels (no parameters)."""

    def __init__(self, pad: int):
        super().__init__()
        self.pad = pad

    def forward(self, x):
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad))


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = _ShortcutA((cout - cin) // 2) if (stride != 1 or cin != cout) else nn.Identity()

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for 32x32 images (He et al. 2016, section 4.2)."""

    def __init__(self, depth: int, num_classes: int = 10, in_channels: int = 3):
        super().__init__()
        if (depth - 2) % 6:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers: list[nn.Module] = []
        cin = 16
        for i, cout in enumerate((16, 32, 64)):
            for j in range(n):
                layers.append(_BasicBlock(cin, cout, 2 if (i > 0 and j == 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


# ----------------------------------------------------------------------------------------------- VGG
_VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def _vgg_features(cfg, in_channels: int, bn: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    c = in_channels
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers.append(nn.Conv2d(c, v, 3, padding=1))
            if bn:
                layers.append(nn.BatchNorm2d(v))
            layers.append(nn.ReLU(inplace=True))
            c = v
    return nn.Sequential(*layers)


class CifarVGG(nn.Module):
    """VGG-16 with BatchNorm for 32x32 images; a single linear classifier on the 512-d feature."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3):
        super().__init__()
        self.features = _vgg_features(_VGG16, in_channels, bn=True)
        self.classifier = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


class ImageNetVGG(nn.Module):
    """torchvision's ``vgg16`` (configuration D, no BN): 138,357,544 parameters for 1000 classes."""

    def __init__(self, num_classes: int = 1000, in_channels: int = 3):
        super().__init__()
        self.features = _vgg_features(_VGG16, in_channels, bn=False)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


# ----------------------------------------------------------------------------------------------- small CNN, MLP
class SmallCNN(nn.Module):
    """3x (conv3x3 + ReLU + maxpool) with 32/64/128 channels, then fc 128 and the classifier.

    356,810 parameters on 32x32x3 inputs; a CIFAR-10 epoch takes seconds on 2 CPU cores.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, image_size: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        s = image_size // 8
        self.fc1 = nn.Linear(128 * s * s, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class MLP(nn.Module):
    """Flatten -> 512 -> 256 -> classes with ReLU."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 28):
        super().__init__()
        d = in_channels * image_size * image_size
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(d, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                 nn.Linear(256, num_classes))

    def forward(self, x):
        return self.net(x)


# ----------------------------------------------------------------------------------------------- ResNet-50
class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    """torchvision-equivalent ResNet-50 (v1.5: stride in the 3x3 conv): 25,557,032 parameters for 1000 classes."""

    def __init__(self, num_classes: int = 1000, in_channels: int = 3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages = []
        cin = 64
        for i, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
            layer = []
            for j in range(blocks):
                layer.append(_Bottleneck(cin, width, 2 if (i > 0 and j == 0) else 1))
                cin = width * 4
            stages.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(2048, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


# ----------------------------------------------------------------------------------------------- Inception-v4
class _CBR(nn.Module):
    def __init__(self, cin, cout, k, s=1, p=0):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, p, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class _Cat(nn.Module):
    def __init__(self, *branches: nn.Module):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], 1)


def _avg_branch(cin, cout):
    return nn.Sequential(nn.AvgPool2d(3, 1, 1, count_include_pad=False), _CBR(cin, cout, 1))


def _inception_a():
    return _Cat(_CBR(384, 96, 1),
                nn.Sequential(_CBR(384, 64, 1), _CBR(64, 96, 3, 1, 1)),
                nn.Sequential(_CBR(384, 64, 1), _CBR(64, 96, 3, 1, 1), _CBR(96, 96, 3, 1, 1)),
                _avg_branch(384, 96))


def _reduction_a():
    return _Cat(_CBR(384, 384, 3, 2),
                nn.Sequential(_CBR(384, 192, 1), _CBR(192, 224, 3, 1, 1), _CBR(224, 256, 3, 2)),
                nn.MaxPool2d(3, 2))


def _inception_b():
    return _Cat(_CBR(1024, 384, 1),
                nn.Sequential(_CBR(1024, 192, 1), _CBR(192, 224, (1, 7), 1, (0, 3)), _CBR(224, 256, (7, 1), 1, (3, 0))),
                nn.Sequential(_CBR(1024, 192, 1), _CBR(192, 192, (7, 1), 1, (3, 0)), _CBR(192, 224, (1, 7), 1, (0, 3)),
                              _CBR(224, 224, (7, 1), 1, (3, 0)), _CBR(224, 256, (1, 7), 1, (0, 3))),
                _avg_branch(1024, 128))


def _reduction_b():
    return _Cat(nn.Sequential(_CBR(1024, 192, 1), _CBR(192, 192, 3, 2)),
                nn.Sequential(_CBR(1024, 256, 1), _CBR(256, 256, (1, 7), 1, (0, 3)), _CBR(256, 320, (7, 1), 1, (3, 0)),
                              _CBR(320, 320, 3, 2)),
                nn.MaxPool2d(3, 2))


class _InceptionC(nn.Module):
    def __init__(self):
        super().__init__()
        self.b0 = _CBR(1536, 256, 1)
        self.b1_0 = _CBR(1536, 384, 1)
        self.b1_1a = _CBR(384, 256, (1, 3), 1, (0, 1))
        self.b1_1b = _CBR(384, 256, (3, 1), 1, (1, 0))
        self.b2_0 = _CBR(1536, 384, 1)
        self.b2_1 = _CBR(384, 448, (3, 1), 1, (1, 0))
        self.b2_2 = _CBR(448, 512, (1, 3), 1, (0, 1))
        self.b2_3a = _CBR(512, 256, (1, 3), 1, (0, 1))
        self.b2_3b = _CBR(512, 256, (3, 1), 1, (1, 0))
        self.b3 = _avg_branch(1536, 256)

    def forward(self, x):
        b1 = self.b1_0(x)
        b2 = self.b2_2(self.b2_1(self.b2_0(x)))
        return torch.cat([self.b0(x), self.b1_1a(b1), self.b1_1b(b1), self.b2_3a(b2), self.b2_3b(b2), self.b3(x)], 1)


class InceptionV4(nn.Module):
    """Inception-v4 (Szegedy et al. 2017), layer for layer as timm's ``inception_v4``: 42,679,816 params (1000)."""

    def __init__(self, num_classes: int = 1000, in_channels: int = 3):
        super().__init__()
        self.features = nn.Sequential(
            _CBR(in_channels, 32, 3, 2), _CBR(32, 32, 3), _CBR(32, 64, 3, 1, 1),
            _Cat(nn.MaxPool2d(3, 2), _CBR(64, 96, 3, 2)),  # mixed 3a -> 160
            _Cat(nn.Sequential(_CBR(160, 64, 1), _CBR(64, 96, 3)),  # mixed 4a -> 192
                 nn.Sequential(_CBR(160, 64, 1), _CBR(64, 64, (1, 7), 1, (0, 3)), _CBR(64, 64, (7, 1), 1, (3, 0)),
                               _CBR(64, 96, 3))),
            _Cat(_CBR(192, 192, 3, 2), nn.MaxPool2d(3, 2)),  # mixed 5a -> 384
            *[_inception_a() for _ in range(4)], _reduction_a(),
            *[_inception_b() for _ in range(7)], _reduction_b(),
            *[_InceptionC() for _ in range(3)],
        )
        self.fc = nn.Linear(1536, num_classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


# ----------------------------------------------------------------------------------------------- GPT (text)
# GPTSize and GPT_SIZES (the sizes by name) live with the workload specs: lowbw.train.workload_specs


class _CausalSelfAttention(nn.Module):
    def __init__(self, s: GPTSize):
        super().__init__()
        self.n_head, self.dropout = s.n_head, s.dropout
        self.c_attn = nn.Linear(s.n_embd, 3 * s.n_embd, bias=False)  # q, k, v of every head in one product
        self.c_proj = nn.Linear(s.n_embd, s.n_embd, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # [B, h, T, d]
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class _Block(nn.Module):
    """Pre-LayerNorm block: x + attn(ln(x)), then x + mlp(ln(x)) with a 4x GELU MLP."""

    def __init__(self, s: GPTSize):
        super().__init__()
        self.ln_1 = nn.LayerNorm(s.n_embd, bias=False)
        self.attn = _CausalSelfAttention(s)
        self.ln_2 = nn.LayerNorm(s.n_embd, bias=False)
        self.mlp = nn.Sequential(nn.Linear(s.n_embd, 4 * s.n_embd, bias=False), nn.GELU(),
                                 nn.Linear(4 * s.n_embd, s.n_embd, bias=False))
        self.drop = nn.Dropout(s.dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    """Character-level decoder-only transformer: token + learned position embeddings, pre-LN blocks with
    causal self-attention (:func:`torch.nn.functional.scaled_dot_product_attention`), a final LayerNorm, and
    logits through the token embedding's own weight (tied input/output embedding, Press & Wolf 2017).

    Initialisation as GPT-2/nanoGPT: every weight N(0, 0.02), the residual projections N(0, 0.02/sqrt(2L)).
    The tied weight is one parameter used twice in ``forward`` (not two aliased parameters), so a flat
    parameter row holds it once."""

    def __init__(self, s: GPTSize, vocab_size: int, block_size: int | None = None):
        super().__init__()
        if s.n_embd % s.n_head:
            raise ValueError(f"n_embd={s.n_embd} is not a multiple of n_head={s.n_head}")
        self.block_size = block_size or s.block_size
        self.wte = nn.Embedding(vocab_size, s.n_embd)
        self.wpe = nn.Embedding(self.block_size, s.n_embd)
        self.drop = nn.Dropout(s.dropout)
        self.blocks = nn.ModuleList(_Block(s) for _ in range(s.n_layer))
        self.ln_f = nn.LayerNorm(s.n_embd, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * s.n_layer) if name.endswith(("c_proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx):
        T = idx.shape[-1]
        if self.block_size < T:
            raise ValueError(f"sequence of {T} characters is longer than block_size={self.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for b in self.blocks:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # [B, T, vocab]


def model_kind(name: str) -> str:
    """``"text"`` for the character-level language models, ``"image"`` for every other model (its workload
    spec's kind; a model without one, a torchvision or user model, is an image model)."""
    spec = WORKLOADS.get(name)
    return spec.kind if spec is not None else "image"


# ----------------------------------------------------------------------------------------------- registry
Builder = Callable[[int, int, int], nn.Module]  # (num_classes, in_channels, image_size) -> module

_OWN: dict[str, Builder] = {
    "resnet20": lambda k, c, s: CifarResNet(20, k, c),
    "resnet32": lambda k, c, s: CifarResNet(32, k, c),
    "resnet56": lambda k, c, s: CifarResNet(56, k, c),
    "vgg16": lambda k, c, s: CifarVGG(k, c),
    "cnn": lambda k, c, s: SmallCNN(k, c, s),
    "mlp": lambda k, c, s: MLP(k, c, s),
    "resnet50": lambda k, c, s: ResNet50(k, c),
    "vgg16_imagenet": lambda k, c, s: ImageNetVGG(k, c),
    "inception_v4": lambda k, c, s: InceptionV4(k, c),
    # text: k = vocabulary size, s = context length (0: the size's own)
    # and the run's dropout rate (the workload spec's ``dropout``)
    **{n: (lambda k, c, s, dropout=0.0, _z=z: GPT(replace(_z, dropout=dropout), k, s or None))
       for n, z in GPT_SIZES.items()},
}


def _imported(path: str) -> Builder:
    """The builder ``"module:function"`` names, imported when a model is built (a workload spec's ``builds``)."""
    module, _, name = path.partition(":")
    return lambda k, c, s: getattr(importlib.import_module(module), name)(k, c, s)


# every model, in the workload specs' order: the builders above and those of the specs that name their own module
MODELS: dict[str, Builder] = {n: _OWN[n] if not w.builds else _imported(w.builds) for n, w in WORKLOADS.items()}
# the ImageNet-scale models: those whose workload spec classifies ImageNet's 1000 classes
IMAGENET_MODELS = tuple(n for n, w in WORKLOADS.items() if w.num_classes == 1000)


def model_names() -> list[str]:
    return list(MODELS)


def build_model(name: str, num_classes: int = 10, in_channels: int = 3, image_size: int = 32,
                device: str | torch.device | None = None, dropout: float = 0.0) -> nn.Module:
    """Build model ``name``; on ``device="meta"`` nothing is allocated (for counting). ``dropout``: its rate,
    for a model whose workload spec has dropout (a ValueError naming the rate for any other)."""
    if dropout and not (name in WORKLOADS and WORKLOADS[name].dropout):
        raise ValueError(f"dropout={dropout}: model={name!r} has no dropout (models with dropout: "
                         f"{', '.join(n for n, w in WORKLOADS.items() if w.dropout)})")
    if name.startswith("torchvision:"):
        try:
            import torchvision  # noqa: F401  (optional dependency)
            from torchvision import models as tvm
        except ImportError as e:
            raise ValueError(f"model={name!r} needs torchvision, which is not importable here") from e
        with torch.device(device or "cpu"):
            return tvm.get_model(name.split(":", 1)[1], num_classes=num_classes)
    if name not in MODELS:
        raise ValueError(f"model={name!r} is unknown; allowed: {', '.join(MODELS)}")
    with torch.device(device or "cpu"):
        if dropout:
            return MODELS[name](num_classes, in_channels, image_size, dropout=dropout)
        return MODELS[name](num_classes, in_channels, image_size)


def param_count(name: str, num_classes: int = 10, in_channels: int = 3, image_size: int = 32) -> int:
    """Number of trainable parameters, counted on the meta device (no memory)."""
    m = build_model(name, num_classes, in_channels, image_size, device="meta")
    return sum(p.numel() for p in m.parameters() if p.requires_grad)


def grad_bytes(name: str, num_classes: int = 10, in_channels: int = 3, image_size: int = 32,
               dtype: torch.dtype = torch.float32) -> int:
    """Bytes of one full gradient (what a dense all-reduce moves per worker)."""
    return param_count(name, num_classes, in_channels, image_size) * torch.empty((), dtype=dtype).element_size()
