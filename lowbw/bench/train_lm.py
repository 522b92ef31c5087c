"""The language model's training step against nanoGPT's own: ``python -m lowbw bench train_lm``.

Times one forward + backward + AdamW step of a character-level GPT (``gpt-small`` on CPU: 4 layers, 4 heads,
128 wide, context 64, batch 12; ``--device cuda``: ``gpt-medium``, 6/6/384, context 256, batch 64) in five
variants, interleaved (:func:`lowbw.bench.train.interleaved`: blocks of ``steps`` steps of every variant in
turn, ``reps`` times) so that background load hits them alike; medians of the blocks:

* ``nanogpt``: nanoGPT's ``model.py`` (Karpathy, MIT; imported from its path at run time, never copied into
  lowbw) at the same shape (bias False, dropout 0, vocabulary 65) + ``torch.optim.AdamW(fused=False,
  betas=(0.9, 0.99))`` with weight decay 0.1 on the 2-D parameters only, nanoGPT's ``configure_optimizers``
  groups. The reference.
* ``module``: lowbw's :class:`~lowbw.train.models.GPT` as a plain module + the same torch AdamW.
* ``trainer_m1``: lowbw's :class:`~lowbw.train.loop.Trainer` with one worker: its flat-row engine
  (:class:`~lowbw.train.replicas.Replicas` + :class:`~lowbw.train.optim.FlatOptimizer`, ``weight_decay_on:
  matrices``), the workload's batch draw and the one-worker exchange included.
* ``sim_m<M>``: the ``sim`` backend with M workers in one process at the same batch each (dense sync).

The two reference variants draw their batch each step as nanoGPT's ``get_batch`` does (random windows of the
training split), the Trainer through :meth:`~lowbw.train.workload.TextWorkload.train_batch`; all read the
Tiny Shakespeare corpus (``LOWBW_DATA_MIRROR``). Targets (reported with the ratio and whether met):
``trainer_m1`` and ``module`` within 1.15x of ``nanogpt``; ``sim_m<M>`` within 1.1x of M ``trainer_m1``
steps. A ratio is the median over the rounds of the ratio of the two blocks timed in that round (neighbours in
time, under the same background load); the ratios of the medians and of the fastest blocks are recorded too.
CPU timings run on ``--threads`` torch threads (default 1). The result goes to ``runs/bench/train_gpt.json``
(``train_gpt_cuda.json`` with ``--device cuda``) with the machine's conditions (:mod:`lowbw.measure.conditions`;
``--strict`` refuses to write on a busy machine).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import statistics
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from lowbw.bench.train import interleaved
from lowbw.measure import conditions
from lowbw.runs.io import atomic_write_json, provenance
from lowbw.train.config import RunConfig
from lowbw.train.loop import Trainer
from lowbw.train.models import GPT_SIZES, build_model
from lowbw.train.workload import load_workload
from lowbw.train.world import SimWorld

__all__ = ["SETUPS", "TARGET_VS_NANOGPT", "TARGET_SIM", "NanoGPTMissing", "default_nanogpt_path", "load_nanogpt",
           "measure", "main"]

REPO = Path(__file__).resolve().parents[2]
SETUPS: dict[str, tuple[str, int]] = {"cpu": ("gpt-small", 12), "cuda": ("gpt-medium", 64)}  # device -> (model, batch)
TARGET_VS_NANOGPT = 1.15  # our step / nanoGPT's step, at most
TARGET_SIM = 1.1  # sim with M workers / (M x one worker's step), at most
VOCAB = 65  # Tiny Shakespeare's characters
WEIGHT_DECAY = 0.1  # nanoGPT's default, on 2-D parameters only
BETAS = (0.9, 0.99)  # nanoGPT's Shakespeare recipe


class NanoGPTMissing(FileNotFoundError):
    """nanoGPT's model.py is not where the benchmark was told to import it from."""


def default_nanogpt_path() -> Path:
    """``../shared/peers/nanogpt/model.py`` beside the checkout (where CI keeps the peer's exact copy)."""
    return REPO.parent / "shared" / "peers" / "nanogpt" / "model.py"


def load_nanogpt(path: str | Path) -> ModuleType:
    """nanoGPT's ``model.py`` imported from ``path`` (it must define ``GPT`` and ``GPTConfig``)."""
    p = Path(path)
    if not p.is_file():
        raise NanoGPTMissing(f"nanoGPT's model.py is absent: no file at {p} (the reference for this benchmark; "
                             "pass --nanogpt PATH to a copy of karpathy/nanoGPT's model.py)")
    spec = importlib.util.spec_from_file_location("lowbw_peer_nanogpt_model", p)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    if not (hasattr(mod, "GPT") and hasattr(mod, "GPTConfig")):
        raise NanoGPTMissing(f"{p} defines no GPT and GPTConfig: not nanoGPT's model.py")
    return mod


