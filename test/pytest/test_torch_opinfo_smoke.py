"""A smoke subset of ``benchmarks/conformance/torch_opinfo.py``: PyTorch's own OpInfo sample
inputs for a few converted ops, through from_torch + compile, against eager at PyTorch's
float32 tolerances (the full run is the script)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal imports it

_SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "conformance" / "torch_opinfo.py"
SMOKE = r"^(abs|argmax|cumsum|gather|gt|nn\.functional\.leaky_relu|var)$"


def test_opinfo_smoke_subset():
    # The script forks a child per sample (a compiler abort is one failed sample); it runs in a
    # process of its own, since a fork of a process with other threads (a pytest-xdist worker's
    # I/O thread) can leave a lock held in the child.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(_SCRIPT.parents[2]), os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, str(_SCRIPT), "--include", SMOKE, "--max-samples", "2", "--timeout", "300",
                        "--json"], capture_output=True, text=True, env=env, timeout=1800)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    res = json.loads("\n".join(lines[len(lines) - 1 - lines[::-1].index("{"):]))   # the JSON object ends the output
    assert set(res["ops"]) == {"abs", "argmax", "cumsum", "gather", "gt", "nn.functional.leaky_relu", "var"}
    failed = {k: v["reasons"] for k, v in res["ops"].items() if v["fail"]}
    assert not failed, failed
    assert res["total"].get("pass", 0) >= 10, res
