#!/usr/bin/env bash
# Attention on a CUDA machine: compute-sanitizer over the cuda kernels on odd shapes, the attention
# conformance suite, `kernelzoo tune` (timed) and the benchmark against SDPA's backends after tuning.
# On the lent GPU: `. .whl/env.sh && scripts/gpu_attention.sh [tune options]` (logs under $OUT).
# CHECKS=0 skips the sanitizer and conformance, TUNE_OPS names the ops to tune (none: ""), SHIPPED=1 starts the
# database from the shipped files (tuning_db/*.json: those of this GPU import); the bench then runs the stored
# configs ($out/tuned.json, an export).
set -uo pipefail
out=${OUT:-/tmp/kernelzoo-gpu-attention}
mkdir -p "$out"
export KERNELZOO_DB=${KERNELZOO_DB:-"sqlite:///$out/tuning.db"}
if [ "${SHIPPED:-0}" = 1 ]; then
    for f in tuning_db/*.json; do kernelzoo db import "$f" | tail -n 1; done
    kernelzoo db prune | tail -n 1
fi
if [ "${CHECKS:-1}" = 1 ]; then
    sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 240 "$sanitizer" --tool memcheck python3 scripts/attention_sanitize.py \
        > "$out/sanitizer.txt" 2>&1
    echo "sanitizer rc=$?: $(grep -E 'ERROR SUMMARY|done' "$out/sanitizer.txt" | tr '\n' ' ')"
    timeout 300 python3 -m pytest -p no:cacheprovider -q -n 8 tests/test_conformance.py -k "${CONFORMANCE_K:-attention and cuda}" \
        > "$out/conformance.txt" 2>&1
    echo "conformance: $(tail -n 1 "$out/conformance.txt")"
fi
for op in ${TUNE_OPS-attention attention_backward}; do
    start=$SECONDS
    timeout "${TUNE_TIMEOUT:-200}" kernelzoo tune --op "$op" -v --quiet "$@" > "$out/tune-$op.txt" 2>&1
    echo "kernelzoo tune --op $op $*: rc=$? in $((SECONDS - start)) s"
done
kernelzoo show --json > "$out/winners.json" 2>/dev/null
kernelzoo db export "$out/tuned.json" | tail -n 1
[ "${BENCH:-1}" = 1 ] || exit 0
timeout "${BENCH_TIMEOUT:-240}" python3 scripts/attention_bench.py --winners "$out/tuned.json" ${BENCH_ARGS:-} --out "$out/bench" > "$out/bench.txt" 2>&1
echo "bench rc=$?"
tail -n 36 "$out/bench.txt"
