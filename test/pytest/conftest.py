"""Shared pytest fixtures (a seeded RNG, ``mlc``'s ``main`` in this process) and the parallel run's settings.

``python -m pytest -n auto`` (pytest-xdist, the README's test command) starts one worker per
core, at most :data:`MAX_WORKERS`, and sends each test file to one worker (xdist's ``loadfile``
distribution) unless ``--dist`` names another mode: a module-scoped fixture (a shared compile, an
ONNX export) is then built once, as in a serial run. Without ``-n`` these hooks do nothing."""

import os

import numpy as np
import pytest

#: Workers of ``-n auto``: each imports torch and the compiler (about 2 CPU s, 1 GB), and the
#: largest test files (test_llm, test_frontend_torch_ops: 1-2 minutes each) bound the run.
MAX_WORKERS = 8


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: the cores this process may run on, at most :data:`MAX_WORKERS`
    (``PYTEST_XDIST_AUTO_NUM_WORKERS`` still overrides)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_WORKERS, cores or 1))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``-n`` without ``--dist`` (xdist's default ``load``, one test at a time): one file per
    worker instead (``loadfile``); another ``--dist`` is xdist's own."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadFileScheduling   # only under xdist: it is what calls this
    return LoadFileScheduling(config, log)


@pytest.fixture
def rng():
    """A numpy Generator with a fixed seed."""
    return np.random.default_rng(0)


@pytest.fixture
def mlc_main(capfd):
    """``mlc_main(*args)``: ``mlc``'s ``main(args)`` run in this process (the interpreter, torch
    and the compiler are loaded already; a ``python -m mlc_mlir.cli.mlc`` process costs seconds):
    ``(exit code, stdout, stderr)``, argparse's own errors exiting through ``SystemExit``;
    ``capfd`` sees what native code writes to fd 1 and 2 as well."""
    from mlc_mlir.cli.mlc import main

    def run(*args):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:
            code = e.code
        out, err = capfd.readouterr()
        return code, out, err
    return run