def _adamw(module, lr: float):
    """nanoGPT's ``configure_optimizers``: decay on parameters of >= 2 dimensions, torch's AdamW, not fused."""
    ps = [p for p in module.parameters() if p.requires_grad]
    groups = [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=BETAS, fused=False)


def measure(nanogpt: str | Path | None = None, device: str = "cpu", model: str | None = None,
            batch: int | None = None, workers: tuple[int, ...] = (2, 4), steps: int = 5, reps: int = 5,
            threads: int = 1, lr: float = 1e-3, sim_engine: str = "auto") -> dict[str, Any]:
    """Seconds per step of every variant (module docstring) and the ratios against the targets.

    ``model``/``batch``: default :data:`SETUPS` of ``device``; ``workers``: the M of the sim variants;
    ``threads``: torch intra-op threads (0: torch's default; ignored on CUDA)."""
    if device not in SETUPS:
        raise ValueError(f"device={device!r}: choose cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but CUDA is not available here")
    model = model or SETUPS[device][0]
    batch = batch or SETUPS[device][1]
    if model not in GPT_SIZES:
        raise ValueError(f"model={model!r}: choose one of {', '.join(GPT_SIZES)}")
    if batch < 1 or steps < 1 or reps < 1 or any(m < 2 for m in workers):
        raise ValueError(f"batch={batch}, steps={steps}, reps={reps} (>= 1), workers={list(workers)} (>= 2)")
    path = Path(nanogpt) if nanogpt else default_nanogpt_path()
    ng_mod = load_nanogpt(path)
    if threads and device == "cpu":
        torch.set_num_threads(threads)
    dev = torch.device(device)
    size = GPT_SIZES[model]
    T = size.block_size

    def cfg(M: int) -> RunConfig:
        return RunConfig.from_dict({
            "dataset": "shakespeare", "model": model, "workers": M, "batch_size": batch * M, "steps": 10**6,
            "block_size": T, "progress": False, "device": device, "optimizer": "adamw", "lr": lr,
            "lr_schedule": "constant", "adam_beta1": BETAS[0], "adam_beta2": BETAS[1],
            "weight_decay": WEIGHT_DECAY, "weight_decay_on": "matrices", "grad_clip": 0.0, "test_limit": 1,
            "sim_engine": sim_engine})

    work = load_workload(cfg(1), dev)  # the corpus once, shared by every variant
    train = work.train  # uint8 [chars] on the device
    gen = torch.Generator().manual_seed(0)
    offsets = torch.arange(T + 1, device=dev)

    def get_batch():  # nanoGPT's get_batch: b random windows of T + 1 characters
        ix = torch.randint(len(train) - T - 1, (batch,), generator=gen).to(dev)
        w = train[ix[:, None] + offsets].long()
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    torch.manual_seed(0)
    with contextlib.redirect_stdout(io.StringIO()):  # nanoGPT prints its parameter count
        ng = ng_mod.GPT(ng_mod.GPTConfig(block_size=T, vocab_size=VOCAB, n_layer=size.n_layer,
                                         n_head=size.n_head, n_embd=size.n_embd, dropout=0.0, bias=False)).to(dev)
    ng_opt = _adamw(ng, lr)
    torch.manual_seed(0)
    ours = build_model(model, VOCAB, 1, T, device=dev)
    ours_opt = _adamw(ours, lr)

    def nanogpt_step():
        x, y = get_batch()
        _, loss = ng(x, y)
        ng_opt.zero_grad(set_to_none=True)
        loss.backward()
        ng_opt.step()

    def module_step():
        x, y = get_batch()
        loss = F.cross_entropy(ours(x).flatten(0, -2), y.flatten())
        ours_opt.zero_grad(set_to_none=True)
        loss.backward()
        ours_opt.step()

    def trainer(M: int):
        c = cfg(M)
        return Trainer(c, SimWorld(c), None, data=work, device=dev)

    trainers = {"trainer_m1": trainer(1)} | {f"sim_m{M}": trainer(M) for M in workers}
    variants = {"nanogpt": nanogpt_step, "module": module_step} | {k: t.train_step for k, t in trainers.items()}
    for fn in variants.values():  # warm-up (allocator, autograd graph, optimiser state)
        fn()
        fn()
    times = interleaved(variants, reps, steps, dev)
    med = {k: statistics.median(v) for k, v in times.items()}

    def verdict(k: str, ref: str, m: int, target: float) -> dict[str, Any]:
        # the ratio of the blocks timed in the same round (neighbours in time, so under the same background
        # load), median over the rounds; the ratios of the medians and of the fastest blocks beside it
        paired = [a / (m * b) for a, b in zip(times[k], times[ref])]
        r = statistics.median(paired)
        return {"ratio": r, "target": target, "met": r <= target, "paired": paired,
                "ratio_of_medians": med[k] / (m * med[ref]),
                "ratio_of_minima": min(times[k]) / (m * min(times[ref]))}

    targets = {"module_vs_nanogpt": verdict("module", "nanogpt", 1, TARGET_VS_NANOGPT),
               "trainer_m1_vs_nanogpt": verdict("trainer_m1", "nanogpt", 1, TARGET_VS_NANOGPT)}
    for M in workers:
        targets[f"sim_m{M}_vs_{M}x_trainer_m1"] = verdict(f"sim_m{M}", "trainer_m1", M, TARGET_SIM)
    return {
        "model": model, "n_layer": size.n_layer, "n_head": size.n_head, "n_embd": size.n_embd, "block_size": T,
        "vocab_size": VOCAB, "batch": batch, "workers": list(workers), "steps": steps, "reps": reps, "lr": lr,
        "optimizer": {"kind": "adamw", "betas": list(BETAS), "weight_decay": WEIGHT_DECAY, "decay_on": "2-D",
                      "torch_fused": False},
        "engine": {k: t.rep.engine for k, t in trainers.items()},
        "params": {"nanogpt": sum(p.numel() for p in ng.parameters()),
                   "lowbw": sum(p.numel() for p in ours.parameters())},
        "nanogpt": {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()},
        "device": str(dev), "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "step_s_median": med, "step_s_min": {k: min(v) for k, v in times.items()}, "step_s_all": times,
        "targets": targets,
    }


