"""A smoke subset of ``benchmarks/conformance/torch_opinfo.py``: PyTorch's own OpInfo sample
inputs for a few converted ops, through from_torch + compile, against eager at PyTorch's
float32 tolerances (the full run is the script)."""

import importlib.util
import pathlib
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal imports it

_SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "conformance" / "torch_opinfo.py"
sys.path.insert(0, str(_SCRIPT.parent))   # the script imports its sibling forked.py
_spec = importlib.util.spec_from_file_location("torch_opinfo", _SCRIPT)
torch_opinfo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(torch_opinfo)

SMOKE = r"^(abs|argmax|cumsum|gather|gt|nn\.functional\.leaky_relu|var)$"


def test_opinfo_smoke_subset():
    res = torch_opinfo.table(torch_opinfo.run(SMOKE, max_samples=2, timeout=300))
    assert set(res["ops"]) == {"abs", "argmax", "cumsum", "gather", "gt", "nn.functional.leaky_relu", "var"}
    failed = {k: v["reasons"] for k, v in res["ops"].items() if v["fail"]}
    assert not failed, failed
    assert res["total"].get("pass", 0) >= 10, res
