#!/usr/bin/env bash
# The language model on a lent GPU, in one bounded call: gpt-medium at nanoGPT's GPU recipe
# (examples/gpu/gpt_medium.yaml: dropout 0.2, 5,000 steps; nanoGPT's 1.47) under the methods (dense,
# DiLoCo H=50 and H=500, SparseLoCo, PowerSGD rank 4) x seeds 0-2, the cells the store lacks, as many at once as
# fit (examples/gpu/lend.py), the finished ones kept in the repository's GPU store; then the CUDA/NCCL checks.
#
#   LOWBW_GIT_COMMIT=<hash> examples/gpu/lm_evidence.sh OUTDIR [TRAIN_S [PARALLEL]]   (from the repository root)
#   LEND_CPU=1 examples/gpu/lm_evidence.sh OUTDIR 120 2     (a CPU rehearsal: gpt-tiny, 40 steps, the store under
#                                                             OUTDIR/store_cpu; tests/workflow/test_gpu_lend.py)
# TRAIN_S (default 420): seconds for the training runs; PARALLEL (default 0): runs at once, 0 = as many as the
# estimate below lets finish (a run projected past TRAIN_S is stopped while others share the GPU, and at TRAIN_S
# every run still going is stopped: a run that does not finish is not stored). LOWBW_DATA_MIRROR must hold
# tinyshakespeare.txt (default ./shared/data: copy /work/shared/data/tinyshakespeare.txt there, as the device
# machine reaches nothing outside the checkout); LOWBW_GIT_COMMIT names the commit of a tree sent without .git.
# Writes OUTDIR/logs.txt, OUTDIR/lend.json (every cell: stored, stopped, skipped, with its steps and rate),
# OUTDIR/cuda.json, OUTDIR/store.tgz (paper/measured/gpu with the new runs: untar it in the checkout, commit).
# From a session with a lent GPU: in the checkout, `mkdir -p shared/data && cp /work/shared/data/tinyshakespeare.txt
# shared/data/ && echo /shared/ >>.git/info/exclude`; then the device tool's run with
#   command: LOWBW_GIT_COMMIT=$(git rev-parse HEAD, written out) examples/gpu/lm_evidence.sh $OUT/lend 420
#   timeout_s: 580
# and, back here, `tar xzf <files_at>/lend/store.tgz` in the checkout, `python -m lowbw store list`, commit.
#
# Sizing (one lend: 15 minutes of device time, machine start included; one call at most 600 s). Measured on one
# H200 (paper/measured/gpu/gpu_lm: gpt-medium, 4 simulated workers x 16 windows, no dropout, 2,000 steps, t_wall):
#   top-k 1% alone 136 s                     -> 0.068 s/step for one run alone
#   dense + DiLoCo H=50 at once 184 s each   -> 0.092 s/step each with two sharing the GPU
#   dense with four at once 269 s            -> 0.1345 s/step each; PowerSGD rank 4 418 s there: 1.55x dense
# At 5,000 steps with dropout (assumed 1.1x: three dropout layers per block), + 30 s start and 21 evaluations:
#   one run alone        5000 x 0.068 x 1.1 + 30 = 404 s   fits TRAIN_S 420
#   two at once          5000 x 0.092 x 1.1 + 30 = 536 s   needs TRAIN_S ~545: only without the CUDA checks
#                        (BENCH_S=0 ... OUTDIR 545 2, timeout_s 600: ~575 s; a run projected late is stopped)
#   PowerSGD alone       5000 x 0.068 x 1.55 x 1.1 + 30 = 610 s   fits no call: skipped, saying so
#   the grid             4 methods x 3 seeds = 12 lends at one run each (+ PowerSGD's 3, which need ~610 s)
# One call: the CUDA dropout check ~15 s + TRAIN_S + the CUDA checks (BENCH_S, default 90; written only if they
# finish) + storing ~10 s = ~535 s at TRAIN_S 420; give the run tool timeout_s 580. After a start of ~3 minutes
# ~2 of the 15 remain: a call that fails at once (no corpus, say) can be rerun on the warm machine with a smaller
# TRAIN_S, a full second call cannot (lend.json's measured rates size the next lend: replace SHARED_STEP_S).
# Successive lends accumulate: each runs the first cells (seed-major: every method's seed 0 first) not yet in
# paper/measured/gpu/e9_gpu_lm, so commit OUTDIR/store.tgz's runs after every lend.
set -uo pipefail
out=${1:?usage: lm_evidence.sh OUTDIR [TRAIN_S [PARALLEL]]}
train_s=${2:-420}
parallel=${3:-0}
bench_s=${BENCH_S:-90}
py=${PY:-python3}
export LOWBW_DATA_MIRROR=${LOWBW_DATA_MIRROR:-$PWD/shared/data}
mkdir -p "$out"
log="$out/logs.txt"
if [ -n "${LEND_CPU:-}" ]; then
  cpu=(--cpu --poll-s 2); store="$out/store_cpu"; bench=(--device cpu --worlds gloo:2 --time-mb 1 --reps 1)
else
  cpu=(); store=paper/measured/gpu; bench=(--worlds nccl:1 gloo:2)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >>"$log" 2>&1
fi
{ date -u; $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  echo "commit ${LOWBW_GIT_COMMIT:-(from .git)}; data mirror $LOWBW_DATA_MIRROR"; } >>"$log" 2>&1
if [ ! -s "$LOWBW_DATA_MIRROR/tinyshakespeare.txt" ]; then
  echo "no tinyshakespeare.txt in LOWBW_DATA_MIRROR=$LOWBW_DATA_MIRROR" | tee -a "$log" >&2
  exit 2
fi

# each worker's dropout masks on CUDA as on the CPU (tests/train/test_dropout.py's CUDA case, ~15 s): a failure
# stops here, before runs that sim and procs would not reproduce are stored
if [ -z "${LEND_CPU:-}" ] && $py -c "import pytest" 2>/dev/null; then
  timeout 90 $py -m pytest -q -p no:cacheprovider tests/train/test_dropout.py -k "own_process and cuda" >>"$log" 2>&1
  rc=$?
  echo "cuda dropout check exit $rc" >>"$log"
  if [ "$rc" = 1 ]; then tail -n 40 "$log"; exit 1; fi
fi

# the training runs (lend.py bounds them by TRAIN_S itself; the outer timeout guards lend.py)
timeout $((train_s + 60)) $py examples/gpu/lend.py "$out" --train-s "$train_s" --parallel "$parallel" \
  "${cpu[@]}" >>"$log" 2>&1
echo "lend.py exit $?" >>"$log"
# each run's output into the log (the device tool brings back at most 8 files)
for f in "$out"/run_*.txt; do [ -e "$f" ] && { echo "== $f"; tail -c 1500 "$f"; echo; } >>"$log" && rm -f "$f"; done

# the CUDA/NCCL checks (lowbw.bench.cuda), after the runs so that they measure an idle GPU
if [ "$bench_s" -gt 0 ]; then
  timeout "$bench_s" $py -m lowbw.bench.cuda "${bench[@]}" --out "$out/cuda.json" >>"$log" 2>&1
  echo "bench.cuda exit $?" >>"$log"
fi
[ -d "$store" ] && tar czf "$out/store.tgz" "$store"
date -u >>"$log"
tail -n 30 "$log"
