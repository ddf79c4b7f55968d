"""The examples newcomers read first keep running."""

import ast
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


@pytest.mark.parametrize("script, args, expect", [
    ("01_schedule_walkthrough.py", ["--trials", "3"], "tuned: "),
    ("02_ewise_fma_rewrite.py", [], "numerics match numpy"),
    ("03_mixture_module.py", [], "sgemm from the JIT code: ok"),
    ("04_dense_add_fusor.py", [], "same logits as numpy"),
    ("05_call_tir_and_te.py", [], "linear0 replaced by its scheduled version: numerics match numpy"),
    ("06_symbolic_shapes.py", [], "one compile, every size: ok"),
])
def test_example_runs(script, args, expect):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert expect in r.stdout


@pytest.mark.parametrize("script", sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py")))
def test_examples_import_only_mlc_mlir(script):
    """Examples show the public API: no import of the raw MLIR bindings (``mlir``,
    ``mlc_mlir._mlir``) or of other private modules."""
    tree = ast.parse(open(os.path.join(EXAMPLES, script)).read())
    mods = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    mods += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    bad = [m for m in mods if m == "mlir" or m.startswith("mlir.") or "._" in m or m.startswith("mlc_mlir._")]
    assert not bad, f"{script} imports {bad}"
    assert any(m == "mlc_mlir" or m.startswith("mlc_mlir.") for m in mods)
