#!/usr/bin/env bash
# The whole test suite on a CUDA machine, every plugin executing for real, and a one-line
# summary. On the lent GPU: `. .whl/env.sh && scripts/gpu_check.sh` (logs under $OUT).
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
kernelzoo list | tee "$out/list.txt"
python3 -m pytest -p no:cacheprovider "$@" 2>&1 | tee "$out/pytest.txt"
status=${PIPESTATUS[0]}
echo "gpu_check: $(tail -n 1 "$out/pytest.txt") [$(head -n 1 "$out/versions.txt")]"
exit "$status"
