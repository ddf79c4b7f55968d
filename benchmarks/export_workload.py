"""Export one ``tune_cpu.py`` workload, compiled with the default schedules, as a library, so
that libraries built at two commits can be timed in one process
(``matmul_interleaved_cpu.py <workload> <threads> <rounds> libold=<a.so> libnew=<b.so>``)::

    git worktree add /tmp/base <commit>
    PYTHONPATH=/tmp/base python benchmarks/export_workload.py dense64x900x300+bias+relu 2 /tmp/base.so
    python benchmarks/export_workload.py dense64x900x300+bias+relu 2 /tmp/new.so

The package that ``PYTHONPATH`` selects compiles it (this script only builds the workload).
"""

from __future__ import annotations

import sys

from tune_cpu import build_ours  # this folder is on sys.path


def main(argv) -> None:
    import mlc_mlir as mlc

    name, threads, out = argv[0], int(argv[1]), argv[2]
    mod, _ = build_ours(name)
    path = mlc.compile(mod, threads=threads).export_library(out)
    print(f"{name} threads={threads}: {path} (compiled by {mlc.__file__})")


if __name__ == "__main__":
    main(sys.argv[1:])
