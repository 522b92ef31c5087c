#!/usr/bin/env bash
# The lm_evidence profile's runs in the order that gives a usable grid soonest, one at a time at nice 19, each with
# `python -m lowbw train` into the directory the workflow uses (runs/<experiment>/<point>): the sweep's centre
# points, dense's long run, the sweep's other points; then, up to WIDEN_ROUNDS times (default 2), the points beyond
# each pick at the edge of its grid (python -m lowbw.report.lmc_sweep widen: the config's widened block and the
# sweep's grid); then each method's one-knob picks combined, where no point ran them (lmc_sweep joint: one more
# sweep point); then the pick of each method's values, its best point (python -m lowbw.report.lmc_sweep pick:
# rewrites config/lm_evidence.yaml's tuned block; the tuned seed 0 is that point's run), then the tuned seeds; then
# each inner-lr pick's check on the held-out seeds (lmc_sweep confirm: the runner-up's points, e9_lmc_confirm), the
# repick on their mean (lmc_sweep repick: rewrites the tuned block, moves runs to match) and the tuned runs whose
# values changed; then, up to EXTEND_ROUNDS times (default 2), each kept inner lr at the edge of those tried one
# step beyond on the held-out seeds (lmc_sweep extend), and the repick over all of them; then e9_lmc_workers at the
# final values. A run already complete at the config's current values is skipped, so the script resumes where it
# stopped; one whose values changed is moved to runs/.lmc_superseded/ and run again. Store the finished runs with
#   python -m lowbw store add --cpu --to paper/measured/lm runs/e9_lmc*/*/seed~*
# Usage (from the repository root): nohup nice -n 19 config/profiles/lm_evidence/campaign.sh > runs/lmc.log 2>&1 &
# SHARD=k/n (default 0/1) runs only every n-th point of each phase from the k-th, so n processes share the work;
# between phases each shard waits for the others' points (at most WAIT_S seconds, default 4 h), and shard 0
# alone widens and picks (runs/.lmc_campaign/ records each step done, so a resumed campaign does not repeat it).
# TUNED_ONLY=1 runs only the tuned seeds (and e9_lmc_workers) at the tuned block's current values (no sweep, no
# pick), sharded the same way: the way to add seeds to e9_lmc after the pick (its seeds: list in
# config/lm_evidence.yaml).
# SWEEP_ONLY=1 runs the sweep's current points (and dense's long run) and stops: no widening, no pick.
set -u
SHARD=${SHARD:-0/1}
WIDEN_ROUNDS=${WIDEN_ROUNDS:-2}
EXTEND_ROUNDS=${EXTEND_ROUNDS:-2}
WAIT_S=${WAIT_S:-14400}
MARK=runs/.lmc_campaign
K=${SHARD%/*}
N=${SHARD#*/}
CONFIG=${CONFIG:-config/lm_evidence.yaml}
PY=${PYTHON:-python}
export OMP_NUM_THREADS=1

points() {  # the run directories of phase $1 (default | curve | other | tuned | confirm | workers), in order
  "$PY" - "$CONFIG" "$1" <<'EOF'
import sys, yaml
from lowbw.workflow.grid import run_dirs
config, phase = yaml.safe_load(open(sys.argv[1])), sys.argv[2]
for d in run_dirs(config):
    exp, point = d.split("/")[1], d.split("/", 2)[2]
    swept = "+" in point  # <method>+lrx<m> | +olr<v> | +om<v>: one knob away from the method's centre
    if {"default": exp == "e9_lmc_sweep" and not swept, "curve": exp == "e9_lmc_curve",
            "other": exp == "e9_lmc_sweep" and swept, "tuned": exp == "e9_lmc",
            "confirm": exp == "e9_lmc_confirm", "workers": exp == "e9_lmc_workers"}[phase]:
        print(d)
EOF
}

train() {  # one run directory
  local d=$1
  if [ -f "$d/summary.json" ]; then echo "done already: $d"; return; fi
  mkdir -p "$d"
  rm -f "$d/FAILED"
  "$PY" - "$CONFIG" "$d" > "$d/run-config.json" <<'EOF' || return
import json, sys, yaml
from lowbw.workflow.grid import decode, run_config
config, d = yaml.safe_load(open(sys.argv[1])), sys.argv[2]
_, exp, rest = d.split("/", 2)
print(json.dumps(run_config(config, exp, decode(rest)), sort_keys=True))
EOF
  echo "$(date -u +%FT%TZ) start $d"
  "$PY" -m lowbw train -c "$d/run-config.json" --out "$d" > "$d/train.log" 2>&1 \
    && echo "$(date -u +%FT%TZ) done $d" \
    || { touch "$d/FAILED"; echo "$(date -u +%FT%TZ) FAILED $d (see $d/train.log)"; }
}

