"""The user's model as the advisor sees it: its parameter shapes (which fix every method's bytes on the wire)
and one worker's compute per step (forward and backward of its local batch).

Three ways in: one of lowbw's models by name (built on the meta device: nothing allocated), a module of the
user's (``path.py:build``, ``build()`` returns an ``nn.Module``), or a bare parameter count (the shapes of a
GPT-style transformer of that size). Compute per step, in order of preference: the user's ``--step-ms``;
``--measure`` (forward and backward timed here, median of 3 after a warm-up); lowbw's fit of this machine over
several batch sizes (``config/compute_fit.json``: a fixed cost per step plus a cost per sample, at the batch
used, of the trainer's local step; with it each optimiser's update and DiLoCo's outer step); its calibration
(``config/clock.json``, per sample, where it holds the model); otherwise the model's multiply-adds counted on
the meta device, at the rate the calibration measured for the MLP (a CPU estimate, labelled so).
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lowbw.advise.cache import load_cache, save_cache
from lowbw.train.userfiles import load_callable
from lowbw.train.workload_specs import GPT_SIZES, WORKLOADS, workload_of

__all__ = ["Workload", "fit_entry", "from_model", "from_file", "from_params", "transformer_shapes", "example_input",
           "build_named", "CLOCK_FILE", "FIT_FILE"]

CLOCK_FILE = Path(__file__).resolve().parents[2] / "config" / "clock.json"
FIT_FILE = Path(__file__).resolve().parents[2] / "config" / "compute_fit.json"  # python -m lowbw.bench.compute_fit
TRAIN_DIR = Path(__file__).resolve().parents[1] / "train"  # cached shapes and multiply-adds hold while its sources do
GPT_VOCAB = 50257  # a GPT-2 tokenizer's vocabulary, for --params' transformer shapes


@dataclass(frozen=True)
class Workload:
    """What the advisor needs to know of the user's training."""

    model: str  # lowbw model name, "file:<path>:<callable>", or "params:<count>"
    kind: str  # "image" | "lm" | "unknown": which measured workloads are like it
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # (parameter name, shape) of every trainable parameter
    compute_s: float  # one worker's forward + backward of its local batch (s)
    compute_basis: str  # where compute_s comes from, in words
    # seconds of one update of the parameters per inner optimiser (config's ``optimizer``: sgd, adamw, ...) on
    # the machine compute_s was fitted on; {}: not known (the user's --step-ms is taken to include it)
    optimizer_s: Mapping[str, float] = field(default_factory=dict)
    outer_s: float = 0.0  # one DiLoCo outer step (pseudo-gradient, Nesterov SGD, copy back), same machine (s)

    @property
    def params(self) -> int:
        """Trainable parameters."""
        return sum(math.prod(s) for _, s in self.shapes)

    @property
    def grad_bytes(self) -> int:
        """Bytes of one fp32 gradient (a dense exchange's payload)."""
        return 4 * self.params


def _kind(name: str) -> str:
    """Which measured workloads a lowbw model is like: ``lm`` for a language model, else ``image``."""
    return "lm" if workload_of(name).kind == "text" else "image"


def example_input(name: str, model: Any, batch: int, device: str):
    """A batch the named lowbw model accepts (its :class:`lowbw.train.workload_specs.WorkloadSpec`): token ids
    for a language model (the model's context), else images of the spec's channels and size."""
    import torch  # lazy: importing torch costs about a second

    spec = workload_of(name)
    if spec.kind == "text":
        ctx = int(next((getattr(model, a) for a in ("context", "block_size", "seq_len") if hasattr(model, a)), 64))
        return torch.zeros(batch, ctx, dtype=torch.long, device=device)
    return torch.zeros(batch, spec.in_channels, spec.image_size, spec.image_size, device=device)


