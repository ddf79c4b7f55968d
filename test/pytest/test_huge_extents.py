"""Huge static extents: nothing in the compiler takes time proportional to an extent, so a
(2**40,) tensor compiles like a small one (or gets a BuildError), never hangs or aborts."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mlc_mlir.schedule.factors import divisors, factorize, largest_divisor


def _run_isolated(code: str) -> subprocess.CompletedProcess:
    """``code`` in a child process: a hang fails on the (generous) timeout, an abort on the
    return code, instead of stalling or killing pytest."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=600)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.integers(1, 5000))
def test_divisors_match_brute_force(n):
    assert list(divisors(n)) == [d for d in range(1, n + 1) if n % d == 0]
    for cap in (1, 4, 17, n):
        assert largest_divisor(n, cap) == max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


@pytest.mark.parametrize("n", [2**40, 2**61 - 1, 2**63 - 1, (2**31 - 1) * (2**31 - 19), 963761198400])
def test_factorize_large(n):
    f = factorize(n)
    assert int(np.prod([p ** e for p, e in f], dtype=object)) == n
    assert all(p > 1 and all(p % q for q in range(2, min(p, 1000))) for p, _ in f)
    d = divisors(n)
    assert len(d) == int(np.prod([e + 1 for _, e in f])) and all(n % x == 0 for x in d)


@pytest.mark.parametrize("shape, op", [
    ("(2**40,)", "ops.relu(x)"),
    ("(2**61 - 1,)", "ops.relu(x)"),
    ("(4, 2**40)", "ops.sum(x, axis=1)"),
    ("(2**31 * 3, 2)", "ops.softmax(x)"),
    ("(2**40, 64)", "ops.matmul(x, np.ones((64, 8), np.float32))"),
    ("(2, 2**40)", "ops.topk(x, 2)[0]"),
])
def test_huge_extent_compiles(shape, op):
    r = _run_isolated(f"""
        import numpy as np
        import mlc_mlir as mlc
        from mlc_mlir import ops
        bb = mlc.GraphBuilder()
        with bb.function("main") as f:
            x = f.arg("x", {shape})
            f.output({op})
        mod = bb.finish()
        for threads in (1, 2):
            mlc.compile(mod, threads=threads)
        print("compiled")
    """)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-2000:]


def test_long_init_rows_are_written_in_chunks():
    """A matmul with few rows and 2**20 columns decomposes its init into rows of 2**19 per
    thread; written as one vector that row aborts LLVM's instruction selection."""
    r = _run_isolated("""
        import numpy as np
        import mlc_mlir as mlc
        from mlc_mlir import ops
        rng = np.random.default_rng(0)
        a = rng.standard_normal((4, 4)).astype(np.float32)
        b = rng.standard_normal((4, 2**20)).astype(np.float32)
        bb = mlc.GraphBuilder()
        with bb.function("main") as f:
            f.output(ops.matmul(f.arg("a", a.shape), f.arg("b", b.shape)))
        exe = mlc.compile(bb.finish(), threads=2)
        np.testing.assert_allclose(exe(a, b), a @ b, rtol=1e-4, atol=1e-4)
        print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_overflowing_shape_is_a_build_error():
    import mlc_mlir as mlc
    bb = mlc.GraphBuilder()
    with pytest.raises(mlc.BuildError, match="int64"):
        with bb.function("main") as f:
            f.arg("x", (2**62, 4))
