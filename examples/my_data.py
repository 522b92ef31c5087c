"""A user's own dataset for ``python -m lowbw train --set dataset=examples/my_data.py:build``.

``build()`` returns a :class:`lowbw.train.userfiles.UserDataset`: training and validation inputs, integer
class targets, and the metric that judges a run with its direction (``val_acc`` up, or ``val_loss`` down).
It must return the same data on every call (every worker process calls it). This file is Python: lowbw runs it.
"""

import torch

from lowbw.train.userfiles import UserDataset


def build() -> UserDataset:
    """4 Gaussian classes in 16 dimensions (centres at distance ~2.8, unit noise): 4,096 training and
    1,024 validation samples, drawn from a fixed seed."""
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(4, 16, generator=g) * 0.7
    y = torch.randint(0, 4, (5120,), generator=g)
    x = centres[y] + torch.randn(5120, 16, generator=g)
    return UserDataset(x_train=x[:4096], y_train=y[:4096], x_val=x[4096:], y_val=y[4096:],
                       metric="val_acc", direction="up")
