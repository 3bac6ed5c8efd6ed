#!/usr/bin/env bash
# Tune ops on the GPU for the shipped winners, export them, and re-time the export.
#     . .whl/env.sh && scripts/gpu_tune.sh relu gelu add        # ops as arguments
# TRIALS / MATMUL_TRIALS trials per plugin and key, BUDGET_MS per trial, OP_TIMEOUT seconds per op.
# Writes $OUT/tuned-<first op>.json (the export) and $OUT/tune.log.
set -uo pipefail
out=${OUT:-/tmp/kernelzoo-tune}
mkdir -p "$out"
trials=${TRIALS:-8}
for op in "$@"; do
  trials_op=$trials
  [ "$op" = matmul ] && trials_op=${MATMUL_TRIALS:-12}
  timeout "${OP_TIMEOUT:-3600}" kernelzoo tune --op "$op" --device cuda --plugin triton --plugin cuda --plugin torch \
    --trials "$trials_op" --budget-ms "${BUDGET_MS:-60}" -v --quiet 2>&1 | tee -a "$out/tune.log"
  kernelzoo db export "$out/tuned-$1.json" | tee -a "$out/tune.log"  # after each op: a cut-off run keeps what it did
done
python3 scripts/check_shipped.py "$out/tuned-$1.json" 2>&1 | tee -a "$out/tune.log" | tail -n 40
