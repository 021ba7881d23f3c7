#!/usr/bin/env bash
# Issue 31's GPU check, in one call of the device tool (an NVIDIA H200 machine; under 6 minutes in all).
#
# Run from the repository root on the device machine, carrying the wheels the image lacks in .whl/ (see
# /work/notes/scale.md for the list: transformer_lens, beartype, better_abc, datasets, dill, fancy_einsum,
# multiprocess, plotly, typeguard):
#
#     bash benchmarks/gpu_check.sh        # with carry [".whl"] and timeout_s 400 (the steps' limits sum to 330 s, the wheels' install about 15 s)
#
# Writes under $OUT (or /tmp/gpu_check when unset):
#   env.txt                 nvidia-smi, python, torch and the GPU torch sees
#   tests_cuda.txt          tests/unit/test_device.py on cuda (the device-parametrised tests, -rs: skips say why)
#   bench_cuda.txt/.json    benchmarks/bench_device.py on cuda, n = 10^4 .. 10^7 (verified up to 10^6, the forward
#                           alone at 10^7), and training steps per second
#   bench_cpu.txt/.json     the same on the machine's CPU at n = 10^6
#   cluster_cuda.json       `kmeans-circuits cluster --device cuda --json` at n = 10^5 (the device field, the verdict)
#   report_cuda.*, patch_cuda.*  `report` and `patch` on iris with --device cuda (do they run there at all)
# Each step has its own time limit, so that one slow step cannot take the others' time.
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$OUT/steps.txt"; }

if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        > "$OUT/pip.txt" 2>&1 || stamp "pip install of the carried wheels failed (see pip.txt)"
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
stamp "wheels installed"

{
    nvidia-smi
    python3 --version
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '-')"
    nproc
} > "$OUT/env.txt" 2>&1
stamp "environment recorded"

timeout 60 python3 -m pytest -q -p no:cacheprovider -rs tests/unit/test_device.py > "$OUT/tests_cuda.txt" 2>&1
stamp "device tests: exit $? ($(tail -1 "$OUT/tests_cuda.txt"))"

python3 benchmarks/make_scale_data.py --n 100000 --out /tmp/scale5 > /dev/null 2>&1
timeout 30 python3 -m analysis.cli cluster --data /tmp/scale5/X.npy --init /tmp/scale5/C0.npy --k 10 --iterations 10 \
    --device cuda --json > "$OUT/cluster_cuda.json" 2> "$OUT/cluster_cuda.err"
stamp "cluster --device cuda at 10^5: exit $?"

timeout 40 python3 -m analysis.cli report --dataset iris --k 3 --device cuda --out "$OUT/report_cuda.html" \
    > "$OUT/report_cuda.txt" 2>&1
stamp "report --device cuda on iris: exit $?"
timeout 40 python3 -m analysis.cli patch --dataset iris --k 3 --corruption move-centroid --device cuda --json \
    --out "$OUT/patch_cuda" > "$OUT/patch_cuda.json" 2> "$OUT/patch_cuda.err"
stamp "patch --device cuda on iris: exit $?"

timeout 110 python3 benchmarks/bench_device.py --device cuda --verify-max-n 1000000 --train-steps 20 --timeout 50 \
    --json "$OUT/bench_cuda.json" > "$OUT/bench_cuda.txt" 2>&1
stamp "bench on cuda: exit $?"

timeout 50 python3 benchmarks/bench_device.py --device cpu --ns 1000000 --train-steps 5 --timeout 45 \
    --json "$OUT/bench_cpu.json" > "$OUT/bench_cpu.txt" 2>&1
stamp "bench on the CPU at 10^6: exit $?"
cat "$OUT/steps.txt" "$OUT/bench_cuda.txt" "$OUT/bench_cpu.txt"
