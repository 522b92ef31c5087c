"""Per-model compute cost on this machine, for the theoretical minimum training time (E3).

For each model: parameters and gradient bytes (meta device, no memory), and the measured time of one
forward+backward+SGD step at a given per-worker batch (median of ``reps`` after one warm-up step),
with the machine recorded. ``python -m lowbw.bench.models [--models ...] [--out runs/bench/models.json]``.

The reference schedules are those of the models' papers, so the minimum training time is stated for
the training the sources actually did:
ResNet-20 / VGG-16 on CIFAR-10: 64k iterations at batch 128 (He et al. 2016; the thesis' baseline);
ResNet-50 / Inception-v4 / VGG-16 on ImageNet: 90 epochs of 1,281,167 images at batch 256 (Goyal et al. 2017).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import pandas as pd
import torch

from lowbw.measure import conditions
from lowbw.measure.conditions import add_strict_flag
from lowbw.runs.io import atomic_write_json, provenance
from lowbw.train.models import build_model, grad_bytes, param_count

__all__ = ["SCHEDULES", "measure_model", "run_benchmark", "main"]

IMAGENET_TRAIN = 1_281_167

# model -> (dataset, input (C, H, W), classes, global batch, total steps of the reference schedule)
SCHEDULES: dict[str, tuple[str, tuple[int, int, int], int, int, int]] = {
    "mlp": ("mnist", (1, 28, 28), 10, 128, 64_000),
    "cnn": ("cifar10", (3, 32, 32), 10, 128, 64_000),
    "resnet20": ("cifar10", (3, 32, 32), 10, 128, 64_000),
    "vgg16": ("cifar10", (3, 32, 32), 10, 128, 64_000),
    "resnet50": ("imagenet", (3, 224, 224), 1000, 256, 90 * IMAGENET_TRAIN // 256),
    "inception_v4": ("imagenet", (3, 299, 299), 1000, 256, 90 * IMAGENET_TRAIN // 256),
    "vgg16_imagenet": ("imagenet", (3, 224, 224), 1000, 256, 90 * IMAGENET_TRAIN // 256),
}


def measure_model(name: str, batch: int, reps: int = 3, device: str = "cpu") -> dict[str, Any]:
    """Time one SGD step (forward, backward, update) of ``name`` at ``batch`` samples; seconds per step."""
    dataset, (c, h, w), classes, gbatch, steps = SCHEDULES[name]
    torch.manual_seed(0)
    model = build_model(name, num_classes=classes, in_channels=c, image_size=h, device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, c, h, w, device=device)
    y = torch.randint(0, classes, (batch,), device=device)
    times = []
    for i in range(reps + 1):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if i:  # the first step warms up allocators and kernels
            times.append(time.perf_counter() - t)
    step = statistics.median(times)
    return {
        "model": name, "dataset": dataset, "params": param_count(name, classes, c, h),
        "grad_bytes": grad_bytes(name, classes, c, h), "batch": batch, "step_s": step,
        "sample_s": step / batch, "reps": reps, "ref_global_batch": gbatch, "ref_steps": steps,
        "device": device,
    }


def run_benchmark(models: list[str] | None = None, batch: int = 16, imagenet_batch: int = 4, reps: int = 3,
                  device: str = "cpu", out: str | None = "runs/bench/models.json", strict: bool = False):
    """Measure every model; returns a DataFrame and writes JSON (with provenance and the machine's conditions,
    per model too) to ``out`` (with ``strict``: not when the machine was busy; ``df.attrs["conditions"]``)."""
    rows = []
    with conditions.record() as whole:
        for name in models or list(SCHEDULES):
            b = imagenet_batch if SCHEDULES[name][0] == "imagenet" else batch
            with conditions.record(interval_s=0) as cell:  # this model's own conditions: its row's mark
                row = measure_model(name, b, reps, device)
            rows.append({**row, "conditions": cell.conditions.to_json(samples=False)})
    df = pd.DataFrame(rows)
    df.attrs["conditions"] = whole.conditions
    if out and conditions.check(whole.conditions, "lowbw bench models", out, strict):
        atomic_write_json(out, {"provenance": provenance(), "conditions": whole.conditions.to_json(),
                                "rows": rows})
    return df


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="*", default=None, choices=list(SCHEDULES))
    p.add_argument("--batch", type=int, default=16, help="per-step batch for CIFAR/MNIST models")
    p.add_argument("--imagenet-batch", type=int, default=4, help="per-step batch for ImageNet models")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default="runs/bench/models.json")

    add_strict_flag(p)
    a = p.parse_args(argv)
    df = run_benchmark(a.models, a.batch, a.imagenet_batch, a.reps, a.device, a.out, a.strict)
    if a.strict and df.attrs["conditions"].busy:
        return 1
    print(df[["model", "params", "grad_bytes", "batch", "step_s", "sample_s"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