@contextlib.contextmanager
def _no_init(active: bool):
    """Skip ``torch.nn.init``'s initialisers while a model is built only for its shapes and multiply-adds:
    its values are never read (initialising an ImageNet model takes seconds)."""
    import torch  # lazy: see example_input

    if not active:
        yield
        return
    names = [n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(torch.nn.init, n) for n in names}
    try:
        for n in names:
            setattr(torch.nn.init, n, lambda t, *a, **k: t)
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.nn.init, n, f)


def build_named(name: str, device: str):
    """lowbw model ``name`` as the trainer builds it on its spec's dataset (:func:`example_input` gives its
    input): an image model with the spec's classes, channels and size; a language model with its corpus's
    vocabulary and its size's context (``lowbw.train.workload``'s text workload), whose embedding and
    output layer, hence bytes on the wire, and compute per sample (linear in the context) are the run's."""
    from lowbw.data.text import TEXT_SPECS  # lazy: torch, on a cache miss only
    from lowbw.train.models import build_model

    spec = workload_of(name)
    if spec.kind == "text":
        return build_model(name, TEXT_SPECS[spec.dataset].vocab_size, 1, GPT_SIZES[name].block_size, device=device)
    return build_model(name, spec.num_classes, spec.in_channels, spec.image_size, device=device)


def _cache_key(name: str) -> str:
    """The key of lowbw model ``name``'s facts in the models cache: a language model's names its corpus (whose
    vocabulary sizes it), so that entries of another build are never read as this one's."""
    spec = WORKLOADS.get(name)
    return f"{name}@{spec.dataset}" if spec is not None and spec.kind == "text" else name


def _shapes(module) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((n, tuple(int(d) for d in p.shape)) for n, p in module.named_parameters() if p.requires_grad)


