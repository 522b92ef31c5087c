"""RunConfig: unknown keys and impossible combinations are rejected naming the key; the JSON schema agrees."""

from __future__ import annotations

import json

import pytest

from lowbw.train.config import ConfigError, RunConfig, json_schema, keys_help, parse_override


def err(**kw) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict(kw)
    return e.value


def test_defaults_validate_and_round_trip():
    c = RunConfig.from_dict({})
    assert RunConfig.from_dict(c.to_dict()) == c
    assert c.global_batch == 128 and c.local_batch == 32


def test_unknown_key_is_named_with_a_suggestion():
    e = err(wrokers=4)
    assert e.key == "wrokers" and "workers" in str(e)


@pytest.mark.parametrize("kw,key", [
    ({"workers": 3}, "batch_size"),                                  # 128 not divisible by 3
    ({"batch_size": 0, "local_batch_size": 0, "workers": 0}, "workers"),
    ({"lr": 0}, "lr"),
    ({"local_batch_size": -1}, "local_batch_size"),
    ({"sync": "hierarchical", "households": 3, "workers": 4}, "households"),
    ({"sync": "hierarchical", "households": 4, "household_shards": 3, "workers": 8, "assignment": "household"},
     "household_shards"),
    ({"assignment": "coarse", "shards": 3, "workers": 4}, "shards"),
    ({"assignment": "fine", "copies": 5, "workers": 4}, "copies"),
    ({"sync": "ssp", "backend": "procs"}, "backend"),
    ({"ddp_hook": True}, "ddp_hook"),
    ({"compressor": "topk", "compressor_args": {"ratio": 2.0}}, "compressor_args"),
    ({"compressor": "nosuch"}, "compressor"),
    ({"model": "resnet21"}, "model"),
    ({"dataset": "imagenet22k"}, "dataset"),
    ({"collective": "carrier-pigeon"}, "collective"),
    ({"sync": "local", "compressor": "topk", "world_period": 4}, "compressor"),
    ({"sync": "sync", "world_period": 4}, "world_period"),
    ({"lr_milestones": [0.75, 0.5]}, "lr_milestones"),
    ({"targets": [1.5]}, "targets"),
    ({"effective_batch_size": 128}, "effective_batch_size"),
    ({"dynamic_batch": "text", "dynamic_batch_max": 64}, "dynamic_batch_max"),
    ({"optimizer": "sgdd"}, "optimizer"),
    ({"epochs": "ten"}, "epochs"),
    ({"progress": "maybe"}, "progress"),
    ({"clock": "model"}, "clock_sample_s"),
    ({"worker_speeds": [1.0, 2.0]}, "worker_speeds"),
])
def test_bad_values_and_combinations_name_the_key(kw, key):
    assert err(**kw).key == key


def test_household_local_batch_is_the_thesis_formula():
    # thesis E3.2.2, footnote: H = 8, L_W = 128, B_e = 128, M = 16 -> B_local = 61
    c = RunConfig.from_dict({"sync": "hierarchical", "workers": 16, "households": 8, "world_period": 128,
                             "effective_batch_size": 128})
    assert c.local_batch == 61
    c = RunConfig.from_dict({"sync": "hierarchical", "workers": 16, "households": 2, "world_period": 2,
                             "effective_batch_size": 128})
    assert c.local_batch == round(128 * 2 * 2 / (16 * 3))


def test_overlap_epochs_and_copies():
    c = RunConfig.from_dict({"workers": 16, "batch_size": 128, "assignment": "full", "epochs": 182})
    assert c.copies_per_sample == 16 and c.overlap_epochs == 12  # ceil(182/16)
    assert c.total_samples(45000) == 12 * 45000 * 16
    c = RunConfig.from_dict({"workers": 16, "batch_size": 128, "assignment": "coarse", "shards": 2, "epochs": 182})
    assert c.copies_per_sample == 8 and c.overlap_epochs == 23
    c = RunConfig.from_dict({"workers": 16, "batch_size": 128, "epochs": 182})
    assert c.total_samples(45000) == 182 * 45000
    assert c.derived(45000)["total_steps"] == 63985  # ~64k iterations, as the thesis' baseline


def test_linear_scaling_peak_lr():
    c = RunConfig.from_dict({"lr": 0.1, "batch_size": 512, "lr_scaling": "linear", "base_batch_size": 128})
    assert c.lr_target() == pytest.approx(0.4)


def test_json_schema_accepts_defaults_and_rejects_unknown_keys():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json_schema()
    json.dumps(schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    assert not list(v.iter_errors(RunConfig().to_dict()))
    assert list(v.iter_errors({"wrokers": 4}))
    assert list(v.iter_errors({"sync": "sometimes"}))
    assert list(v.iter_errors({"workers": 0}))
    assert set(schema["properties"]) == set(RunConfig.keys())


def test_help_documents_every_key_with_its_default():
    h = keys_help()
    for k in RunConfig.keys():  # noqa: SIM118 (a classmethod, not a dict)
        assert f"  {k} = " in h


def test_parse_override_parses_yaml_values():
    assert parse_override("lr=0.1") == ("lr", 0.1)
    assert parse_override("targets=[0.5, 0.6]") == ("targets", [0.5, 0.6])
    assert parse_override("compressor_args={ratio: 0.01}") == ("compressor_args", {"ratio": 0.01})
    assert parse_override("ddp_hook=true") == ("ddp_hook", True)


def test_yaml_strings_of_numbers_are_accepted():
    # YAML 1.1 (PyYAML) reads 1e-3 as a string; --set lr=1e-3 must still work
    k, v = parse_override("lr=1e-3")
    assert RunConfig.from_dict({k: v}).lr == 0.001
    assert err(steps="5.5").key == "steps"


def test_bad_compressor_argument_blames_compressor_args_and_integers_read_right():
    from lowbw.train.config import ConfigError, RunConfig

    with pytest.raises(ConfigError, match="unknown parameter 'bogus'") as ei:
        RunConfig.from_dict({"compressor": "topk", "compressor_args": {"bogus": 1}})
    assert ei.value.key == "compressor_args"
    with pytest.raises(ConfigError, match="expected an integer, got 'abc'"):
        RunConfig.from_dict({"workers": "abc"})
