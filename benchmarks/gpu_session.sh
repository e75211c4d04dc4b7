#!/usr/bin/env bash
# The fused attention's GPU checks and figures (issue 26) as one command, for a session
# lent a GPU machine (device tool, 15 minutes of device time: plan one call).
#
#   bash benchmarks/gpu_session.sh fetch   # here, once: the wheels the device image lacks, into .whl/
#   bash benchmarks/gpu_session.sh run     # there: device call with carry [".whl"], timeout_s 600
#
# `run` installs the wheels, then, each step's output in $OUT (at most 8 files come back):
#   cuda_tests.log   the Triton kernels' tests on CUDA tensors (outputs and the four gradients
#                    against autograd through entmax_alpha, causal, padding, half precision)
#   kernel.log       bench_attention_kernel.py: forward alone and forward+backward per solver,
#                    N(0, 1) and sharper scores, not causal (T = 1,024 and 4,096) and causal (1,024)
#   attention.log    bench_attention_gpu.py: SDPA, unfused softmax, our fused kernel and AdaSplash,
#                    time and peak memory as ratios to SDPA, bf16, T = 512 to 16,384, both masks
#   training.log     bench_training_gpu.py: tokens/s of softmax, 1.5-entmax and alpha-entmax transformers
#   device.txt       the GPU, driver, torch and Triton versions, and the date
# Every ratio is to a baseline measured in the same run, round by round (benchmarks/timing.py);
# the steps take at most 10 minutes on an H100, each capped by `timeout` so that a slow one
# cannot eat the others' time, and each log ends with the seconds its steps took.
set -uo pipefail
cd "$(dirname "$0")/.."

wheels=(ve-fairseq==0.12.3 entmax==1.3 adasplash==0.2.2 hydra-core==1.3.8 omegaconf==2.3.1 bitarray==3.12.3)

case "${1:-}" in
fetch)
    # The device image runs Python 3.12 with torch and Triton; fairseq and its configuration stack,
    # the entmax oracle and AdaSplash travel as wheels (device README).  antlr4 4.9.3, which
    # omegaconf 2.3 pins, is published as a source archive only: built into a wheel here.
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
    mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${wheels[@]}" || exit 1
    python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3 || exit 1
    ls -la .whl
    ;;
run)
    : "${OUT:?run on the device machine, where OUT names the folder that comes back}"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
    {
        date -u
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    } > "$OUT/device.txt" 2>&1
    cat "$OUT/device.txt"
    step() {  # step SECONDS LOG COMMAND...: run, tee into $OUT/LOG, stop it after SECONDS
        local limit=$1 log=$2 start=$SECONDS
        shift 2
        echo "== $*" | tee -a "$OUT/$log"
        timeout "$limit" "$@" 2>&1 | tee -a "$OUT/$log"
        echo "== $((SECONDS - start)) s of $limit" | tee -a "$OUT/$log"
    }
    # The tests compile a kernel variant each (about 11 s apiece on the device's CPU: 12 of 76 ran
    # in 140 s on 2026-11-27), so they run on 8 workers (pytest-xdist, in the device image).
    step 160 cuda_tests.log python3 -m pytest -q -x -n 8 -p no:cacheprovider tests/entmax/test_entmax_attention.py \
        tests/modules/test_fused_attention_path.py tests/entmax/test_triton_kernel.py
    step 75 kernel.log python3 benchmarks/bench_attention_kernel.py --tokens 16384 --lengths 1024 4096 --repeats 10
    step 45 kernel.log python3 benchmarks/bench_attention_kernel.py --tokens 16384 --lengths 1024 --repeats 10 \
        --sharpness 3
    step 50 kernel.log python3 benchmarks/bench_attention_kernel.py --tokens 16384 --lengths 1024 --repeats 10 --causal
    step 80 attention.log python3 benchmarks/bench_attention_gpu.py --tokens 16384 --lengths 512 1024 4096 16384 \
        --no-reference --repeats 10
    step 90 attention.log python3 benchmarks/bench_attention_gpu.py --tokens 16384 --lengths 512 1024 4096 \
        --causal --no-reference --repeats 10
    step 80 training.log python3 benchmarks/bench_training_gpu.py --steps 30 --repeats 2
    ;;
*)
    echo "usage: bash benchmarks/gpu_session.sh fetch|run" >&2
    exit 2
    ;;
esac
