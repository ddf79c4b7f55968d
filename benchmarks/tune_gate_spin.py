"""Why a 2-thread candidate measured slow on a 2-core host: the OpenMP threads of the *other*
tuning worker. Two worker processes hold the same 2-thread build (the default schedule of a
matmul); worker B runs it, then worker A runs it at once (``RunGate`` lets runs follow each
other), and we read how much CPU B's process burns during A's run (``/proc``) and A's time.
With ``RunGate()`` (only building workers are stopped) B's libomp threads spin for
``KMP_BLOCKTIME`` (200 ms) after their run and take a core from A; with ``RunGate([a, b])``
(every other worker is stopped during an exclusive run) they burn nothing. A third case waits
0.5 s after B's run (its threads asleep) as the undisturbed reference. Rounds interleave the
cases; min and median of A's per-call time (ms) per case.

    python benchmarks/tune_gate_spin.py [--n 256] [--rounds 8]
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "pytest"))
import tunecheck  # noqa: E402  (test/pytest: the matmul module of the tuner tests)
from mlc_mlir.schedule.trace import Trace  # noqa: E402
from mlc_mlir.target import describe, host_target  # noqa: E402
from mlc_mlir.tune import MeasureInput, extract_tasks  # noqa: E402
from mlc_mlir.tune.measure import RunGate, WorkerProcess, build_on, run_on  # noqa: E402


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of every thread of process ``pid``."""
    tot = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tot += int(fields[11]) + int(fields[12])
    return tot / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="matmul size")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    task, = extract_tasks(tunecheck.matmul(args.n))
    inp = MeasureInput(task.func_name, str(task.module), Trace().as_json(), host_target(),
                       threads=2, number=20, repeat=5)
    a, b = WorkerProcess(), WorkerProcess()
    gates = {"back to back, RunGate() (B not stopped)": RunGate(),
             "back to back, RunGate([a, b]) (B stopped)": RunGate([a, b]),
             "0.5 s after B's run": RunGate()}
    times = {k: [] for k in gates}
    burned = {k: 0.0 for k in gates}
    try:
        for w in (a, b):
            assert build_on(w, inp, 0, 300, RunGate())[0] is None
        for _ in range(args.rounds):
            for case, gate in gates.items():
                run_on(b, 0, 60, gate, True)
                if case.startswith("0.5 s"):
                    time.sleep(0.5)
                c0 = cpu_s(b._proc.pid)
                res = run_on(a, 0, 60, gate, True)
                burned[case] += cpu_s(b._proc.pid) - c0
                times[case].append(min(res.latencies_ms))
    finally:
        a.close()
        b.close()
    print(f"CPU: {describe(host_target())}; load average {os.getloadavg()[0]:.1f}")
    print(f"matmul {args.n} (default schedule, 2 threads), {args.rounds} rounds")
    for case in gates:
        v = times[case]
        print(f"{case:45s} A: min {min(v):.4f} ms, median {statistics.median(v):.4f} ms; "
              f"B burned {burned[case] * 1e3:.0f} ms CPU during A's runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
