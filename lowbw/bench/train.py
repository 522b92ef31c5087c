"""Training-engine benchmarks (evidence for lowbw.train), each writing ``runs/bench/train_<name>.json``.

    python -m lowbw.bench.train throughput   # sim with M replicas vs one model at batch M*b (samples/s)
    python -m lowbw.bench.train compression  # small CNN, 4 workers: dense vs 8-bit block-wise vs top-1%
    python -m lowbw.bench.train resnet20     # ResNet-20, 4 workers, dense, CIFAR-10, a wall-clock budget
    python -m lowbw.bench.train steptime     # sim step time, compressed / dense, threads vs batched compression
    python -m lowbw.bench.train exchange     # one gradient exchange alone, threads vs batched compression

``throughput`` interleaves the variants (blocks of steps, repeated) so that background load hits them alike
and reports medians. ``compression`` and ``resnet20`` train real runs (run directories under
``runs/bench/train_<name>/``) and summarise their accuracy against virtual time at the configured link.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from lowbw.measure import conditions
from lowbw.runs.io import atomic_write_json, provenance, read_jsonl
from lowbw.train.assign import TrainData
from lowbw.train.augment import Augmenter
from lowbw.train.config import RunConfig
from lowbw.train.launch import run
from lowbw.train.loop import Trainer
from lowbw.train.models import build_model
from lowbw.train.world import SimWorld

__all__ = ["throughput", "compression", "resnet20", "steptime", "exchange", "interleaved", "main"]

OUT = Path("runs/bench")


def _cifar_like(n: int = 4096, seed: int = 0, device: str = "cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g).to(device)
    y = torch.randint(0, 10, (n,), generator=g).to(device)
    empty_x, empty_y = x[:0], y[:0]
    return TrainData("random32", x, y, empty_x, empty_y, empty_x, empty_y, 10, (0.5,) * 3, (0.25,) * 3)


def interleaved(variants: dict[str, Any], reps: int, steps: int, dev) -> dict[str, list[float]]:
    """Seconds per call of every variant (a no-argument function): ``reps`` rounds, each timing ``steps``
    calls of every variant in turn, so that background load hits them alike; CUDA work is waited for."""
    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(reps):
        for k, fn in variants.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            sync()
            times[k].append((time.perf_counter() - t0) / steps)
    return times


def throughput(model: str = "cnn", workers: int = 4, local_batch: int = 32, steps: int = 8, reps: int = 5,
               engines: tuple[str, ...] = ("loop", "vmap"), threads: int = 0, device: str = "cpu") -> dict[str, Any]:
    """Samples/s of sim with ``workers`` replicas (dense sync, ring) vs one model at batch workers*b.

    Variants: ``torch`` (plain module + torch.optim.SGD + the same augmentation: the reference), ``trainer_m1``
    (our Trainer with one worker at the big batch), ``sim_<engine>`` (M replicas at b each). ``device``: cpu or
    cuda (timings then end with ``torch.cuda.synchronize``).
    """
    if threads:
        torch.set_num_threads(threads)
    dev = torch.device(device)
    data = _cifar_like(device=device)
    B = workers * local_batch
    base = {"dataset": "synthetic", "model": model, "steps": 10**6, "progress": False, "lr": 0.01,
            "device": dev.type}

    def trainer(M: int, engine: str):
        cfg = RunConfig.from_dict({**base, "workers": M, "batch_size": B, "sim_engine": engine})
        tr = Trainer(cfg, SimWorld(cfg), None, data=data)
        return tr.train_step

    torch.manual_seed(0)
    net = build_model(model, 10, 3, 32, device=dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    aug = Augmenter("crop_flip", 3, (0.5,) * 3, (0.25,) * 3, dev)
    gen = torch.Generator().manual_seed(0)  # augmentation draws on the CPU (as the Trainer)
    pos = [0]

    def torch_step():
        i = pos[0]
        pos[0] = (i + B) % (len(data.y_train) - B)
        x = aug.train(data.x_train[i: i + B], gen)
        y = data.y_train[i: i + B]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    variants = {"torch": torch_step, "trainer_m1": trainer(1, "loop")}
    for e in engines:
        variants[f"sim_{e}"] = trainer(workers, e)
    for fn in variants.values():  # warm-up
        fn()
        fn()
    times = interleaved(variants, reps, steps, dev)
    med = {k: statistics.median(v) for k, v in times.items()}
    sps = {k: B / v for k, v in med.items()}
    return {
        "model": model, "workers": workers, "local_batch": local_batch, "global_batch": B, "steps": steps,
        "reps": reps, "torch_threads": torch.get_num_threads(), "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "step_s_median": med, "step_s_all": times, "samples_per_s": sps,
        "ratio_vs_torch": {k: sps[k] / sps["torch"] for k in sps if k.startswith("sim_")},
        "ratio_vs_trainer_m1": {k: sps[k] / sps["trainer_m1"] for k in sps if k.startswith("sim_")},
        "target": 0.8,
    }


STEPTIME_METHODS: dict[str, dict[str, Any]] = {  # E4's headline methods (config/config.yaml's presets)
    "dense": {"compressor": "none"},
    "fp16": {"compressor": "fp16"},
    "q8nl": {"compressor": "blockwise", "compressor_args": {"bits": 8, "codebook": "nonlinear"}},
    "topk1": {"compressor": "topk", "compressor_args": {"ratio": 0.01}, "error_feedback": "on"},
    "dgc": {"compressor": "dgc", "compressor_args": {"ratio": 0.001}, "momentum": 0.0},
    "powersgd": {"compressor": "powersgd", "compressor_args": {"rank": 2}},
}


def steptime(model: str = "resnet20", workers: int = 4, local_batch: int = 32, steps: int = 4, reps: int = 3,
             methods: tuple[str, ...] = tuple(STEPTIME_METHODS), modes: tuple[str, ...] = ("threads", "batched"),
             device: str = "cpu", threads: int = 0) -> dict[str, Any]:
    """Wall seconds per ``sim`` training step (sync, ring, synthetic CIFAR-sized data) of every method, with
    the compressors run rank by rank in threads (``sim_compress: threads``, what procs does) and over all
    replicas at once (``batched``, :mod:`lowbw.train.batched`); ``ratio``: compressed step / dense step
    (dense: one value, the direct rank-ordered sum). Variants are interleaved (blocks of ``steps`` steps,
    ``reps`` times) so that background load hits them alike; medians. ``exchange_s``: the seconds inside the
    gradient exchange. ``threads``: torch intra-op threads (0: torch's default)."""
    if threads:
        torch.set_num_threads(threads)

    bad = [m for m in methods if m not in STEPTIME_METHODS]
    if bad or "dense" not in methods:
        raise ValueError(f"methods {list(methods)}: need 'dense' and names of {sorted(STEPTIME_METHODS)}")
    dev = torch.device(device)
    data = _cifar_like(device=device)
    base = {"dataset": "synthetic", "model": model, "steps": 10**6, "progress": False, "lr": 0.01,
            "device": dev.type, "workers": workers, "batch_size": workers * local_batch}
    variants: dict[str, tuple[Any, str]] = {}
    ex_s: dict[str, list[float]] = {}
    for m in methods:
        for mode in (("threads",) if m == "dense" else modes):
            key = m if m == "dense" else f"{m}/{mode}"
            cfg = RunConfig.from_dict({**base, **STEPTIME_METHODS[m], "sim_compress": mode})
            tr = Trainer(cfg, SimWorld(cfg), None, data=data)
            agg, acc = tr.sync.aggregate, ex_s.setdefault(key, [])

            def timed(*a, _agg=agg, _acc=acc, **k):
                t0 = time.perf_counter()
                out = _agg(*a, **k)
                _acc.append(time.perf_counter() - t0)
                return out

            tr.sync.aggregate = timed
            variants[key] = (tr.train_step, mode)

    for fn, _ in variants.values():  # warm-up
        fn()
        fn()
    for v in ex_s.values():
        v.clear()
    times = interleaved({k: fn for k, (fn, _) in variants.items()}, reps, steps, dev)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "model": model, "workers": workers, "local_batch": local_batch, "steps": steps, "reps": reps,
        "device": str(dev), "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch_threads": torch.get_num_threads(), "step_s_median": med, "step_s_all": times,
        "exchange_s_median": {k: statistics.median(v) for k, v in ex_s.items() if v},
        "ratio": {k: v / med["dense"] for k, v in med.items() if k != "dense"},
    }


