#!/usr/bin/env bash
# One device call: the warpgroup forward's K and V tiles by TMA from the producer warp's first thread (PRODUCER 2;
# its A/B of 2026-11-27 is in docs/perf/attention-cuda.md, "TMA loads"). First the backend's TMA round trip (a box lands swizzled,
# zero-filled past the tensor), then the odd-shape checks against float64 (attention_cuda_check.py: two PRODUCER 2
# configs among the forward's), then PRODUCER 2 against 1 and against 0 in the same rounds (attention_wgmma_ab.py).
#     . .whl/env.sh && scripts/gpu_attention_tma.sh
set -uo pipefail
out=${OUT:-/tmp/kz-out}
mkdir -p "$out"
python3 -m pytest -p no:cacheprovider -q tests/test_cuda_backend.py -k tensor_map > "$out/tma_test.log" 2>&1
echo "tensor map tests: rc $?: $(tail -n 1 "$out/tma_test.log")"
. scripts/gpu_common.sh
attention_check || exit 1
python3 scripts/attention_wgmma_ab.py --define PRODUCER=1,2 --configs 64/128/4/2,64/64/4/2,128/128/8/3,128/64/8/3 \
    > "$out/ab_1_2.log" 2> "$out/ab_1_2.err"
echo "PRODUCER 1 -> 2: rc $?"; grep '^|\|MISMATCH' "$out/ab_1_2.log"
python3 scripts/attention_wgmma_ab.py --define PRODUCER=0,2 --configs 64/128/4/2,128/128/8/3 \
    > "$out/ab_0_2.log" 2> "$out/ab_0_2.err"
echo "PRODUCER 0 -> 2: rc $?"; grep '^|\|MISMATCH' "$out/ab_0_2.log"
