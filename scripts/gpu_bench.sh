#!/usr/bin/env bash
# Every op's benchmarks on a CUDA machine in one go, for docs/perf. On the lent H100, in one device call:
#   . .whl/env.sh && scripts/gpu_bench.sh
# About 5 minutes, Triton and NVRTC compiles and torch.compile included. Each step has its own time
# limit and none starts past a deadline ($GPU_BENCH_SECONDS, default 420 s), so the call stays under
# its 10 minutes whatever hangs. Under $OUT (the device returns at most 8 files, so the results travel
# as one archive):
#   perf-gpu.tar.gz  <op>.json and <op>.png of `kernelzoo bench` per op, gelu_fusion.md, pytest_softmax.json
#   summary.txt      per op, the best kernelzoo plugin against torch; pytest-benchmark against kernelzoo bench
#   gpu_bench.log    everything the steps printed
# Then, on the development machine:
#   mkdir -p /tmp/gpu && tar -xzf FILES_AT/perf-gpu.tar.gz -C /tmp/gpu && python scripts/perf_docs.py --gpu /tmp/gpu
set -uo pipefail
out=${OUT:-/tmp/kernelzoo-gpu-bench}
res=$(mktemp -d)
mkdir -p "$out"
log="$out/gpu_bench.log"
: >"$log"
start=$SECONDS
deadline=${GPU_BENCH_SECONDS:-420}
# A database of its own: nothing tuned, so every plugin runs its default config and dispatch its default order.
export KERNELZOO_DB="sqlite:///$res/tuning.sqlite"

step() {  # step SECONDS NAME COMMAND...: run it with a time limit, log it, go on whatever happens
    local limit=$1 name=$2 left
    shift 2
    left=$((deadline - (SECONDS - start)))
    if ((left < 20)); then
        echo "gpu_bench: $name: skipped, past the ${deadline} s deadline" | tee -a "$log"
        return
    fi
    ((left < limit)) && limit=$left
    echo "=== $name (at $((SECONDS - start)) s, limit $limit s)" | tee -a "$log"
    timeout "$limit" "$@" >>"$log" 2>&1
    echo "=== $name: exit $? at $((SECONDS - start)) s" | tee -a "$log"
}

step 60 "device and versions" python3 -c "
import platform, torch, triton
from kernelzoo.backends import cuda
print(f'{torch.cuda.get_device_name()} (sm_{\"\".join(map(str, torch.cuda.get_device_capability()))}), python '
      f'{platform.python_version()}, torch {torch.__version__}, triton {triton.__version__}, '
      f'nvrtc {\".\".join(map(str, cuda.nvrtc_version()))}')"
ops=$(python3 -c "import kernelzoo; print(' '.join(sorted(kernelzoo.registry.load().ops)))")
compute=" matmul linear linear_backward conv2d attention attention_backward "
memory=()
for op in $ops; do [[ $compute == *" $op "* ]] || memory+=(--op "$op"); done
# 25 ms of timed runs per plugin and shape (at least 5 runs) keeps the noise near 1%; a plugin slower
# than 250 ms a run (the python ones on the biggest shapes) is reported, not timed.
bench=(kernelzoo bench --device cuda --json "$res/{op}.json" --plot "$res/{op}.png" --budget-ms 25 --max-run-ms 250)

step 120 "gelu fusion study" python3 examples/gelu_fusion.py --device cuda --out "$res/gelu_fusion.md"
step 90 "pytest-benchmark softmax" python3 -m pytest benchmarks/ --benchmark-only -k softmax -q -p no:cacheprovider \
    --benchmark-max-time 0.05 --benchmark-json "$res/pytest_softmax.json"
# memory-bound ops: fp32 (PERF.md's figures) and bf16
step 180 "bench memory-bound ops" "${bench[@]}" "${memory[@]}" --dtype float32 --dtype bfloat16
# the python matmul forms every product (a 4096^3 call moves ~0.5 TB): left out
step 90 "bench matmul, linear" "${bench[@]}" --op matmul --op linear --op linear_backward --dtype bfloat16 \
    --dtype float32 --plugin triton --plugin cuda --plugin torch
# fp16: PERF.md's attention figures
step 90 "bench attention" "${bench[@]}" --op attention --op attention_backward --dtype float16
step 60 "bench conv2d" "${bench[@]}" --op conv2d --dtype bfloat16 --dtype float32

cp "$log" "$res/gpu_bench.log"
tar -czf "$out/perf-gpu.tar.gz" -C "$res" --exclude 'tuning.sqlite*' .
python3 scripts/perf_docs.py --summary "$res" | tee "$out/summary.txt"
echo "gpu_bench: $(ls "$res"/*.json 2>/dev/null | wc -l) result files in $out/perf-gpu.tar.gz after $((SECONDS - start)) s"
