import pytest

from lowbw.train.config import ConfigError
from lowbw.workflow.grid import decode, encode, expand, run_config, run_dirs, validate_grid


def test_encode_decode_round_trip():
    p = {"compressor": "topk", "ratio": 0.01, "mbit": 10.0, "ef": True, "seed": 2}
    path = encode(p)
    assert path == "compressor~topk/ratio~0.01/mbit~10/ef~true/seed~2"
    assert decode(path) == {"compressor": "topk", "ratio": 0.01, "mbit": 10, "ef": True, "seed": 2}


def test_unsafe_values_are_rejected_by_name():
    with pytest.raises(ValueError, match="a/b"):
        encode({"x": "a/b"})
    with pytest.raises(ValueError, match="key~value"):
        decode("noseparator")


def test_expand_is_product_times_seeds_seed_last():
    runs = expand({"base": {}, "grid": {"a": [1, 2], "b": ["x"]}}, seeds=[0, 1])
    assert runs == [{"a": 1, "b": "x", "seed": 0}, {"a": 1, "b": "x", "seed": 1},
                    {"a": 2, "b": "x", "seed": 0}, {"a": 2, "b": "x", "seed": 1}]
    assert expand({"base": {}, "seeds": [7]}, seeds=[0, 1]) == [{"seed": 7}]


def test_run_config_layers_and_dirs():
    cfg = {"seeds": [0], "train_defaults": {"lr": 0.1, "model": "mlp"},
           "experiments": {"e4_x": {"base": {"model": "cnn"}, "grid": {"lr": [0.2]}}}}
    assert run_config(cfg, "e4_x", {"lr": 0.2, "seed": 0}) == {"lr": 0.2, "model": "cnn", "seed": 0}
    assert run_dirs(cfg) == ["runs/e4_x/lr~0.2/seed~0"]
    with pytest.raises(ValueError, match="e9"):
        run_config(cfg, "e9", {})


def test_method_presets_expand_in_place():
    cfg = {"seeds": [0], "methods": {"topk1": {"compressor": "topk", "compressor_args": {"ratio": 0.01}}},
           "experiments": {"e4_x": {"base": {"compressor": "none", "lr": 0.1}, "grid": {"method": ["topk1"]}}}}
    rc = run_config(cfg, "e4_x", {"method": "topk1", "seed": 1})
    assert rc == {"compressor": "topk", "compressor_args": {"ratio": 0.01}, "lr": 0.1, "name": "topk1", "seed": 1}
    with pytest.raises(ValueError, match="nope"):
        run_config(cfg, "e4_x", {"method": "nope"})


def test_validate_grid_names_experiment_and_key():
    cfg = {"seeds": [0, 1], "train_defaults": {"dataset": "synthetic"},
           "experiments": {"e9_ok": {"base": {"workers": 2}, "grid": {"compressor": ["none", "topk"]}}}}
    assert validate_grid(cfg) == 4
    cfg["experiments"]["e9_bad"] = {"base": {"workers": 3}}
    with pytest.raises(ConfigError) as e:
        validate_grid(cfg)
    assert e.value.key == "batch_size" and "e9_bad" in str(e.value)
