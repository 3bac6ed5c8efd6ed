#!/usr/bin/env bash
# Every op's benchmarks on a CUDA machine in one go, for docs/perf:
#   scripts/gpu_bench.sh
# About 5 minutes, Triton and NVRTC compiles and torch.compile included. Each step has its own time
# limit and none starts past a deadline ($GPU_BENCH_SECONDS, default 480 s). Under $OUT
# (default /tmp/kernelzoo-gpu-bench):
#   perf-gpu.tar.gz  <op>.json and <op>.png of `kernelzoo bench` per op, gelu_fusion.md, pytest_softmax.json
#   summary.txt      per op, the best kernelzoo plugin against torch; pytest-benchmark against kernelzoo bench
#   gpu_bench.log    everything the steps printed
# Then build the pages:
#   mkdir -p /tmp/gpu && tar -xzf OUT/perf-gpu.tar.gz -C /tmp/gpu && python scripts/perf_docs.py --gpu /tmp/gpu
set -uo pipefail
out=${OUT:-/tmp/kernelzoo-gpu-bench}
res=$(mktemp -d)
mkdir -p "$out"
log="$out/gpu_bench.log"
: >"$log"
start=$SECONDS
deadline=${GPU_BENCH_SECONDS:-480}
# A database of its own: it holds the shipped winners (tuning_db/, imported at the first lookup) and nothing
# else, so the figures are those of a fresh install.
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
grep -m 1 "(sm_" "$log"
ops=$(python3 -c "import kernelzoo; print(' '.join(sorted(kernelzoo.registry.load().ops)))")
gemm=() fp8=() attention=() conv=() memory=()
for op in $ops; do
    case $op in
        matmul | linear | linear_backward) gemm+=(--op "$op") ;;
        scaled_matmul) fp8+=(--op "$op") ;;
        attention*) attention+=(--op "$op") ;;
        conv2d*) conv+=(--op "$op") ;;
        *) memory+=(--op "$op") ;;
    esac
done
# 25 ms of timed runs per plugin and shape (at least 5 runs) keeps the noise near 1%; a plugin slower
# than 250 ms a run (the python ones on the biggest shapes) is reported, not timed. One dtype per op
# group fits the time: fp32 for the memory-bound ops and fp16 for attention, bf16
# for the matmuls and convolutions (cuDNN runs fp32 convolutions as TF32, past the fp32 floor), e4m3 for the
# FP8 matmul.
bench=(kernelzoo bench --device cuda --output "$res/{op}.json" --plot "$res/{op}.png" --budget-ms 25 --max-run-ms 250)

step 150 "bench memory-bound ops" "${bench[@]}" "${memory[@]}" --dtype float32
step 60 "pytest-benchmark softmax" python3 -m pytest benchmarks/ --benchmark-only -k softmax -q -p no:cacheprovider \
    --benchmark-max-time 0.02 --benchmark-json "$res/pytest_softmax.json"
step 120 "gelu fusion study" python3 examples/gelu_fusion.py --device cuda --out "$res/gelu_fusion.md"
# the python matmuls form every product (a 4096^3 call moves ~0.5 TB): left out
step 75 "bench matmuls" "${bench[@]}" "${gemm[@]}" --dtype bfloat16 --plugin triton --plugin cuda --plugin torch
step 45 "bench FP8 matmuls" "${bench[@]}" "${fp8[@]}" --dtype float8_e4m3fn --plugin triton --plugin torch
step 90 "bench attention" "${bench[@]}" "${attention[@]}" --dtype float16
step 60 "bench convolutions" "${bench[@]}" "${conv[@]}" --dtype bfloat16

cp "$log" "$res/gpu_bench.log"
tar -czf "$out/perf-gpu.tar.gz" -C "$res" --exclude 'tuning.sqlite*' .
python3 scripts/perf_docs.py --summary "$res" | tee "$out/summary.txt"
echo "gpu_bench: $(ls "$res"/*.json 2>/dev/null | wc -l) result files in $out/perf-gpu.tar.gz after $((SECONDS - start)) s"
