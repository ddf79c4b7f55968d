"""Run the ONNX backend node conformance cases shipped in the onnx wheel through
``onnx.backend.test.BackendTest`` with mlc-mlir's backend and print pass / fail / unsupported
per op family (the op type of the case's model) with grouped reasons.

    python benchmarks/conformance/onnx_backend.py [--json] [--include REGEX]

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
import signal
import re
import sys
import unittest

import onnx.backend.test
from onnx.backend.test.loader import load_node_model_tests

import mlc_mlir as mlc
from mlc_mlir.frontends.onnx_backend import make_backend



def _families() -> dict:
    """test name (``test_relu``) -> op family: the op type of its model's nodes."""
    out = {}
    for case in load_node_model_tests():
        kinds = sorted({n.op_type for n in case.model.graph.node}) if case.model is not None else []
        out[case.name] = kinds[0] if len(kinds) == 1 else "+".join(kinds[:3]) or "?"
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
    """Run one case in a forked child; returns (name, status, reason) (None status = skipped)."""
    name = test._testMethodName
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        res = _Result()
        signal.alarm(timeout)
        test.run(res)
        out = res.outcomes[0] if res.outcomes else (name, "skipped", "")
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if data:
        return tuple(json.loads(data))
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        why = "timed out" if sig == "SIGALRM" else f"the process died with {sig} (compiler abort)"
        return (name, "fail", why)
    return (name, "fail", f"the child exited with {os.WEXITSTATUS(status)} and no result")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    ap.add_argument("--include", default=None, help="regex of test names (default: every node case)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per case before it counts as failed")
    args = ap.parse_args()
    bt = onnx.backend.test.BackendTest(make_backend(mlc.compile), __name__)
    bt.include(args.include or r"^test_.*_cpu$")
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    suite.addTests(loader.loadTestsFromTestCase(bt.test_cases["OnnxBackendNodeModelTest"]))
    res = _Result()
    for test in _tests(suite):
        if not getattr(getattr(test, test._testMethodName), "__unittest_skip__", False):
            res.outcomes.append(_run_isolated(test, args.timeout))
    res.outcomes = [o for o in res.outcomes if o[1] != "skipped"]
    fams = collections.defaultdict(lambda: {"pass": 0, "fail": 0, "unsupported": 0,
                                            "reasons": collections.Counter()})
    family = _families()
    for name, status, reason in res.outcomes:
        f = fams[family.get(re.sub(r"_cpu$", "", name), "?")]
        f[status] += 1
        if reason:
            f["reasons"][f"{status}: {reason}"] += 1
    total = collections.Counter(s for _, s, _ in res.outcomes)
    if args.json:
        print(json.dumps({"total": dict(total), "families": {k: {**v, "reasons": dict(v["reasons"])}
                                                              for k, v in sorted(fams.items())}}, indent=1))
        return 0
    print(f"{'family':32s} {'pass':>5s} {'fail':>5s} {'unsup':>5s}")
    for k, v in sorted(fams.items()):
        print(f"{k[:32]:32s} {v['pass']:5d} {v['fail']:5d} {v['unsupported']:5d}")
        for reason, c in v["reasons"].most_common(3):
            print(f"    {c:3d} x {reason}")
    print(f"total: {total['pass']} pass, {total['fail']} fail, {total['unsupported']} unsupported "
          f"of {sum(total.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
