#!/usr/bin/env bash
# The language model on a lent GPU, in one bounded call: the CUDA/NCCL checks, then gpt-medium (nanoGPT's GPU
# configuration, examples/gpu/gpt_medium.yaml) under four schemes at once on the one GPU, each kept in the
# repository's GPU store. Every process is bounded by `timeout`; a run that does not finish is not stored.
#
#   examples/gpu/lm_evidence.sh OUTDIR [SECONDS]     (from the repository root; LOWBW_DATA_MIRROR must hold
#                                                     tinyshakespeare.txt)
# Writes OUTDIR/cuda.json, OUTDIR/store.tgz (paper/measured/gpu's new runs), OUTDIR/logs.txt.
set -uo pipefail
out=${1:?usage: lm_evidence.sh OUTDIR [SECONDS]}
budget=${2:-420}
mkdir -p "$out"
log="$out/logs.txt"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c \
  "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"; } \
  >"$log" 2>&1

# each method: run-config overrides separated by ';'
declare -A method=(
  [dense]="compressor=none"
  [diloco50]="sync=diloco;world_period=50;outer_lr=0.7;outer_momentum=0.9"
  [powersgd4]="compressor=powersgd;compressor_args={rank: 4}"
  [topk1]="compressor=topk;compressor_args={ratio: 0.01};error_feedback=on"
)
pids=()
for m in "${!method[@]}"; do
  sets=()
  IFS=';' read -ra kv <<<"${method[$m]}"
  for x in "${kv[@]}"; do sets+=(--set "$x"); done
  timeout "$budget" python3 -m lowbw train --config examples/gpu/gpt_medium.yaml "${sets[@]}" \
    --set name="$m" --out "runs/gpu_lm/method~$m" >"$out/run_$m.txt" 2>&1 &
  pids+=($!)
done
timeout 180 python3 -m lowbw.bench.cuda --worlds nccl:1 gloo:2 --out "$out/cuda.json" >>"$log" 2>&1
echo "bench.cuda exit $?" >>"$log"
for p in "${pids[@]}"; do wait "$p"; echo "run pid $p exit $?" >>"$log"; done
for m in "${!method[@]}"; do tail -c 600 "$out/run_$m.txt" >>"$log"; echo >>"$log"; rm -f "$out/run_$m.txt"; done
done_runs=(runs/gpu_lm/method~*/summary.json)
if [ -e "${done_runs[0]}" ]; then
  python3 -m lowbw store add "${done_runs[@]%/summary.json}" --to paper/measured/gpu >>"$log" 2>&1
  tar czf "$out/store.tgz" paper/measured/gpu
fi
date -u >>"$log"
