#!/usr/bin/env bash
# The lm_evidence profile's runs in the order that gives a usable grid soonest, one at a time at nice 19, each
# with `python -m lowbw train` into the directory the workflow uses (runs/<experiment>/<point>): the sweep's
# default points, dense's 2400-step curve, the sweep's other points, the pick of each method's values
# (python -m lowbw.report.lmc_sweep pick: rewrites config/lm_evidence.yaml's tuned block), then the tuned seeds. A
# run already complete is skipped (lowbw train does nothing for a complete run of the same config), so the
# script resumes where it stopped. Store the finished runs with
#   python -m lowbw store add --cpu --to paper/measured/lm runs/e9_lmc*/*/seed~*
# Usage (from the repository root): nohup nice -n 19 config/profiles/lm_evidence/campaign.sh > runs/lmc.log 2>&1 &
# SHARD=k/n (default 0/1) runs only every n-th sweep point from the k-th, so n processes share the sweep; the
# shard that finds every sweep point complete when it is done takes a lock, picks, and runs the tuned seeds.
# TUNED_ONLY=1 runs only the tuned seeds at the tuned block's current values (no sweep, no pick), sharded the
# same way: the way to add seeds to e9_lmc after the pick (its seeds: list in config/lm_evidence.yaml).
# SWEEP_ONLY=1 runs the sweep (and dense's long run) and stops before the pick: the way to widen the grid where a
# pick would sit at its edge (add the points to the config, run again) before picking.
set -u
SHARD=${SHARD:-0/1}
K=${SHARD%/*}
N=${SHARD#*/}
CONFIG=config/lm_evidence.yaml
PY=${PYTHON:-python}
export OMP_NUM_THREADS=1

points() {  # the run directories of phase $1 (default | curve | other | tuned), in order
  "$PY" - "$CONFIG" "$1" <<'EOF'
import sys, yaml
from lowbw.workflow.grid import run_dirs
config, phase = yaml.safe_load(open(sys.argv[1])), sys.argv[2]
for d in run_dirs(config):
    exp, point = d.split("/")[1], d.split("/", 2)[2]
    swept = "+" in point  # <method>+lrx<m> | +olr<v> | +om<v>: one knob away from the method's centre
    if {"default": exp == "e9_lmc_sweep" and not swept, "curve": exp == "e9_lmc_curve",
            "other": exp == "e9_lmc_sweep" and swept, "tuned": exp == "e9_lmc"}[phase]:
        print(d)
EOF
}

train() {  # one run directory
  local d=$1
  if [ -f "$d/summary.json" ]; then echo "done already: $d"; return; fi
  mkdir -p "$d"
  "$PY" - "$CONFIG" "$d" > "$d/run-config.json" <<'EOF' || return
import json, sys, yaml
from lowbw.workflow.grid import decode, run_config
config, d = yaml.safe_load(open(sys.argv[1])), sys.argv[2]
_, exp, rest = d.split("/", 2)
print(json.dumps(run_config(config, exp, decode(rest)), sort_keys=True))
EOF
  echo "$(date -u +%FT%TZ) start $d"
  "$PY" -m lowbw train -c "$d/run-config.json" --out "$d" > "$d/train.log" 2>&1 \
    && echo "$(date -u +%FT%TZ) done $d" || echo "$(date -u +%FT%TZ) FAILED $d (see $d/train.log)"
}

if [ "${TUNED_ONLY:-0}" = 1 ]; then
  i=0
  for d in $(points tuned); do
    if [ $((i % N)) -eq "$K" ]; then train "$d"; fi
    i=$((i + 1))
  done
  echo "$(date -u +%FT%TZ) shard $SHARD: tuned seeds complete"
  exit 0
fi

i=0
for phase in default curve other; do
  for d in $(points $phase); do
    if [ $((i % N)) -eq "$K" ]; then train "$d"; fi
    i=$((i + 1))
  done
done
if [ "${SWEEP_ONLY:-0}" = 1 ]; then echo "$(date -u +%FT%TZ) shard $SHARD: sweep complete"; exit 0; fi
for phase in default curve other; do
  for d in $(points $phase); do
    if [ ! -f "$d/summary.json" ]; then echo "shard $SHARD done; $d not yet complete: another shard picks"; exit 0; fi
  done
done
mkdir runs/.lmc_pick.lock 2>/dev/null || { echo "shard $SHARD: another shard picks"; exit 0; }
"$PY" -m lowbw.report.lmc_sweep pick --config "$CONFIG" --runs runs || { echo "pick failed"; exit 1; }
for d in $(points tuned); do train "$d"; done
rmdir runs/.lmc_pick.lock
echo "$(date -u +%FT%TZ) campaign complete"