def _table(res: dict[str, Any]) -> str:
    lines = [f"{res['model']} ({res['n_layer']}/{res['n_head']}/{res['n_embd']}, context {res['block_size']}), "
             f"batch {res['batch']} per worker, {res['device_name']}, {res['torch_threads']} torch thread(s); "
             f"{res['reps']} interleaved rounds of {res['steps']} steps; ratio: median over rounds of the round's "
             "ratio"]
    lines.append(f"{'variant':12s} {'median ms':>9s} {'min ms':>8s}   {'against':16s} {'ratio':>6s} {'target':>7s}  met"
                 f"  {'(of medians, of minima)'}")
    med, tg = res["step_s_median"], res["targets"]
    for k, v in med.items():
        row = f"{k:12s} {1e3 * v:9.2f} {1e3 * res['step_s_min'][k]:8.2f}"
        if k == "nanogpt":
            row += "   (reference)"
        else:
            key = next(t for t in tg if t.startswith(k + "_vs_"))
            against = key.split("_vs_", 1)[1].replace("_", " ")
            t = tg[key]
            row += (f"   {against:16s} {t['ratio']:6.3f} {t['target']:7.2f}  {'yes' if t['met'] else 'NO ':3s}"
                    f"  ({t['ratio_of_medians']:.3f}, {t['ratio_of_minima']:.3f})")
        lines.append(row)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw bench train_lm", description=__doc__.splitlines()[0])
    ap.add_argument("--nanogpt", default=None,
                    help=f"nanoGPT's model.py to import (default {default_nanogpt_path()})")
    ap.add_argument("--device", default="cpu", choices=sorted(SETUPS),
                    help="cpu: gpt-small at batch 12; cuda: gpt-medium at batch 64")
    ap.add_argument("--model", default=None, help="a gpt-* size (default: the device's)")
    ap.add_argument("--batch", type=int, default=0, help="batch per worker (0: the device's)")
    ap.add_argument("--workers", default="2,4", help="the sim variants' worker counts, comma-separated")
    ap.add_argument("--steps", type=int, default=5, help="steps per timed block")
    ap.add_argument("--reps", type=int, default=5, help="timed blocks per variant")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads on CPU (0: torch's default)")
    ap.add_argument("--sim-engine", default="auto", choices=["auto", "loop", "vmap"], help="the Trainer's engine")
    ap.add_argument("--out", default=None, help="JSON path (default runs/bench/train_gpt[_cuda].json)")
    conditions.add_strict_flag(ap)
    a = ap.parse_args(argv)
    try:
        workers = tuple(int(w) for w in a.workers.split(",") if w)
    except ValueError:
        print(f"lowbw bench train_lm: --workers {a.workers!r} is not a comma-separated list of integers",
              file=sys.stderr)
        return 2
    rec = conditions.record().start()
    try:
        res = measure(a.nanogpt, a.device, a.model, a.batch or None, workers, a.steps, a.reps, a.threads,
                      sim_engine=a.sim_engine)
    except (NanoGPTMissing, ValueError) as e:
        rec.stop()
        print(f"lowbw bench train_lm: {e}", file=sys.stderr)
        return 2
    res["provenance"] = provenance()
    res["conditions"] = rec.stop().to_json()
    print(_table(res))
    print(conditions.describe(rec.conditions))
    out = Path(a.out) if a.out else Path("runs/bench") / ("train_gpt.json" if a.device == "cpu"
                                                          else f"train_gpt_{a.device}.json")
    if not conditions.check(rec.conditions, "lowbw bench train_lm", out, a.strict):
        return 1
    atomic_write_json(out, res)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
