"""What each of lowbw's models is as a workload, torch-free: the data it trains on, the input one sample has,
the metric it is judged by and that metric's direction, and its name in the paper.

``WORKLOADS`` maps a model name (a key of :data:`lowbw.train.models.MODELS`, which builds it) to its
:class:`WorkloadSpec`; the engine's model table, the advisor (input shapes, the dataset ``--validate`` trains
on), the report (pretty names, a workload's words in captions) read it, so that no other code names a model.
The character-level GPTs' shapes (:data:`GPT_SIZES`) live here too: one line adds a size to both tables.
A dataset's words are its spec's (``lowbw.data.specs.SPECS`` and ``lowbw.data.text.TEXT_SPECS``,
``pretty``). Importing this module imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.data.specs import SPECS
from lowbw.data.text import TEXT_SPECS
from lowbw.train.targets import METRICS

__all__ = ["GPTSize", "GPT_SIZES", "WorkloadSpec", "WORKLOADS", "workload_of", "pretty_model", "pretty_dataset",
           "workload_words"]


@dataclass(frozen=True)
class GPTSize:
    """A decoder-only transformer's shape (Radford et al. 2019, as nanoGPT writes it)."""

    n_layer: int  # transformer blocks
    n_head: int  # attention heads per block; n_embd % n_head == 0
    n_embd: int  # width of the residual stream
    block_size: int  # default context length T (characters)
    dropout: float = 0.0  # dropout rate; a run sets it with its ``dropout`` key (nanoGPT's CPU recipe: 0)


# sizes named by what they are for; nanoGPT's README (karpathy/nanoGPT @ 3adf61e) for small and medium
GPT_SIZES: dict[str, GPTSize] = {
    "gpt-tiny": GPTSize(2, 2, 32, 32),  # unit tests: a step in milliseconds
    "gpt-mini": GPTSize(2, 4, 64, 64),  # the default profile's many-run grid on a 2-core CPU
    "gpt-mid": GPTSize(3, 4, 96, 64),  # the size ladder's in-between rung (Charles et al.'s scaling at micro scale)
    "gpt-small": GPTSize(4, 4, 128, 64),  # nanoGPT's laptop-CPU configuration (1.88 val loss at 2k iters)
    "gpt-medium": GPTSize(6, 6, 384, 256),  # nanoGPT's GPU configuration (1.47 val loss at 5k iters)
}


@dataclass(frozen=True)
class WorkloadSpec:
    """One model as a workload: what it is trained on and judged by, and what it is called."""

    model: str  # the model's name in configs (lowbw.train.models.MODELS)
    pretty: str  # its name in the paper's tables and captions
    kind: str  # "image" (a class per sample) | "text" (a character-level language model)
    dataset: str  # the dataset lowbw trains it on where none is given (advise --validate); ImageNet-scale
    # models on CIFAR-10: lowbw holds no ImageNet
    in_channels: int  # channels of one input image (text: 0)
    image_size: int  # side of one input image in pixels (text: 0, the context is the model's block_size)
    num_classes: int  # output classes it is built with (text: 0, the corpus's vocabulary)
    metric: str  # the evaluation that judges it (a key of lowbw.train.targets.METRICS)
    # "module:function" building it as (num_classes, in_channels, image_size) -> nn.Module, for a model in a
    # module of its own ("": lowbw.train.models' own builders); imported when a run builds the model
    builds: str = ""
    # its builder takes the run's dropout rate (the ``dropout`` key; lowbw.train.masks draws the masks); a model
    # without dropout refuses a non-zero rate
    dropout: bool = False

    @property
    def higher_is_better(self) -> bool:
        """The metric's direction: accuracies up, losses down."""
        return METRICS[self.metric] == ">="


def _image(model: str, pretty: str, dataset: str, c: int, s: int, k: int, builds: str = "") -> WorkloadSpec:
    return WorkloadSpec(model, pretty, "image", dataset, c, s, k, "test_acc", builds)


# one line per model (MODELS builds each: its own builders, or the module a spec's ``builds`` names); the GPT
# sizes' lines come from GPT_SIZES
WORKLOADS: dict[str, WorkloadSpec] = {w.model: w for w in (
    _image("resnet20", "ResNet-20", "cifar10", 3, 32, 10),
    _image("resnet32", "ResNet-32", "cifar10", 3, 32, 10),
    _image("resnet56", "ResNet-56", "cifar10", 3, 32, 10),
    _image("vgg16", "VGG-16 (CIFAR)", "cifar10", 3, 32, 10),
    _image("cnn", "Small CNN", "cifar10", 3, 32, 10),
    _image("mlp", "MLP", "mnist", 1, 28, 10),
    _image("lenet5", "LeNet-5", "mnist", 1, 28, 10, builds="lowbw.train.lenet:lenet5"),
    _image("resnet50", "ResNet-50", "cifar10", 3, 224, 1000),
    _image("vgg16_imagenet", "VGG-16 (ImageNet)", "cifar10", 3, 224, 1000),
    _image("inception_v4", "Inception-v4", "cifar10", 3, 224, 1000),
    *(WorkloadSpec(n, n, "text", "shakespeare", 0, 0, 0, "val_loss", dropout=True) for n in GPT_SIZES),
)}
# a torchvision model (``torchvision:<name>``) is built as a CIFAR-10 classifier, as lowbw's own CIFAR models
_TORCHVISION = _image("torchvision", "torchvision", "cifar10", 3, 32, 10)


def workload_of(model: str) -> WorkloadSpec:
    """``model``'s spec (a ``torchvision:<name>`` model: a CIFAR-10 classifier); a ValueError naming it and the
    known models if it has none."""
    if model in WORKLOADS:
        return WORKLOADS[model]
    if model.startswith("torchvision:"):
        return _TORCHVISION
    raise ValueError(f"model={model!r} is unknown; allowed: {', '.join(WORKLOADS)}")


def pretty_model(model: str) -> str:
    """A model's name in the paper (its own name where it has no spec)."""
    spec = WORKLOADS.get(model)
    return spec.pretty if spec is not None else model


def pretty_dataset(dataset: str) -> str:
    """A dataset's name in the paper (its spec's ``pretty``; its own name where it has no spec)."""
    spec = SPECS.get(dataset) or TEXT_SPECS.get(dataset)
    return spec.pretty if spec is not None and spec.pretty else dataset


def workload_words(model: str, dataset: str) -> str:
    """A run's workload in captions, e.g. ``MLP on MNIST``, ``gpt-mini on Tiny Shakespeare``."""
    return f"{pretty_model(model)} on {pretty_dataset(dataset)}"
