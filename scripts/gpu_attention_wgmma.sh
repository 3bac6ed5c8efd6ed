#!/usr/bin/env bash
# One device call for the cuda forward's warpgroup-MMA kernel (WGMMA 1, sm_90a): every config against the float64
# reference on odd shapes (attention_cuda_check.py, fp16 and bf16; CHECK=0 skips it), then (SWEEP=1) every forward
# config that fits timed against FA2 and cuDNN, and (AB=1) warpgroup configs in the same rounds
# (attention_wgmma_ab.py: CONFIGS, comma-separated BLOCK_M/BLOCK_N/WARPS/STAGES, outside the space too; DEFINE, a
# define of the source at 0 and 1).                              . .whl/env.sh && scripts/gpu_attention_wgmma.sh
set -uo pipefail
out=${OUT:-/tmp/kz-out}
mkdir -p "$out"
. scripts/gpu_common.sh
rc=0
if [ "${CHECK:-1}" = 1 ]; then
    attention_check $([ "${SWEEP:-0}" = 1 ] && echo --sweep-forward)
    rc=$?
    grep -A 8 '^fwd D=' "$out/check.log" | cut -c1-110
fi
if [ "${AB:-0}" = 1 ] && [ $rc = 0 ]; then
    python3 scripts/attention_wgmma_ab.py ${DEFINE:+--define "$DEFINE"} ${CONFIGS:+--configs "$CONFIGS"} \
        > "$out/ab.log" 2> "$out/ab.err"
    echo "attention_wgmma_ab: rc $?"
    grep -v '^  skip' "$out/ab.log"
    grep -v '^  skip' "$out/ab.err" | tail -n 5
fi
