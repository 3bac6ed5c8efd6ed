#!/usr/bin/env bash
# mytorch on a CUDA machine: the new ops' conformance on the GPU, mytorch's tests with their cuda
# cases, the three examples at full size on cuda, and the training-step benchmark against PyTorch
# eager. On the lent GPU: `. .whl/env.sh && scripts/gpu_mytorch.sh` (logs under $OUT).
set -uo pipefail
out=${OUT:-/tmp/kernelzoo-gpu-mytorch}
mkdir -p "$out"
ops='mul or div or relu_backward or gelu_backward or copy_ or exp or log or tanh or pow or dropout or max or softmax_backward'
. "$(dirname "$0")/gpu_common.sh"  # run NAME COMMAND...
run conformance python3 -m pytest -p no:cacheprovider -q -n 8 tests/test_conformance.py -k "cuda and ($ops)"
run mytorch-tests python3 -m pytest -p no:cacheprovider -q tests/test_mytorch_functions.py tests/test_mytorch_autograd.py \
    tests/test_mytorch_nn.py tests/test_dropout.py tests/test_softmax_autograd.py
run digits python3 examples/digits_cnn.py --device cuda
run mlp python3 examples/mlp.py --device cuda
run transformer python3 examples/tiny_transformer.py --device cuda
run step-bench python3 scripts/mytorch_bench.py --out "$out"
cat "$out/summary.txt"
exit "$status"
