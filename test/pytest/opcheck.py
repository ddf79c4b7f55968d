"""Helper for op tests: build a one-function module from a lambda, compile, run."""

import mlc_mlir as mlc


def run(build, *inputs, dtype=None):
    """Build ``main(*inputs) = build(*args)``, compile for the CPU and run on ``inputs``."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        args = [f.arg(f"a{i}", shape=x.shape, dtype=dtype or x.dtype) for i, x in enumerate(inputs)]
        f.output(build(*args))
    return mlc.compile(bb.finish())(*inputs)


def build_only(build, *specs):
    """Build (without compiling) a function with arguments of the given (shape, dtype) specs."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        args = [f.arg(f"a{i}", shape=s, dtype=d) for i, (s, d) in enumerate(specs)]
        f.output(build(*args))
    return bb.finish()
