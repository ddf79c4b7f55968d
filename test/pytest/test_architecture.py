"""The package's shape: layers (import-linter), no function-level imports, module sizes, a
wheel that carries its package data, and a lit test for every pass ``mlc-opt`` registers."""

import ast
import pathlib
import re
import shutil
import subprocess

import pytest

from mlc_mlir.cli import mlc_opt  # noqa: F401  (importing it registers the layout and prepare passes)
from mlc_mlir.graph import PASS_REGISTRY

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mlc_mlir"
#: Third-party packages that are optional extras, imported only where used.
OPTIONAL = {"sklearn", "torch", "transformers", "onnx", "onnxruntime", "threadpoolctl", "llvm", "ray", "matplotlib", "xgboost"}


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "_data" not in p.parts)


def test_layers_contract_is_kept():
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    proc = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "broken" in proc.stdout and "0 broken" in proc.stdout


def _function_level_imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level > 0 or mod.split(".")[0] in ("mlc_mlir", "mlir"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} from {'.' * node.level}{mod}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] not in OPTIONAL:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} import {alias.name}")
    return found


def test_no_function_level_imports_of_our_modules():
    """A function-level import hides a cycle from the layers contract; only optional
    third-party extras (scikit-learn, torch, ...) may be imported where they are used."""
    found = sorted({hit for p in _modules() for hit in _function_level_imports(p)})
    assert not found, "function-level imports:\n" + "\n".join(found)


def test_no_module_over_600_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _modules()}
    big = {k: v for k, v in sizes.items() if v > 600}
    assert not big, f"modules over 600 lines: {big}"


def test_only_mlir_py_imports_the_bindings():
    offenders = []
    for p in _modules():
        if p.name == "_mlir.py":
            continue
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            offenders += [f"{p.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "mlir"]
    assert not offenders, offenders


def test_package_data_links_point_at_the_sources():
    for name, pattern in (("pipelines", "*.pipeline"), ("dialects", "*.irdl.mlir")):
        shipped = sorted(f.name for f in (PACKAGE / "_data" / name).glob(pattern))
        source = sorted(f.name for f in (ROOT / name).glob(pattern))
        assert shipped == source and source, (name, shipped, source)


def _lit_run_lines():
    """The ``RUN:`` lines of the lit suite (test/lit), all files together."""
    lines = []
    for p in sorted((ROOT / "test" / "lit").rglob("*")):
        if p.suffix in (".mlir", ".py") and "Inputs" not in p.parts and p.name != "lit.cfg.py":
            lines += [ln for ln in p.read_text().splitlines() if "RUN:" in ln]
    return lines


def test_every_registered_pass_has_a_lit_test():
    """Every pass ``mlc-opt`` offers (``graph.PASS_REGISTRY``, filled by importing the pass
    modules, as ``mlc-opt`` does) runs in a RUN line of a lit FileCheck test, as upstream MLIR
    tests each of its passes."""
    # the registry holds the passes of all three modules (an empty one would pass vacuously)
    assert {"mlc-dce", "mlc-conv-to-nhwc", "mlc-prefetch-rows"} <= set(PASS_REGISTRY)
    runs = _lit_run_lines()
    missing = sorted(name for name in PASS_REGISTRY
                     if not any(re.search(rf"--{re.escape(name)}(?![\w-])", ln) for ln in runs))
    assert not missing, f"registered passes without a lit test (a RUN line with --NAME): {missing}"