supersede() {  # move each complete run of the phases "$@" whose run-config.json is not what the config now asks
  # to runs/.lmc_superseded/<its path>.<time> (a shard that finds it already moved leaves it; a run without one,
  # restored from a store, is kept)
  "$PY" - "$CONFIG" "$@" <<'EOF'
import datetime, json, os, sys, yaml
from pathlib import Path
from lowbw.workflow.grid import decode, run_config, run_dirs
config, phases = yaml.safe_load(open(sys.argv[1])), set(sys.argv[2:])
exps = {"tuned": "e9_lmc", "confirm": "e9_lmc_confirm", "curve": "e9_lmc_curve", "workers": "e9_lmc_workers"}
stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S") + f".{os.getpid()}"
for d in run_dirs(config):
    _, exp, rest = d.split("/", 2)
    run = Path(d)
    if exp not in {exps[p] for p in phases if p in exps} or not (run / "summary.json").is_file():
        continue
    if not (run / "run-config.json").is_file():  # restored from a store (which keeps config.json): kept
        continue
    try:
        have = json.loads((run / "run-config.json").read_text())
    except ValueError:
        have = None
    if have != run_config(config, exp, decode(rest)):
        old = Path("runs/.lmc_superseded") / f"{d.removeprefix('runs/')}.{stamp}"
        old.parent.mkdir(parents=True, exist_ok=True)
        try:
            run.rename(old)
            print(f"superseded {d} (its values changed): moved to {old}")
        except FileNotFoundError:
            pass
EOF
}

shard() {  # this shard's share of the phases "$@"
  local i=0 phase d
  supersede "$@"
  for phase in "$@"; do
    for d in $(points "$phase"); do
      if [ $((i % N)) -eq "$K" ]; then train "$d"; fi
      i=$((i + 1))
    done
  done
}

wait_for() {  # until every run of the phases "$@" has ended (complete, or FAILED: a rerun of the script retries
  # it), however many of them another shard still runs, or WAIT_S
  local waited=0 phase d missing
  while :; do
    missing=0
    for phase in "$@"; do
      for d in $(points "$phase"); do [ -f "$d/summary.json" ] || [ -f "$d/FAILED" ] || { missing=1; break 2; }; done
    done
    [ "$missing" = 0 ] && return 0
    if [ "$waited" -ge "$WAIT_S" ]; then echo "shard $SHARD: gave up after ${WAIT_S}s waiting for $d"; return 1; fi
    sleep 30
    waited=$((waited + 30))
  done
}

wait_mark() {  # until shard 0 has written the step mark $1, or it gave up (the mark abort), or WAIT_S
  local waited=0
  until [ -e "$MARK/$1" ]; do
    if [ -e "$MARK/abort" ]; then echo "shard $SHARD: shard 0 gave up: $(cat "$MARK/abort")"; return 1; fi
    if [ "$waited" -ge "$WAIT_S" ]; then echo "shard $SHARD: gave up after ${WAIT_S}s waiting for $MARK/$1"; return 1; fi
    sleep 30
    waited=$((waited + 30))
  done
}

abort() {  # shard 0 gives up: say why, and let the other shards stop waiting for it
  echo "$1" | tee "$MARK/abort"
  exit 1
}

once() {  # shard 0 runs `python -m lowbw.report.lmc_sweep $2` unless the step's mark $MARK/$1 exists, and keeps
  # its output as that mark (abort if it fails); every shard then waits for the mark
  local mark=$1 cmd=$2 out
  if [ "$K" -eq 0 ] && [ ! -e "$MARK/$mark" ]; then
    out=$("$PY" -m lowbw.report.lmc_sweep "$cmd" --config "$CONFIG" --runs runs 2>&1) \
      || abort "$cmd failed: $(echo "$out" | tail -1)"
    echo "$out" > "$MARK/$mark.tmp" && mv "$MARK/$mark.tmp" "$MARK/$mark"
    echo "$(date -u +%FT%TZ) $mark: $(echo "$out" | head -1) (all of it in $MARK/$mark)"
  fi
  wait_mark "$mark"
}

mkdir -p "$MARK"
if [ "$K" -eq 0 ]; then rm -f "$MARK/abort"; fi
if [ "${TUNED_ONLY:-0}" = 1 ]; then
  shard tuned workers
  echo "$(date -u +%FT%TZ) shard $SHARD: tuned seeds complete"
  exit 0
fi

shard default curve other
if [ "${SWEEP_ONLY:-0}" = 1 ]; then echo "$(date -u +%FT%TZ) shard $SHARD: sweep complete"; exit 0; fi
for round in $(seq 1 "$WIDEN_ROUNDS"); do
  wait_for default curve other || exit 1
  once "widened-$round" widen || exit 1
  grep -q " by 0 points" "$MARK/widened-$round" && break
  shard other
done
wait_for default curve other || exit 1
# the one-knob picks combined, where no point ran them: one more point of the sweep
once joint joint || exit 1
shard other
wait_for default curve other || exit 1
once picked pick || exit 1
shard tuned
wait_for tuned || exit 1
# each inner-lr pick against its runner-up on the held-out seeds, then the tuned runs whose values changed
once confirm confirm || exit 1
shard tuned confirm
wait_for confirm tuned || exit 1
once repicked repick || exit 1
shard tuned confirm
wait_for tuned confirm || exit 1
# up to EXTEND_ROUNDS times: each kept inner lr at the edge of those tried, one point beyond it on the held-out
# seeds, the repick over every inner lr they ran, and the tuned runs whose values changed
for round in $(seq 1 "$EXTEND_ROUNDS"); do
  once "extended-$round" extend || exit 1
  grep -q " by 0 points" "$MARK/extended-$round" && break
  shard confirm
  wait_for confirm || exit 1
  once "repicked-extended-$round" repick || exit 1
  shard tuned confirm
  wait_for tuned confirm || exit 1
done
# the tuned values' other runs (e9_lmc_workers: two workers instead of four), once the values are final
shard workers
wait_for workers || exit 1
echo "$(date -u +%FT%TZ) shard $SHARD: campaign complete"