def exchange(model: str = "resnet20", workers: int = 4, reps: int = 20,
             methods: tuple[str, ...] = tuple(STEPTIME_METHODS), modes: tuple[str, ...] = ("threads", "batched"),
             device: str = "cpu", threads: int = 0) -> dict[str, Any]:
    """Wall seconds of one gradient exchange alone (``Synchroniser.aggregate`` on fixed random gradients of
    ``model``, ``workers`` sim replicas, ring): each compressor ``threads`` vs ``batched``, dense the direct sum.
    Without the training compute in between, background load disturbs it less than :func:`steptime`.
    Interleaved ``reps`` times; medians. ``threads``: torch intra-op threads (0: torch's default)."""
    if threads:
        torch.set_num_threads(threads)

    dev = torch.device(device)
    data = _cifar_like(n=64, device=device)
    base = {"dataset": "synthetic", "model": model, "steps": 10**6, "progress": False, "device": dev.type,
            "workers": workers, "batch_size": workers * 8}
    g = torch.Generator().manual_seed(0)
    calls: dict[str, tuple[Any, str]] = {}
    for m in methods:
        grads = torch.randn(0)
        for mode in (("threads",) if m == "dense" else modes):
            cfg = RunConfig.from_dict({**base, **STEPTIME_METHODS[m], "sim_compress": mode})
            tr = Trainer(cfg, SimWorld(cfg), None, data=data)
            if not grads.numel():  # the same gradients for both modes
                grads = torch.randn(tr.rep.grads.shape, generator=g).mul_(1e-2)
            tr.rep.grads.copy_(grads.to(dev))
            calls[m if m == "dense" else f"{m}/{mode}"] = (tr.sync.aggregate, mode)

    fns = {k: (lambda agg=agg: agg("world")) for k, (agg, _) in calls.items()}
    interleaved(fns, 2, 1, dev)  # two warm-up rounds
    times = interleaved(fns, reps, 1, dev)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"model": model, "workers": workers, "reps": reps, "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "torch_threads": torch.get_num_threads(), "exchange_s_median": med, "exchange_s_all": times,
            "speedup_batched": {m: med[f"{m}/threads"] / med[f"{m}/batched"] for m in methods
                                if f"{m}/threads" in med and f"{m}/batched" in med}}


