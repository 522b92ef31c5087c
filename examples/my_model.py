"""A user's own model for ``python -m lowbw train --set model=examples/my_model.py:build``.

``build()`` returns a ``torch.nn.Module`` whose output is class logits. This file is Python: lowbw runs it.
"""

from torch import nn


def build() -> nn.Module:
    """A 2-layer MLP for the 16-feature, 4-class data of ``examples/my_data.py``."""
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))


def example_input(batch: int):
    """A batch of inputs (only ``advise --measure`` needs it: it times forward + backward on it)."""
    import torch

    return torch.randn(batch, 16)
