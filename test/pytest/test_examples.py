"""The examples newcomers read first keep running."""

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


@pytest.mark.parametrize("script, args, expect", [
    ("01_schedule_walkthrough.py", ["--trials", "2"], "replayed best"),
    ("02_ewise_fma_rewrite.py", [], "numerics match numpy"),
    ("03_mixture_module.py", [], "sgemm from the JIT code: ok"),
    ("04_dense_add_fusor.py", [], "same logits"),
])
def test_example_runs(script, args, expect):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert expect in r.stdout
