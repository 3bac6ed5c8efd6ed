#!/usr/bin/env bash
# One device call after a change to the cuda attention kernels: the benchmark against SDPA's backends with the
# shipped winners (scripts/attention_bench.py, interleaved rounds), then memcheck over the odd shapes and
# racecheck over the backward's (scripts/attention_sanitize.py; SANITIZE=0 skips them). Logs under $OUT.
#     . .whl/env.sh && scripts/gpu_attention_verify.sh
set -uo pipefail
out=${OUT:-/tmp/kernelzoo-attention-verify}
mkdir -p "$out"
export KERNELZOO_DB="sqlite:///$out/tuning.db"  # fresh: the shipped winners are imported at the first call
timeout "${BENCH_TIMEOUT:-300}" python3 scripts/attention_bench.py --winners tuning_db/h100-sxm.json ${BENCH_ARGS:-} \
    --out "$out/bench" > "$out/bench.txt" 2>&1
echo "bench rc=$?"
if [ "${SANITIZE:-1}" = 1 ]; then
    sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "${MEMCHECK_TIMEOUT:-170}" "$sanitizer" --tool memcheck \
        python3 scripts/attention_sanitize.py > "$out/memcheck.txt" 2>&1
    echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|done' "$out/memcheck.txt" | tr '\n' ' ')"
    timeout "${RACECHECK_TIMEOUT:-110}" "$sanitizer" --tool racecheck python3 scripts/attention_sanitize.py --backward-only \
        > "$out/racecheck.txt" 2>&1
    echo "racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|done' "$out/racecheck.txt" | tr '\n' ' ')"
fi
tail -n 36 "$out/bench.txt"
