"""LeNet-5 (LeCun, Bottou, Bengio & Haffner, "Gradient-Based Learning Applied to Document Recognition", Proc. IEEE
1998, section II.B): two 5x5 convolutions with 2x2 subsampling, then three fully connected layers, 61,706
parameters on 28x28 MNIST digits with 10 classes.

Layers (``c`` input channels, ``s`` the image side, ``k`` classes):

1. C1: 6 maps, 5x5, padded by 2 (the paper centres the 28x28 digits in a 32x32 field), tanh;
2. S2: 2x2 average pooling;
3. C3: 16 maps, 5x5, tanh;
4. S4: 2x2 average pooling: 16 x q x q with q = (s / 2 - 4) / 2 (5 for s = 28);
5. C5 / F6 / output: fully connected 16 q^2 -> 120 -> 84 (tanh) -> k.

Deliberate variant, as most modern renderings (e.g. Zhang et al., Dive into Deep Learning, section 7.6): C3 sees
all six S2 maps (the paper's table I connects each to a subset); S2/S4 average without the paper's trainable
coefficient and bias; the squashing function is plain tanh (the paper's: 1.7159 tanh(2a/3)); the output layer is
linear (the paper's: Euclidean RBF units). C5 is the fully connected layer it amounts to on a 5x5 input.
"""

from __future__ import annotations

from torch import nn

__all__ = ["LeNet5", "lenet5"]


class LeNet5(nn.Module):
    """LeNet-5 for ``in_channels`` x ``image_size`` x ``image_size`` images (the module docstring's layers)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 28):
        super().__init__()
        q = (image_size // 2 - 4) // 2  # side of S4's maps
        if q < 1:
            raise ValueError(f"LeNet-5 needs images of at least 12x12 pixels, got image_size={image_size}")
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, 5, padding=2), nn.Tanh(), nn.AvgPool2d(2),  # C1, S2
            nn.Conv2d(6, 16, 5), nn.Tanh(), nn.AvgPool2d(2),  # C3, S4
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * q * q, 120), nn.Tanh(),  # C5
            nn.Linear(120, 84), nn.Tanh(),  # F6
            nn.Linear(84, num_classes),  # output
        )

    def forward(self, x):
        return self.classifier(self.features(x))


def lenet5(num_classes: int, in_channels: int, image_size: int) -> nn.Module:
    """The workload spec's builder: ``(num_classes, in_channels, image_size) -> LeNet5``."""
    return LeNet5(num_classes, in_channels, image_size)