def _macs(module, x) -> float:
    """Multiply-adds of one forward pass of ``x`` through ``module``: every Linear and
    Conv layer's output elements times its fan-in (attention's own products and element-wise work are left
    out: they are small beside the layers at the sizes lowbw trains)."""
    import torch  # lazy: see example_input

    total = [0.0]

    def hook(mod, inp, out):
        if isinstance(mod, torch.nn.Linear):
            total[0] += out.numel() * mod.in_features
        elif isinstance(mod, torch.nn.modules.conv._ConvNd):
            total[0] += out.numel() * (mod.in_channels // mod.groups) * math.prod(mod.kernel_size)

    hs = [m.register_forward_hook(hook) for m in module.modules()]
    try:
        with torch.no_grad():
            module(x)
    finally:
        for h in hs:
            h.remove()
    return total[0]


def _clock_entries(path: Path = CLOCK_FILE) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return list(json.loads(path.read_text())["entries"].values())


def fit_entry(name: str, params: int | None = None, path: Path = FIT_FILE) -> tuple[dict[str, Any], int] | None:
    """(the fit's entry of model ``name``, its threads) from this machine's fit (``config/compute_fit.json``),
    None where it has no such entry or, given ``params``, the entry does not record that it timed a model of
    ``params`` parameters (a fit of another build of the model, or of unrecorded build: its compute is not
    known to be this one's)."""
    if not path.is_file():
        return None
    d = json.loads(path.read_text())
    m = d["models"].get(name)
    if m is None or (params is not None and m.get("params") != params):
        return None
    return m, d["threads"]


def _fitted_compute(name: str, batch: int, path: Path = FIT_FILE, params: int | None = None
                    ) -> tuple[float, str] | None:
    """Compute per step from this machine's fit over several batch sizes (fixed + per sample), if it holds
    the model (of ``params`` parameters, where given)."""
    got = fit_entry(name, params, path)
    if got is None:
        return None
    m, threads = got
    bs = m["batches"]
    inside = "" if min(bs) <= batch <= max(bs) else f", extrapolated from batches {min(bs)}-{max(bs)}"
    return (m["fixed_s"] + m["per_sample_s"] * batch,
            f"fitted on this machine ({path.name}: {m['fixed_s'] * 1e3:.3g} ms + {m['per_sample_s'] * 1e3:.3g} "
            f"ms/sample, {threads} thread(s){inside})")


def _calibrated_compute(name: str, batch: int, macs_of: Callable[[str], float], params: int | None = None
                        ) -> tuple[float, str] | None:
    """Compute per step from this machine's calibration: the fit over batch sizes where it holds the model,
    else the clock's per-sample time (measured at one batch, applied linearly), else its multiply-adds at the
    calibrated MLP's rate. None without a calibration file."""
    fitted = _fitted_compute(name, batch, params=params)
    if fitted is not None:
        return fitted
    entries = _clock_entries()
    own = [e["clock_sample_s"] for e in entries if e.get("model") == name and e.get("compressor") == "none"]
    if own:
        return statistics.median(own) * batch, f"calibrated per sample on this machine ({CLOCK_FILE.name})"
    mlp = [e["clock_sample_s"] for e in entries if e.get("model") == "mlp" and e.get("compressor") == "none"]
    if not mlp:
        return None
    rate = macs_of("mlp") / statistics.median(mlp)  # multiply-adds per second, forward + backward per sample
    return (macs_of(name) * batch / rate,
            "estimated: multiply-adds at this machine's calibrated MLP rate (CPU; give --step-ms for your device)")


def _measure(module, x, loss: Callable) -> float:
    """Median of 3 timed forward + backward passes after one warm-up (s)."""
    times = []
    for i in range(4):
        t = time.perf_counter()
        loss(module(x)).backward()
        module.zero_grad(set_to_none=True)
        if i:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def _facts(name: str) -> dict[str, Any]:
    """Shapes and multiply-adds (forward + backward per sample) of lowbw model ``name``, from the on-disk cache
    while ``lowbw/train``'s sources are unchanged, else computed here (which imports torch: about a second)."""
    cached = load_cache("models", TRAIN_DIR)
    key = _cache_key(name)
    if key not in cached:
        import torch  # lazy: only a model not yet in the cache needs torch (about a second to import)

        with _no_init(True):
            model = build_named(name, "cpu")
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()  # uninitialised memory may hold denormals, which slow the counting forward pass
        cached[key] = {"shapes": [[n, list(s)] for n, s in _shapes(model)],
                       "macs": 3.0 * _macs(model, example_input(name, model, 1, "cpu"))}  # backward ~ 2x forward
        save_cache("models", TRAIN_DIR, cached)
    return cached[key]


def _known(name: str) -> None:
    """A one-line refusal of a name that is not one of lowbw's models (imports the model table only then)."""
    if name in WORKLOADS or _cache_key(name) in load_cache("models", TRAIN_DIR):
        return
    from lowbw.train.models import MODELS  # lazy: imports torch; only a name not cached needs the table

    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)} (or --model-file / --params)")


def from_model(name: str, batch: int = 32, step_ms: float | None = None, measure: bool = False) -> Workload:
    """One of lowbw's models (``lowbw.train.models.MODELS``) with ``batch`` samples per worker and step.

    Shapes and multiply-adds come from :func:`_facts` (the model built on the CPU with its initialisers
    skipped: values are not needed, and the meta device would route the forward pass through torch's slower
    reference kernels); advice after the first for a model imports no torch."""
    _known(name)
    if measure:
        import torch  # lazy: --measure trains nothing but times forward + backward, which needs torch

        m = build_named(name, "cpu")
        x = example_input(name, m, batch, "cpu")
        return Workload(name, _kind(name), _shapes(m), _measure(m, x, lambda y: y.float().sum()),
                        f"measured here (--measure, batch {batch}, {torch.get_num_threads()} threads)")
    shapes = tuple((n, tuple(s)) for n, s in _facts(name)["shapes"])
    if step_ms is not None:
        return Workload(name, _kind(name), shapes, step_ms / 1e3, "given (--step-ms)")
    params = sum(math.prod(s) for _, s in shapes)
    got = _calibrated_compute(name, batch, lambda n: _facts(n)["macs"], params)
    if got is None:
        raise ValueError(f"no compute calibration ({CLOCK_FILE}) for model {name!r}: give --step-ms or --measure")
    entry = fit_entry(name, params)
    updates = (entry[0].get("optimizer_s") or {}, float(entry[0].get("outer_s") or 0.0)) if entry else ({}, 0.0)
    return Workload(name, _kind(name), shapes, got[0], got[1], *updates)