def _train(cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    import json

    if (out / "summary.json").exists():
        summ = json.loads((out / "summary.json").read_text())
    else:
        summ = run(cfg, out)
    lines = read_jsonl(out / "metrics.jsonl")
    curve = [{k: ln.get(k) for k in ("step", "epoch", "samples", "test_acc", "val_acc", "t_virtual", "t_wall",
                                     "bytes_sent")} for ln in lines if ln.get("test_acc") is not None]
    return {"config": cfg, "run_dir": str(out), "summary": summ, "curve": curve}


COMPRESSION_METHODS: dict[str, dict[str, Any]] = {
    "dense": {"compressor": "none"},
    "blockwise8": {"compressor": "blockwise", "compressor_args": {"bits": 8}},
    "top1pct": {"compressor": "topk", "compressor_args": {"ratio": 0.01}, "error_feedback": "on"},
    "powersgd2": {"compressor": "powersgd", "compressor_args": {"rank": 2}},
}
DEFAULT_COMPRESSION = ("dense", "blockwise8", "top1pct")


def compression(dataset: str = "cifar10_small", epochs: float = 15, bandwidth_mbit: float = 10.0,
                workers: int = 4, methods: tuple[str, ...] = DEFAULT_COMPRESSION, root: Path = OUT,
                targets: tuple[float, ...] = (0.4, 0.5, 0.55, 0.6), model: str = "cnn",
                device: str = "cpu") -> dict[str, Any]:
    """``model`` (default the small CNN), ``workers`` workers: accuracy vs virtual time at ``bandwidth_mbit`` per
    compressor. Run directories go to ``root/train_compression[_<model>]/<method>``."""
    base = {"dataset": dataset, "model": model, "device": device, "workers": workers, "batch_size": 128,
            "epochs": epochs,
            "lr": 0.05, "lr_schedule": "cosine", "weight_decay": 5e-4, "bandwidth_mbit": bandwidth_mbit,
            "eval_every": 1.0, "targets": list(targets), "log_every": 20}
    bad = [m for m in methods if m not in COMPRESSION_METHODS]
    if bad:
        raise ValueError(f"unknown compression method(s) {bad}; choose from {sorted(COMPRESSION_METHODS)}")
    runs = {}
    name = "train_compression" if model == "cnn" else f"train_compression_{model}"
    for m in methods:
        runs[m] = _train({**base, **COMPRESSION_METHODS[m], "name": m}, root / name / m)
    res = {"dataset": dataset, "model": model, "bandwidth_mbit": bandwidth_mbit, "workers": workers,
           "epochs": epochs, "runs": runs}
    res["figure"] = str(plot_compression(res, root / f"{name}.png"))
    return res


def plot_compression(res: dict[str, Any], path: Path) -> Path:
    """Test accuracy against virtual time (log) and against epochs, one line per method."""
    matplotlib.use("Agg")

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.4))
    for m, rr in res["runs"].items():
        c = [p for p in rr["curve"] if p["t_virtual"]]
        ax[0].plot([p["t_virtual"] for p in c], [p["test_acc"] for p in c], "o-", ms=3, label=m)
        ax[1].plot([p["epoch"] for p in rr["curve"]], [p["test_acc"] for p in rr["curve"]], "o-", ms=3, label=m)
    ax[0].set(xscale="log", xlabel=f"virtual time (s) at {res['bandwidth_mbit']:g} Mbit/s", ylabel="test accuracy")
    ax[1].set(xlabel="epoch", ylabel="test accuracy")
    ax[0].legend()
    label = "small CNN" if res.get("model", "cnn") == "cnn" else res["model"]
    fig.suptitle(f"{label} on {res['dataset']}, {res['workers']} workers")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def _step_seconds(cfg: dict[str, Any], steps: int = 6) -> float:
    """Measured wall seconds per training step of ``cfg`` (after 2 warm-up steps), on the real data."""
    c = RunConfig.from_dict({**cfg, "progress": False, "max_wall_s": 0})
    tr = Trainer(c, SimWorld(c), None)
    tr.train_step()
    tr.train_step()
    t0 = time.perf_counter()
    for _ in range(steps):
        tr.train_step()
    return (time.perf_counter() - t0) / steps


