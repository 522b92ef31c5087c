"""A sync scheme declares its own config keys and rules (lowbw.train.schemes.keys) and reads from the config
only what it declares; RunConfig is assembled from the engine's keys and the schemes' key sets; the rules
across schemes refuse a scheme's key under another scheme, naming the key; stored runs' configs still load."""

from __future__ import annotations

import ast
import json
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from lowbw.train.config import ConfigError, RunConfig, keys_help
from lowbw.train.config_fields import EngineKeys
from lowbw.train.schemes.registry import SCHEMES, key_sets, users_of
from lowbw.train.schemes.spec import key_names
from tests.helpers import scheme_keys_modules, sim_run

ROOT = Path(__file__).resolve().parents[2]
SCHEMES_DIR = ROOT / "lowbw" / "train" / "schemes"
BASE = sim_run(workers=4)
ENGINE = {f.name for f in fields(EngineKeys)}


def test_run_config_is_the_engine_keys_and_every_schemes_key_sets_each_declared_once():
    declared = [f.name for f in fields(EngineKeys)] + [f.name for ks in key_sets() for f in fields(ks)]
    assert len(declared) == len(set(declared)), "a key is declared twice"
    assert set(RunConfig.keys()) == set(declared)
    for ks in key_sets():
        for f in fields(ks):
            m = f.metadata
            assert m["help"] and m["group"] and "unit" in m, f.name
            assert f.name not in ENGINE, f.name
            assert users_of(f.name), f"{f.name}: declared but no scheme reads it"


def test_the_help_shows_a_schemes_key_with_its_unit():
    h = keys_help()
    assert "  world_period = 1 [steps]" in h and "  async_grace_s = 0.0 [s]" in h
    assert h.count("\nsynchronisation:") == 1  # each section once, the schemes' keys inside it


def _other_value(f):
    """A valid value of key ``f`` other than its default."""
    d, m = f.default, f.metadata
    if m.get("enum"):
        return next(v for v in m["enum"] if v != d)
    if isinstance(d, bool):
        return not d
    v = d + 1
    if m.get("maximum") is not None and v > m["maximum"]:
        v = (d + m["maximum"]) / 2
    return type(d)(v)


@pytest.mark.parametrize("sync", list(SCHEMES))
def test_a_schemes_key_under_another_scheme_is_refused_naming_it(sync):
    """Every key of a key set that ``sync`` does not list, set to another valid value: a one-line ConfigError
    naming that key (the value would be ignored)."""
    own = set(key_names(SCHEMES[sync]))
    for ks in key_sets():
        for f in fields(ks):
            if f.name in own:
                continue
            assert f.default is not MISSING
            with pytest.raises(ConfigError) as e:
                RunConfig.from_dict({**BASE, "sync": sync, f.name: _other_value(f)})
            assert e.value.key == f.name and "\n" not in str(e.value), (sync, f.name, str(e.value))


def _cfg_reads(tree: ast.AST) -> set[str]:
    """The attributes read off a config in a module: ``cfg.x``, ``self.cfg.x``, ``ctx.cfg.x``."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute):
            v = n.value
            if (isinstance(v, ast.Name) and v.id == "cfg") or (isinstance(v, ast.Attribute) and v.attr == "cfg"):
                out.add(n.attr)
    return out


def _served(module: str) -> set[str]:
    """The schemes a scheme module serves: those whose class lives in it or whose keys module has its name;
    for a module that is neither (the asynchronous outer schemes' engine), those that list a key set its keys
    module declares."""
    keys_of = scheme_keys_modules()
    served = {name for name, spec in SCHEMES.items()
              if spec.runs.partition(":")[0] == f"lowbw.train.schemes.{module}" or keys_of[name] == module}
    if served:
        return served
    own_sets = {ks for ks in key_sets() if ks.__module__ == f"lowbw.train.schemes.keys.{module}"}
    return {name for name, spec in SCHEMES.items() if own_sets & set(spec.keys)}


def test_a_scheme_reads_only_the_engine_keys_and_the_keys_it_declares():
    """A scheme's module reads from the config only the engine's keys and the keys of the schemes it serves
    (:func:`_served`); properties of RunConfig (derived values) are methods, not keys."""
    derived = {n for n in dir(RunConfig) if not n.startswith("_")} - set(RunConfig.keys())
    bad = []
    for path in sorted(SCHEMES_DIR.glob("*.py")):
        module = path.stem
        allowed = ENGINE | derived | {k for name in _served(module) for k in key_names(SCHEMES[name])}
        bad += [f"{path.name}: cfg.{k}" for k in sorted(_cfg_reads(ast.parse(path.read_text())) - allowed)]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_foreign_key(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f(cfg, self):\n    return cfg.outer_lr + self.cfg.world_period + cfg.workers\n")
    assert _cfg_reads(ast.parse(f.read_text())) == {"outer_lr", "world_period", "workers"}


def test_stored_runs_configs_load_unchanged():
    """Every run stored under paper/measured: its config.json validates (without the registries: a stored run
    may name a dataset this machine lacks) and round-trips to the same values."""
    paths = sorted((ROOT / "paper" / "measured").rglob("config.json"))
    assert paths
    for p in paths:
        c = json.loads(p.read_text())
        c = c.get("config", c)
        known = set(RunConfig.keys())
        cfg = RunConfig.from_dict({k: v for k, v in c.items() if k in known}, check_registries=False)
        assert {k: v for k, v in cfg.to_dict().items() if k in c} == {k: c[k] for k in c if k in known}, p


def test_what_other_layers_ask_of_a_scheme_is_its_declaration():
    """The advisor's modelled schemes and families, and the keys a scheme reads (a label's H, an outer step's
    rate), come from the declarations, so that no module outside a scheme compares its name."""
    from lowbw.train.schemes.registry import advised, family_of, reads

    assert advised() == ("sync", "local", "hierarchical", "diloco")
    assert family_of("sync", {}) is None  # every step a gradient average: the compressor's family
    assert family_of("local", {"world_period": 4}) == "local" and family_of("noloco", {}) == "noloco"
    assert family_of("diloco", {"diloco_fragments": 1}) == "diloco"
    assert family_of("diloco", {"diloco_fragments": 4}) == "streaming"
    assert reads("noloco", "outer_lr") and reads("diloco", "outer_lr") and not reads("local", "outer_lr")
    assert reads("local", "world_period") and not reads("sync", "world_period") and not reads("ssp", "world_period")
