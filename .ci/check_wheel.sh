#!/usr/bin/env bash
# Builds the wheel, installs it (not editable) into a fresh venv, and compiles and runs a small
# model there, from a folder outside the checkout: pipelines/ and dialects/ must come from the
# wheel's package data. The venv sees the already-installed dependencies (--system-site-packages)
# so that the MLIR wheels are not downloaded twice; the check asserts that mlc_mlir itself is
# the venv's copy.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m build --wheel --outdir "$tmp/dist" . > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
rm -rf build
python3 -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --no-deps --force-reinstall "$tmp"/dist/mlc_mlir-*.whl
cd "$tmp"
MLC_VENV="$tmp/venv" "$tmp/venv/bin/python" - <<'PY'
import os
import numpy as np
import mlc_mlir as mlc
from mlc_mlir import ops

venv = os.environ["MLC_VENV"]
assert os.path.realpath(mlc.__file__).startswith(os.path.realpath(venv)), mlc.__file__
from mlc_mlir.pipeline import available
assert "cpu" in available(), available()
rng = np.random.default_rng(0)
w = rng.standard_normal((16, 8)).astype(np.float32)
b = rng.standard_normal(8).astype(np.float32)
bb = mlc.GraphBuilder()
with bb.function("main") as f:
    x = f.arg("x", shape=(4, 16), dtype="float32")
    f.output(ops.relu(ops.dense(x, w.T.copy(), b)))
exe = mlc.compile(bb.finish())
xv = rng.standard_normal((4, 16)).astype(np.float32)
np.testing.assert_allclose(exe(xv), np.maximum(xv @ w + b, 0), rtol=1e-5, atol=1e-5)
lib = mlc.runtime.load_library(exe.export_library(os.path.join(os.getcwd(), "m.so")))  # runtime/*.c
np.testing.assert_allclose(lib(xv), np.maximum(xv @ w + b, 0), rtol=1e-5, atol=1e-5)
print(f"wheel check: {os.path.basename(os.path.dirname(mlc.__file__))} from {venv}: "
      "pipelines found, model compiled (JIT and library) and matches numpy")
PY
# the demo without its extra names the extra in one line
out="$("$tmp/venv/bin/python" -c "import sys; sys.modules['sklearn'] = None
from mlc_mlir.cli.mlc import main; sys.exit(main(['demo']))" 2>&1)" && { echo "demo without scikit-learn exited 0"; exit 1; } || true
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && printf '%s\n' "$out" | grep -q "mlc-mlir\[demo\]" || { echo "unexpected: $out"; exit 1; }
echo "wheel check: mlc demo without scikit-learn says: $out"
