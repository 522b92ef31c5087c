"""What many test files share: a short training run on synthetic data, the metrics lines without their measured
times, the seeded tiny model, batches and loops the outer-step tests of lowbw.comm train with, a poll with a
deadline, a command line's refusal (and the table of refused command lines a test runs over), and the keys
module each sync scheme's registry line names."""

from __future__ import annotations

import ast
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from lowbw.train.config import RunConfig

# the real dataset mirror (CI sets LOWBW_DATA_MIRROR; locally ../shared/data beside the checkout), and the mark of
# the tests that read Tiny Shakespeare from it
MIRROR = Path(os.environ.get("LOWBW_DATA_MIRROR") or Path(__file__).resolve().parents[2] / "shared" / "data")
needs_corpus = pytest.mark.skipif(not (MIRROR / "tinyshakespeare.txt").is_file(),
                                  reason=f"no tinyshakespeare.txt in the data mirror {MIRROR}")

# a short sim run on synthetic data with a deterministic virtual clock: a test's BASE is this with its own keys
SIM_RUN: dict[str, Any] = dict(dataset="synthetic", model="mlp", workers=2, batch_size=32, steps=6, log_every=1,
                               progress=False, train_limit=400, test_limit=100, eval_every=0.5, clock="model",
                               clock_sample_s=1e-3)
# the fields of a metrics line that are measured, not computed (they differ between two runs of one config)
WALL = ("t_compute", "t_compress", "t_comm", "t_step", "t_meta", "t_wall")


def sim_run(*, drop: tuple[str, ...] = (), **kw: Any) -> dict[str, Any]:
    """:data:`SIM_RUN` with ``kw`` over it and the keys in ``drop`` left out (their RunConfig defaults hold)."""
    return {k: v for k, v in {**SIM_RUN, **kw}.items() if k not in drop}


def config_of(base: dict[str, Any]) -> Callable[..., RunConfig]:
    """``cfg(**kw)``: the RunConfig of ``base`` with ``kw`` over it."""

    def cfg(**kw: Any) -> RunConfig:
        return RunConfig.from_dict({**base, **kw})

    return cfg


def strip(lines: list[dict]) -> list[dict]:
    """Metrics lines without their measured times (:data:`WALL`): what two runs of one config share exactly."""
    return [{k: v for k, v in ln.items() if k not in WALL} for ln in lines]


def tiny_mlp(seed: int, widths: tuple[int, ...] = (6, 5, 2)) -> torch.nn.Module:
    """Linear layers of ``widths`` with Tanh between them, whose parameters come from a generator of their own
    (N(0, 0.3^2); workers build theirs concurrently in threads, so the global RNG would interleave)."""
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers += [torch.nn.Linear(a, b)] + ([torch.nn.Tanh()] if i < len(widths) - 2 else [])
    m = torch.nn.Sequential(*layers)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return m


def regression_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Worker ``rank``'s batch at ``step`` for :func:`tiny_mlp` of 6 inputs and 2 outputs: 8 Gaussian samples."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)


def worker_steps(model: torch.nn.Module, outer: Any, rank: int, steps: int,
                 after: Callable[[], None] | None = None) -> list[float]:
    """Worker ``rank``'s loop as a user writes it with an outer optimiser wrapped around the inner one
    (``outer.step()`` steps both): ``steps`` steps of MSE on :func:`regression_batch`; ``after`` is called
    after each. Returns the losses."""
    losses = []
    for t in range(steps):
        x, y = regression_batch(rank, t)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        losses.append(loss.item())
        outer.step()
        if after is not None:
            after()
    return losses


def replica_steps(models: list[torch.nn.Module], opts: list[torch.optim.Optimizer], step: int) -> None:
    """One inner step of every replica of a hand-written reference at ``step`` (replica r on its rank's batch)."""
    for r, (m, o) in enumerate(zip(models, opts)):
        x, y = regression_batch(r, step)
        torch.nn.functional.mse_loss(m(x), y).backward()
        o.step()
        o.zero_grad()


def wait_for(pred: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Whether ``pred()`` became true within ``timeout`` seconds (polled every 0.1 s)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def usage_error(main: Callable[[list[str]], Any], argv: list[str], capsys) -> str:
    """The last line ``main(argv)`` wrote to stderr on refusing ``argv`` with argparse's exit status 2."""
    with pytest.raises(SystemExit) as ei:
        main(argv)
    assert ei.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def refused(table: dict[str, str]):
    """Parametrize a test over ``(argv, culprit)``: each key of ``table`` a command line's flags (split as a shell
    splits them), its value the words the one-line error must hold (the bad value, named)."""
    return pytest.mark.parametrize("argv, culprit", [(shlex.split(k), v) for k, v in table.items()], ids=list(table))


SCHEME_REGISTRY = Path(__file__).resolve().parents[1] / "lowbw" / "train" / "schemes" / "registry.py"


def scheme_keys_modules() -> dict[str, str]:
    """Sync scheme name -> the keys module its registry line names
    (``"<name>": importlib.import_module("lowbw.train.schemes.keys.<m>").SPEC`` -> ``<m>``), read from the source."""
    out = {}
    for node in ast.walk(ast.parse(SCHEME_REGISTRY.read_text())):
        if not isinstance(node, ast.Dict):
            continue
        for k, v in zip(node.keys, node.values, strict=True):
            call = v.value if isinstance(v, ast.Attribute) else None
            if isinstance(k, ast.Constant) and isinstance(call, ast.Call) and call.args \
                    and isinstance(call.args[0], ast.Constant):
                out[k.value] = call.args[0].value.rpartition(".")[2]
    return out
