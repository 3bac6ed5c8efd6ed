#!/usr/bin/env bash
# mytorch's training step on a CUDA machine, with winners tuned earlier: the step benchmark at the
# issue's size and at a tiny size (where kernels take no time: the host's cost per step), the
# profile, and the GPU checks of what the step's speed work touched. TUNED_DB names a tuning
# database exported by scripts/gpu_mytorch_tune.sh (copied, so the original stays as it was).
# On the lent GPU: `. .whl/env.sh && TUNED_DB=.kz/mytorch_tuning.db scripts/gpu_mytorch_step.sh`.
set -uo pipefail
out=${OUT:-/tmp/kernelzoo-gpu-mytorch-step}
mkdir -p "$out"
if [ -n "${TUNED_DB:-}" ]; then
    cp "$TUNED_DB" "$out/tuning.db" && export KERNELZOO_DB="sqlite:///$out/tuning.db"
fi
. "$(dirname "$0")/gpu_common.sh"  # run NAME COMMAND...
run checks python3 -m pytest -p no:cacheprovider -q -n 8 tests/test_conformance.py tests/test_mytorch_nn.py \
    tests/test_mytorch_functions.py tests/test_registry.py \
    -k "${CHECK_FILTER:-packed or attention or cross_entropy or embedding or adam or value_range or reuses or unbind}"
run step python3 scripts/mytorch_bench.py
run step-tiny python3 scripts/mytorch_bench.py --batch 1 --length 16 --dim 64 --heads 4 --vocab 64
run profile python3 scripts/mytorch_profile.py --out "$out"
run profile-tiny python3 scripts/mytorch_profile.py --out "$out" --size 64 1 16 64 4 --tag=-tiny
tail -n 2 "$out/profile.txt" "$out/profile-tiny.txt" >> "$out/summary.txt"
cat "$out/summary.txt"
bundle_logs
exit "$status"
