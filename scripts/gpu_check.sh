#!/usr/bin/env bash
# The whole test suite on a CUDA machine, every plugin executing for real, and a short summary:
#   scripts/gpu_check.sh [pytest args]            (logs under $OUT, default /tmp/kernelzoo-gpu-check)
# Each result is logged by name as it happens (-v), so a run stopped by a time limit still says which cases
# failed; the summary prints them, then pytest's last line. LIMIT=SECONDS stops pytest after that long
# (default: no limit). The suite splits in two halves that each take a few minutes with -n 15:
# `-n 15 tests/test_conformance.py -k cuda` and `-n 15 tests -k "not (test_conformance and cuda)"`.
set -uo pipefail
out=${OUT:-/tmp/kernelzoo-gpu-check}
mkdir -p "$out"
python3 - <<'PY' | tee "$out/versions.txt"
import platform, torch, triton
from kernelzoo.backends import cuda
print(f"device: {torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))}), "
      f"python {platform.python_version()}, torch {torch.__version__}, triton {triton.__version__}, "
      f"nvrtc {'.'.join(map(str, cuda.nvrtc_version()))}")
PY
kernelzoo list > "$out/list.txt"
limit=()
[ -n "${LIMIT:-}" ] && limit=(timeout "$LIMIT")
"${limit[@]}" python3 -m pytest -p no:cacheprovider -v "$@" > "$out/pytest.txt" 2>&1
status=$?
results=$(grep -cE "(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)( |$)" "$out/pytest.txt")
# the ids of the failed and erroring cases, each once (-v names them as they end; the closing summary again)
grep -oE "(FAILED|ERROR) tests/[^ ]+|tests/[^ ]+ (FAILED|ERROR)" "$out/pytest.txt" | awk '{print ($1 ~ /^tests/) ? $2 " " $1 : $0}' \
    | sort -u | head -n 40
[ "$status" = 124 ] && echo "gpu_check: stopped by LIMIT=$LIMIT after $results results"
echo "gpu_check: $(tail -n 1 "$out/pytest.txt") [$(head -n 1 "$out/versions.txt")]"
exit "$status"