def resnet20(max_wall_s: float = 900.0, epochs: float = 0, workers: int = 4, root: Path = OUT,
             dataset: str = "cifar10") -> dict[str, Any]:
    """ResNet-20, dense sync, real CIFAR-10 (45k/5k split), cosine schedule sized to the wall-clock budget.

    ``epochs=0``: as many epochs as the budget allows at the measured step time (85% of it for training,
    the rest for evaluation), so the cosine schedule completes inside ``max_wall_s``.
    """
    cfg = {"dataset": dataset, "model": "resnet20", "workers": workers, "batch_size": 128, "epochs": epochs or 1,
           "lr": 0.1, "lr_schedule": "cosine", "weight_decay": 5e-4, "eval_every": 1.0, "max_wall_s": max_wall_s,
           "targets": [0.5, 0.6, 0.7, 0.8, 0.9], "log_every": 50, "checkpoint_every": 200,
           "bandwidth_mbit": 1000.0}
    sized = None
    if not epochs:
        s = _step_seconds(cfg)
        steps_per_epoch = 45000 / 128
        epochs = max(1.0, float(int(0.85 * max_wall_s / (s * steps_per_epoch))))
        sized = {"step_s": s, "steps_per_epoch": steps_per_epoch, "epochs": epochs}
        cfg["epochs"] = epochs
        cfg["eval_every"] = max(1.0, float(int(epochs // 6) or 1))
    res = _train(cfg, root / "train_resnet20")
    res["sizing"] = sized
    return res


def main(argv: list[str] | None = None) -> int:
    import json

    ap = argparse.ArgumentParser(prog="python -m lowbw.bench.train", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--model", default="cnn")
    t.add_argument("--workers", type=int, default=4)
    t.add_argument("--local-batch", type=int, default=32)
    t.add_argument("--steps", type=int, default=8)
    t.add_argument("--reps", type=int, default=5)
    t.add_argument("--engines", default="loop,vmap")
    t.add_argument("--device", default="cpu", help="cpu | cuda")
    c = sub.add_parser("compression")
    c.add_argument("--dataset", default="cifar10_small")
    c.add_argument("--epochs", type=float, default=15)
    c.add_argument("--bandwidth-mbit", type=float, default=10.0)
    c.add_argument("--methods", default=",".join(DEFAULT_COMPRESSION), help=f"of {', '.join(COMPRESSION_METHODS)}")
    c.add_argument("--model", default="cnn")
    c.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    r = sub.add_parser("resnet20")
    r.add_argument("--max-wall-s", type=float, default=900.0)
    r.add_argument("--epochs", type=float, default=0, help="0: sized to the budget")
    st = sub.add_parser("steptime")
    st.add_argument("--model", default="resnet20")
    st.add_argument("--workers", type=int, default=4)
    st.add_argument("--local-batch", type=int, default=32)
    st.add_argument("--steps", type=int, default=4)
    st.add_argument("--reps", type=int, default=3)
    st.add_argument("--methods", default=",".join(STEPTIME_METHODS), help=f"of {', '.join(STEPTIME_METHODS)}")
    st.add_argument("--modes", default="threads,batched",
                    help="sim_compress values: threads (rank by rank) and/or batched")
    st.add_argument("--device", default="cpu", help="cpu | cuda")
    st.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ex = sub.add_parser("exchange")
    ex.add_argument("--model", default="resnet20")
    ex.add_argument("--workers", type=int, default=4)
    ex.add_argument("--reps", type=int, default=20)
    ex.add_argument("--methods", default=",".join(STEPTIME_METHODS), help=f"of {', '.join(STEPTIME_METHODS)}")
    ex.add_argument("--modes", default="threads,batched", help="sim_compress values")
    ex.add_argument("--device", default="cpu", help="cpu | cuda")
    ex.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")

    for p in (t, c, r, st, ex):
        p.add_argument("--out", default=None, help="JSON path (default runs/bench/train_<what>.json)")
        conditions.add_strict_flag(p)
    a = ap.parse_args(argv)
    rec = conditions.record().start()  # the machine's load, steal and our CPU time while measuring
    if a.what == "throughput":
        res = throughput(a.model, a.workers, a.local_batch, a.steps, a.reps, tuple(a.engines.split(",")),
                         device=a.device)
        print(json.dumps({k: res[k] for k in ("samples_per_s", "ratio_vs_torch", "ratio_vs_trainer_m1")}, indent=1))
    elif a.what == "compression":
        res = compression(a.dataset, a.epochs, a.bandwidth_mbit, methods=tuple(a.methods.split(",")), model=a.model,
                          device=a.device)
        for m, rr in res["runs"].items():
            s = rr["summary"]
            print(f"{m:12s} final test acc {s['final_test_acc']:.4f}  virtual {s['t_virtual']:9.1f} s  "
                  f"bytes {s['bytes_sent_total'] / 1e9:8.3f} GB  ttt {s['time_to_target']}")
    elif a.what == "steptime":
        res = steptime(a.model, a.workers, a.local_batch, a.steps, a.reps, tuple(a.methods.split(",")),
                       tuple(a.modes.split(",")), a.device, a.threads)
        print(f"{res['model']}, {res['workers']} workers x batch {res['local_batch']}, {res['device_name']}")
        print(f"{'variant':18s} {'step s':>9s} {'exchange s':>11s} {'/ dense':>8s}")
        for k, v in res["step_s_median"].items():
            print(f"{k:18s} {v:9.4f} {res['exchange_s_median'].get(k, 0.0):11.4f} {res['ratio'].get(k, 1.0):8.2f}")
    elif a.what == "exchange":
        res = exchange(a.model, a.workers, a.reps, tuple(a.methods.split(",")), tuple(a.modes.split(",")), a.device,
                       a.threads)
        print(f"{res['model']}, {res['workers']} workers, one exchange, {res['device_name']}")
        for k, v in res["exchange_s_median"].items():
            print(f"{k:18s} {v:9.4f} s")
        print("batched speed-up:", {k: round(v, 2) for k, v in res["speedup_batched"].items()})
    else:
        res = resnet20(a.max_wall_s, a.epochs)
        s = res["summary"]
        print(f"resnet20: final test acc {s['final_test_acc']}, best {s['best_test_acc']}, epoch {s['epoch']:.2f}, "
              f"wall {s['t_wall']:.0f} s, complete={s['complete']}")
    res["provenance"] = provenance()
    res["conditions"] = rec.stop().to_json()
    out = a.out or OUT / f"train_{a.what}.json"
    if not conditions.check(rec.conditions, f"lowbw bench train {a.what}", out, a.strict):
        return 1
    atomic_write_json(out, res)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
