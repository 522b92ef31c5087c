"""config/profiles/lm_evidence/campaign.sh end to end on a 6-step grid, as two shards at once: each runs its share
of the sweep, shard 0 widens the grid where the pick sits at its edge (the other shard waits for it and runs its
share of the new points), picks, and both run the tuned seeds; shard 0 adds the runner-up's held-out points, both
run them, shard 0 repicks on the held-out mean and both rerun what changed; where the kept lr is the end of those
tried, shard 0 adds one point beyond it, both run it and shard 0 repicks over all; a second call finds everything
done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import MIRROR, needs_corpus

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "config/profiles/lm_evidence/campaign.sh"

CONFIG = """seeds: [0]
clock_calibration: {clock}
train_defaults: {train}
methods:
  dense: &dense {{compressor: none, lr: 0.004, lr_min: 0.0004}}
  dense+lrx0.5: {{<<: *dense, lr: 0.002, lr_min: 0.0002}}
  dense+lrx2: {{<<: *dense, lr: 0.008, lr_min: 0.0008}}
  # BEGIN widened: test
  # END widened
  # BEGIN tuned: test
  dense-tuned: {{<<: *dense}}
  # END tuned
  # BEGIN confirm: test
  # END confirm
experiments:
  e9_lmc_curve:
    base: {{steps: 8}}
    seeds: [0]
    grid:
      method: [dense]
  e9_lmc_sweep:
    base: {{}}
    seeds: [0]
    grid:
      method: [dense, dense+lrx0.5, dense+lrx2]
  e9_lmc_confirm:
    base: {{}}
    seeds: [1]
    grid:
      method: []
  e9_lmc:
    base: {{}}
    seeds: [0, 1]
    grid:
      method: [dense-tuned]
"""


@pytest.mark.slow
@needs_corpus
def test_two_shards_sweep_widen_pick_and_train_the_tuned_seeds(tmp_path):
    train = yaml.safe_load((ROOT / "config/lm_evidence.yaml").read_text())["train_defaults"]
    train.update(steps=6, warmup_steps=1, test_limit=8, eval_batch_size=8, log_every=2, eval_every=0.002,
                 targets=[])
    cfg = tmp_path / "lmc.yaml"
    cfg.write_text(CONFIG.format(train=yaml.safe_dump(train, default_flow_style=True, width=10**6).strip(),
                                 clock=ROOT / "config/clock.json"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOWBW_DATA_MIRROR": str(MIRROR), "PYTHON": sys.executable,
           "CONFIG": str(cfg), "WAIT_S": "300", "WIDEN_ROUNDS": "1", "EXTEND_ROUNDS": "1"}
    shards = [subprocess.Popen(["bash", str(SCRIPT)], cwd=tmp_path, env={**env, "SHARD": f"{k}/2"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k in (0, 1)]
    logs = [p.communicate(timeout=600)[0] for p in shards]
    assert [p.returncode for p in shards] == [0, 0], logs
    assert all("campaign complete" in log for log in logs), logs
    c = yaml.safe_load(cfg.read_text())
    sweep = c["experiments"]["e9_lmc_sweep"]["grid"]["method"]
    widened = sweep[3:]  # round 1 added one point beyond the pick's edge (6 steps: the largest lr ends lowest)
    assert len(widened) == 1 and widened[0] in ("dense+lrx4", "dense+lrx0.25"), sweep
    assert widened[0] in c["methods"]
    runs = tmp_path / "runs"
    for point in sweep:
        assert (runs / "e9_lmc_sweep" / f"method~{point}" / "seed~0" / "summary.json").is_file()
    for seed in (0, 1):
        assert (runs / "e9_lmc" / "method~dense-tuned" / f"seed~{seed}" / "summary.json").is_file()
    tuned = c["methods"]["dense-tuned"]
    assert "sweep (seed 0, final val loss)" in cfg.read_text() and tuned["lr"] in (
        c["methods"][p]["lr"] for p in sweep)
    assert (runs / ".lmc_campaign" / "picked").is_file()
    # the held-out check: the runner-up ran on seed 1, and the tuned lr is whichever of the two ended lower there
    assert c["experiments"]["e9_lmc_confirm"]["grid"]["method"][0] == "dense-alt"
    assert (runs / ".lmc_campaign" / "repicked").is_file()
    alt = json.loads((runs / "e9_lmc_confirm/method~dense-alt/seed~1/summary.json").read_text())["final_val_loss"]
    alt_lr = c["methods"]["dense-alt"]["lr"]
    if "dense-pick" in c["methods"]:  # the runner-up won: the old pick's run moved, the winner's copied in
        old = json.loads((runs / "e9_lmc_confirm/method~dense-pick/seed~1/summary.json").read_text())
        assert alt < old["final_val_loss"] and tuned["lr"] == alt_lr
        assert (runs / ".lmc_superseded").is_dir()  # the old pick's seed 0, moved aside and rerun
    else:
        mine = json.loads((runs / "e9_lmc/method~dense-tuned/seed~1/summary.json").read_text())["final_val_loss"]
        assert mine <= alt and tuned["lr"] != alt_lr
    # the kept lr's edge: one point beyond it ran on the held-out seed where the kept lr was the end of those
    # tried (a 4-value grid on 6 steps), and the tuned lr is the lowest of all held-out means
    extended = (runs / ".lmc_campaign" / "extended-1").read_text()
    confirm = c["experiments"]["e9_lmc_confirm"]["grid"]["method"]
    beyond = [p for p in confirm if p.startswith("dense-lrx")]
    assert (" by 0 points" in extended) == (not beyond), (extended, confirm)
    held = {c["methods"][p]["lr"]: json.loads((runs / e / f"method~{p}" / "seed~1" / "summary.json")
                                              .read_text())["final_val_loss"]
            for e, p in [("e9_lmc", "dense-tuned"), *(("e9_lmc_confirm", p) for p in confirm)]}
    assert tuned["lr"] == min(held, key=held.get)
    for seed in (0, 1):
        rc = json.loads((runs / "e9_lmc/method~dense-tuned" / f"seed~{seed}" / "run-config.json").read_text())
        assert rc["lr"] == tuned["lr"] and rc["name"] == "dense-tuned"
    again = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env={**env, "SHARD": "0/1"}, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0 and "start " not in again.stdout, again.stdout
