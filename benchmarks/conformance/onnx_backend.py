"""Run the ONNX backend conformance cases shipped in the onnx wheel through
``onnx.backend.test.BackendTest`` with mlc-mlir's backend and print pass / fail / unsupported
per op family (the op types of the case's model; the model name for ``light``) with grouped
reasons, per suite.

    python benchmarks/conformance/onnx_backend.py [--suite all|node,light,...] [--json] [--include REGEX]

Suites: ``node`` (generated from ``onnx.backend.test.case.node``), ``simple``,
``pytorch-converted``, ``pytorch-operator`` and ``light`` (the 9 light model-zoo CNNs, whose
reference outputs are the ``_output_0.pb`` files; several minutes each to compile and run).
"float32": the float32 cases (inputs and outputs FLOAT, besides int32/int64/bool index, shape
and mask tensors; no other float type); "claimed float32": those whose op types all have a
converter.

unsupported: the import refused the model (``BuildError``: an op, attribute or dtype the
frontend does not convert); fail: anything else (wrong values, a compile error, a crash).
Each case runs in a forked child so that a compiler abort (an MLIR assertion) or a hang
(``--timeout``) is one failed case, not the end of the run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import unittest

import onnx
import onnx.backend.test
from onnx.backend.test.loader import load_model_tests

import mlc_mlir as mlc
from forked import run_forked  # benchmarks/conformance/forked.py; this folder is on sys.path
from mlc_mlir.frontends.onnx_backend import make_backend
from mlc_mlir.frontends.onnx_registry import CONVERTERS

#: suite -> (loader kind, BackendTest category)
SUITES = {"node": ("node", "OnnxBackendNodeModelTest"), "simple": ("simple", "OnnxBackendSimpleModelTest"),
          "pytorch-converted": ("pytorch-converted", "OnnxBackendPyTorchConvertedModelTest"),
          "pytorch-operator": ("pytorch-operator", "OnnxBackendPyTorchOperatorModelTest"),
          "light": ("real", "OnnxBackendRealModelTest")}


#: a "float32 case": its inputs and outputs are float32, or integer/bool (indices, shapes, masks)
_F32_CASE_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.INT32,
                   onnx.TensorProto.BOOL}


def _model(case):
    if case.model is not None:
        return case.model
    if case.model_dir is not None:
        return onnx.load(os.path.join(case.model_dir, "model.onnx"))
    return None


def _families(kind: str) -> dict:
    """test name (``test_relu``) -> (op family, claimed, float32): the op types of its model's
    nodes (the model name for light models); whether every op type has a converter; whether
    it is a float32 case (see the module docstring)."""
    out = {}
    for case in load_model_tests(kind=kind):
        model = _model(case)
        if model is None:  # light: the model file is read at run time
            out[case.name] = (case.name[len("test_"):], True, True)
            continue
        kinds = sorted({n.op_type for n in model.graph.node})
        fam = kinds[0] if len(kinds) == 1 else "+".join(kinds[:3]) or "?"
        claimed = all(("", k) in CONVERTERS for k in kinds)
        types = {vi.type.tensor_type.elem_type for vi in list(model.graph.input) + list(model.graph.output)}
        f32 = onnx.TensorProto.FLOAT in types and types <= _F32_CASE_TYPES
        out[case.name] = (fam, claimed, f32)
    return out


def _reason(err: str) -> str:
    last = err.strip().splitlines()[-1]
    last = re.sub(r"onnx node '[^']*' ", "", last)
    last = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", last)
    return last[:160]


class _Result(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.outcomes = []  # (test name, status, reason)

    def addSuccess(self, test):
        self.outcomes.append((test._testMethodName, "pass", ""))

    def _bad(self, test, err):
        etype = err[0].__name__
        status = "unsupported" if issubclass(err[0], mlc.BuildError) else "fail"
        self.outcomes.append((test._testMethodName, status, _reason(f"{etype}: {err[1]}")))

    def addFailure(self, test, err):
        self._bad(test, err)

    def addError(self, test, err):
        self._bad(test, err)


def _tests(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _tests(t)
        else:
            yield t


def _run_isolated(test, timeout: int):
    """Run one case in a forked child (:func:`forked.run_forked`); returns (name, status,
    reason) (None status = skipped)."""
    name = test._testMethodName

    def case():
        res = _Result()
        test.run(res)
        return res.outcomes[0] if res.outcomes else (name, "skipped", "")

    out = run_forked(case, timeout)
    return out if len(out) == 3 else (name,) + out


def _run_suite(suite: str, include, timeout: int):
    """(test name, status, reason) for each selected case of ``suite``."""
    kind, category = SUITES[suite]
    bt = onnx.backend.test.BackendTest(make_backend(mlc.compile), __name__)
    bt.include(include or r"^test_.*_cpu$")
    tests = unittest.TestSuite()
    tests.addTests(unittest.TestLoader().loadTestsFromTestCase(bt.test_cases[category]))
    outcomes = []
    for test in _tests(tests):
        if not getattr(getattr(test, test._testMethodName), "__unittest_skip__", False):
            outcomes.append(_run_isolated(test, timeout))
    return [o for o in outcomes if o[1] != "skipped"]


def _table(suite: str, outcomes) -> dict:
    family = _families(SUITES[suite][0])
    fams = collections.defaultdict(lambda: {"pass": 0, "fail": 0, "unsupported": 0,
                                            "reasons": collections.Counter()})
    claimed, f32s = collections.Counter(), collections.Counter()
    for name, status, reason in outcomes:
        fam, is_claimed, f32 = family.get(re.sub(r"_cpu$", "", name), ("?", False, False))
        f = fams[fam]
        f[status] += 1
        if reason:
            f["reasons"][f"{status}: {reason}"] += 1
        if is_claimed and f32:
            claimed[status] += 1
        if f32:
            f32s[status] += 1
    total = collections.Counter(s for _, s, _ in outcomes)
    return {"total": dict(total), "claimed_float32": dict(claimed), "float32": dict(f32s),
            "not_passed": sorted([n, st, r] for n, st, r in outcomes if st != "pass"),
            "families": {k: {**v, "reasons": dict(v["reasons"])} for k, v in sorted(fams.items())}}


def _print(suite: str, res: dict) -> None:
    print(f"== {suite}")
    print(f"{'family':32s} {'pass':>5s} {'fail':>5s} {'unsup':>5s}")
    for k, v in res["families"].items():
        print(f"{k[:32]:32s} {v['pass']:5d} {v['fail']:5d} {v['unsupported']:5d}")
        for reason, c in collections.Counter(v["reasons"]).most_common(3):
            print(f"    {c:3d} x {reason}")
    total, cl = collections.Counter(res["total"]), collections.Counter(res["claimed_float32"])
    print(f"total: {total['pass']} pass, {total['fail']} fail, {total['unsupported']} unsupported "
          f"of {sum(total.values())}")
    n = sum(cl.values())
    print(f"claimed float32: {cl['pass']} pass of {n} ({100.0 * cl['pass'] / max(n, 1):.1f}%)")
    f32 = collections.Counter(res["float32"])
    n = sum(f32.values())
    print(f"float32: {f32['pass']} pass of {n} ({100.0 * f32['pass'] / max(n, 1):.1f}%)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="node",
                    help=f"comma-separated suites or 'all' (of {', '.join(SUITES)}; default node)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    ap.add_argument("--include", default=None, help="regex of test names (default: every case)")
    ap.add_argument("--timeout", type=int, default=None,
                    help="seconds per case before it counts as failed (default 120; 900 for light)")
    args = ap.parse_args()
    suites = list(SUITES) if args.suite == "all" else args.suite.split(",")
    bad = [s for s in suites if s not in SUITES]
    if bad:
        ap.error(f"--suite {bad}: expected some of {list(SUITES)} or 'all'")
    results = {}
    for suite in suites:
        timeout = args.timeout or (900 if suite == "light" else 120)
        results[suite] = _table(suite, _run_suite(suite, args.include, timeout))
        if not args.json:
            _print(suite, results[suite])
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
