"""An extension owns its name: outside its own module and the registries, no code compares a collective's, a
compressor's, a model's or a dataset's name (ARCHITECTURE.md, "An extension owns its keys and rules").

The check reads every module of lowbw (its syntax tree, not its text): a comparison (==, !=, in, not in) with
a string constant, or a tuple, list or set of them, that is a registered name, and a ``startswith`` of a prefix
of one. Allowed: the extension's own module (the collective's SPEC, the compressor's registration), the
registries, and the places in ``ALLOWED`` below, each with the reason it may (listed once, here). ``none`` (the
config's "no compressor") is not checked.

A sync scheme's name likewise: outside the scheme registry and the scheme's own modules (its declaration in
``lowbw/train/schemes/keys/<m>.py``, the module of the same name ``lowbw/train/schemes/<m>.py`` and the module of
the class that runs it) only the places in ``SCHEME_ALLOWED`` compare it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from lowbw.comm.registry import COLLECTIVES
from lowbw.compress.registry import available
from lowbw.data.specs import SPECS
from lowbw.data.text import TEXT_SPECS
from lowbw.train.schemes.registry import SCHEMES
from lowbw.train.workload_specs import WORKLOADS
from tests.helpers import scheme_keys_modules

ROOT = Path(__file__).resolve().parents[1]

# the tables that name every extension of their kind
REGISTRIES = ("lowbw/comm/registry.py", "lowbw/compress/registry.py", "lowbw/train/workload_specs.py",
              "lowbw/train/models.py", "lowbw/data/specs.py", "lowbw/data/text.py", "lowbw/report/catalog.py")

_PATTERN = ("a broadcast or all-gather pattern's name (lowbw.comm.algorithms.BROADCASTS, CollectiveSpec.gather), "
            "not the all-reduce")
_OP = "an op's spelling (all_gather), not the allgather all-reduce"
_HEAD_TO_HEAD = "a head-to-head against the authors' or torch's own code on this method (the experiment's subject)"
# (module, name) -> why it may compare that name
ALLOWED: dict[tuple[str, str], str] = {
    ("lowbw/net/costmodel.py", "tree"): _PATTERN,
    ("lowbw/net/costmodel.py", "ring"): "AR-Top-k's base collectives, which it names (Zhou et al. 2021)",
    ("lowbw/net/costmodel.py", "allgather"): _OP,
    ("lowbw/net/costlinks.py", "ring"): _PATTERN,
    ("lowbw/net/costlinks.py", "tree"): _PATTERN,
    ("lowbw/net/costlinks.py", "allgather"): _OP,
    ("lowbw/comm/api.py", "native"): _PATTERN,
    ("lowbw/comm/threads.py", "ring"): _PATTERN,
    ("lowbw/comm/threads.py", "native"): _PATTERN,
    ("lowbw/comm/hooks.py", "ring"): "the DDP hook's own gather option (ring | native | auto)",
    ("lowbw/comm/hooks.py", "native"): "the DDP hook's own gather option (ring | native | auto)",
    ("lowbw/train/adaptive.py", "allgather"): "adaptive top-k's own option names (lowbw.train.adaptive.COLLECTIVES)",
    ("lowbw/bench/collectives_results.py", "ring"): "E1's head-to-head: lowbw's ring against gloo's (native)",
    ("lowbw/bench/collectives_results.py", "native"): "E1's head-to-head: lowbw's ring against gloo's (native)",
    ("lowbw/report/e1.py", "ring"): "E1's head-to-head: lowbw's ring against gloo's (native)",
    ("lowbw/report/e1.py", "native"): "E1's head-to-head: lowbw's ring against gloo's (native)",
    ("lowbw/bench/compressors.py", "blockwise"): _HEAD_TO_HEAD + ": bitsandbytes' quantize_blockwise",
    ("lowbw/bench/compressors.py", "fp16"): _HEAD_TO_HEAD + ": torch's fp16 hook",
    ("lowbw/bench/compressors.py", "powersgd"): _HEAD_TO_HEAD + ": torch's PowerSGD hook",
    ("lowbw/report/e2.py", "blockwise"): _HEAD_TO_HEAD + ": bitsandbytes' quantize_blockwise",
    ("lowbw/bench/hooks.py", "fp16"): _HEAD_TO_HEAD + ": torch's fp16 hook",
    ("lowbw/bench/hooks.py", "bf16"): _HEAD_TO_HEAD + ": torch's bf16 hook",
    ("lowbw/bench/hooks.py", "powersgd"): _HEAD_TO_HEAD + ": torch's PowerSGD hook",
    ("lowbw/bench/hooks.py", "artopk"): "AR-Top-k runs its own per-tensor protocol in the hook benchmark",
    ("lowbw/bench/compressor_inputs.py", "resnet20"): "E2's input kind named after the model whose gradient it is",
    ("lowbw/bench/train.py", "cnn"): "the compression benchmark's default model: its runs' paths, its figure's title",
    ("lowbw/advise/workload.py", "mlp"): "the calibrated model whose rate per multiply-add the advisor borrows",
    ("lowbw/report/gpu.py", "cifar10"): "the GPU profile's CIFAR-10 runs take the target its config names",
}


def _names() -> dict[str, str]:
    """Every registered name -> its kind."""
    return {**{n: "collective" for n in COLLECTIVES}, **{n: "compressor" for n in available() if n != "none"},
            **{n: "model" for n in WORKLOADS}, **{n: "dataset" for n in [*SPECS, *TEXT_SPECS]}}


def _own(tree: ast.Module) -> set[str]:
    """The names a module owns: the ``name=`` of its ``SPEC = CollectiveSpec(...)`` and the names it registers
    with ``register("<name>", ...)``."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "CollectiveSpec":
            out |= {k.value.value for k in n.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)}
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "register" and n.args \
                and isinstance(n.args[0], ast.Constant):
            out.add(n.args[0].value)
    return out


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def compared_names(path: Path, names: dict[str, str]) -> list[tuple[int, str]]:
    """(line, name) of every comparison with a registered name in the module at ``path`` (module docstring)."""
    tree = ast.parse(path.read_text())
    own = _own(tree)
    hits = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and any(isinstance(o, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for o in n.ops):
            hits += [(n.lineno, s) for side in (n.left, *n.comparators) for s in _strings(side) if s in names]
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "startswith":
            hits += [(n.lineno, s) for a in n.args for s in _strings(a)
                     if len(s) >= 2 and any(k.startswith(s) and k != s for k in names)]
    return [(line, s) for line, s in hits if s not in own]


def test_no_code_compares_an_extensions_name_outside_its_module_and_the_registries():
    names = _names()
    found = []
    for path in sorted((ROOT / "lowbw").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in REGISTRIES:
            continue
        found += [f"{rel}:{line}: compares the {names.get(s, 'model')} name {s!r}"
                  for line, s in compared_names(path, names) if (rel, s) not in ALLOWED]
    assert not found, "\n".join(found)


def test_every_allowed_place_still_compares_its_name():
    """A stale entry (the comparison is gone) is dropped from ALLOWED, so the list stays the list of what is left."""
    names = _names()
    stale = [k for k in ALLOWED if k[1] not in {s for _, s in compared_names(ROOT / k[0], names)}]
    assert not stale, stale


def test_the_check_finds_a_comparison_and_a_prefix(tmp_path):
    names = {"ring": "collective", "topk": "compressor", "gpt-mini": "model"}
    f = tmp_path / "m.py"
    f.write_text('def f(a, c, m):\n    if a == "ring" or c in ("topk", "x"):\n        return m.startswith("gpt")\n'
                 'SPEC = CollectiveSpec(name="tree")\nx = a == "tree"\n')
    assert compared_names(f, {**names, "tree": "collective"}) == [(2, "ring"), (2, "topk"), (3, "gpt")]


# ------------------------------------------------------------------------------------------ sync schemes
SCHEME_REGISTRY = "lowbw/train/schemes/registry.py"
# (module, scheme name) -> why it may compare that name: none. What other modules asked by name (the advisor's
# modelled schemes and families, the period a label shows, the schemes with an outer step) is the declaration's
# (SchemeSpec.advised / family, the keys it reads: lowbw.train.schemes.registry.reads)
SCHEME_ALLOWED: dict[tuple[str, str], str] = {}


def _scheme_owners() -> dict[str, set[str]]:
    """Scheme name -> the modules that own it: its declaration's keys module (named in its registry line,
    ``"<name>": importlib.import_module("lowbw.train.schemes.keys.<m>").SPEC``), the scheme module of the same
    name and the module of the class that runs it."""
    owners: dict[str, set[str]] = {}
    for name, m in scheme_keys_modules().items():
        runs = SCHEMES[name].runs.partition(":")[0].replace(".", "/") + ".py"
        owners[name] = {f"lowbw/train/schemes/keys/{m}.py", f"lowbw/train/schemes/{m}.py", runs}
    return owners


def test_every_scheme_has_its_owners_from_its_registry_line():
    owners = _scheme_owners()
    assert set(owners) == set(SCHEMES)
    for name, mods in owners.items():
        assert any((ROOT / m).exists() for m in mods if "/keys/" in m), name


def test_no_code_compares_a_sync_schemes_name_outside_its_modules_and_the_registry():
    names = {n: "sync scheme" for n in SCHEMES}
    owners = _scheme_owners()
    found = []
    for path in sorted((ROOT / "lowbw").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == SCHEME_REGISTRY:
            continue
        found += [f"{rel}:{line}: compares the sync scheme name {s!r}" for line, s in compared_names(path, names)
                  if rel not in owners.get(s, set()) and (rel, s) not in SCHEME_ALLOWED]
    assert not found, "\n".join(found)


def test_every_allowed_place_still_compares_its_scheme_name():
    names = {n: "sync scheme" for n in SCHEMES}
    stale = [k for k in SCHEME_ALLOWED if k[1] not in {s for _, s in compared_names(ROOT / k[0], names)}]
    assert not stale, stale