def from_file(spec: str, batch: int = 32, step_ms: float | None = None, measure: bool = False) -> Workload:
    """The user's own ``nn.Module`` from ``path.py:build`` (``build()`` returns it). Compute: ``step_ms``, or
    ``measure`` when the module also defines ``example_input(batch)`` (its loss: the output's sum)."""
    import torch  # lazy: see example_input

    fn = load_callable(spec, "--model-file")
    model = fn()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"--model-file {spec!r}: the callable returned {type(model).__name__}, not a torch.nn.Module")
    shapes = _shapes(model)
    if not shapes:
        raise ValueError(f"--model-file {spec!r}: the model has no trainable parameters")
    name = f"file:{spec}"
    if step_ms is not None:
        return Workload(name, "unknown", shapes, step_ms / 1e3, "given (--step-ms)")
    if measure:
        path = spec.rpartition(":")[0]
        ex = load_callable(f"{path}:example_input", "--model-file")
        return Workload(name, "unknown", shapes, _measure(model, ex(batch), lambda y: y.float().sum()),
                        f"measured here (--measure, batch {batch})")
    raise ValueError(f"--model-file {spec!r}: give --step-ms (your device's forward+backward time) or --measure")


def transformer_shapes(params: float, vocab: int = GPT_VOCAB) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Parameter shapes of a GPT-2-style transformer with about ``params`` parameters: width d (a multiple
    of 64) and depth L = d / 128 (GPT-3's aspect ratio), per layer 12 d^2 weights (attention 4 d^2, MLP 8 d^2)
    plus biases and norms, tied token embedding vocab x d and a context-1024 position embedding."""
    if not params >= 1e5:
        raise ValueError(f"--params {params!r}: give at least 1e5")

    def total(d: int, layers: int) -> float:
        return layers * (12 * d * d + 13 * d) + (vocab + 1024) * d + 2 * d

    lo, hi = 64, 64 * 1024
    while hi - lo > 64:  # the width whose L = d/128 model is closest to params
        mid = (lo + hi) // 2 // 64 * 64
        lo, hi = (mid, hi) if total(mid, max(1, mid // 128)) < params else (lo, mid)
    d = lo
    layers = max(1, round((params - (vocab + 1024) * d) / (12 * d * d + 13 * d)))
    out: list[tuple[str, tuple[int, ...]]] = [("wte", (vocab, d)), ("wpe", (1024, d))]
    for i in range(layers):
        out += [(f"h{i}.ln1.w", (d,)), (f"h{i}.ln1.b", (d,)), (f"h{i}.qkv.w", (3 * d, d)), (f"h{i}.qkv.b", (3 * d,)),
                (f"h{i}.proj.w", (d, d)), (f"h{i}.proj.b", (d,)), (f"h{i}.ln2.w", (d,)), (f"h{i}.ln2.b", (d,)),
                (f"h{i}.fc.w", (4 * d, d)), (f"h{i}.fc.b", (4 * d,)), (f"h{i}.out.w", (d, 4 * d)),
                (f"h{i}.out.b", (d,))]
    return tuple(out + [("lnf.w", (d,)), ("lnf.b", (d,))])


def from_params(params: float, step_ms: float | None = None) -> Workload:
    """A quick estimate from a parameter count alone: a transformer's shapes; compute only if given."""
    shapes = transformer_shapes(params)
    if step_ms is None:
        return Workload(f"params:{params:.3g}", "lm", shapes, 0.0,
                        "not given: communication and compression only (give --step-ms)")
    return Workload(f"params:{params:.3g}", "lm", shapes, step_ms / 1e3, "given (--step-ms)")
