"""The tuning database: records round-trip, a torn last line is skipped (and truncated on the
next commit), records of another target are never returned, and a tune killed with SIGKILL
keeps every completed record and resumes to its trial budget without duplicates."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mlc_mlir.errors import TuningError
from mlc_mlir.tune import Database, TuningRecord
from mlc_mlir.tune.record import candidate_id, rename_blocks


def _rec(workload="w", target="cpu-a", lat=(1.0,), error=None, trace='{"insts": []}', names=None):
    return TuningRecord(workload, target, trace, {}, tuple(lat), error, time.time(),
                        candidate_id(workload, target, trace + str(lat) + str(error)), "f",
                        names or {}, 1e6)


def test_record_round_trip_and_best_respects_target(tmp_path):
    db = Database(tmp_path / "db.jsonl")
    db.commit(_rec(lat=(2.0, 3.0)))
    db.commit(_rec(lat=(0.5,), target="cpu-b"))           # faster, but another target
    db.commit(_rec(lat=(), error="crash: SIGSEGV"))
    db.commit(_rec(lat=(1.5, 1.7)))
    again = Database(tmp_path / "db.jsonl")
    assert [r.to_json() for r in again.records()] == [r.to_json() for r in db.records()]
    assert again.best("w", "cpu-a").latency_ms == 1.5
    assert again.best("w", "cpu-b").latency_ms == 0.5
    assert again.best("w", "cpu-c") is None and again.best("other", "cpu-a") is None
    assert again.query_best_trace("w", "cpu-c") is None
    assert again.query_best_trace("w", "cpu-a") == '{"insts": []}'
    assert len(again.records(workload="w", target="cpu-a")) == 3
    assert abs(again.best("w", "cpu-a").gflops - 1e6 / 1.5e6) < 1e-12


def test_torn_last_line_is_skipped_and_truncated_on_commit(tmp_path):
    path = tmp_path / "db.jsonl"
    db = Database(path)
    db.commit(_rec(lat=(1.0,)))
    whole = _rec(lat=(2.0,)).to_json()
    with open(path, "a") as f:
        f.write(whole[: len(whole) // 2])      # a run killed mid-write
    db2 = Database(path)
    assert len(db2) == 1
    db2.commit(_rec(lat=(3.0,)))
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)
    assert len(Database(path)) == 2


def test_bad_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "db.jsonl"
    path.write_text(_rec().to_json() + "\nnot json\n" + _rec(lat=(2.0,)).to_json() + "\n")
    with pytest.raises(TuningError, match=r"db.jsonl:2 is not a tuning record"):
        Database(path)


def test_rename_blocks_maps_through_canonical_names():
    trace = json.dumps({"format": "mlc-trace-v1", "insts": [
        {"kind": "get_block", "inputs": ["dense"], "attrs": {"func_name": "f"}, "outputs": ["b0"]}],
        "decisions": {}})
    out = json.loads(rename_blocks(trace, {"dense": "op1", "w": "op0"}, {"layer7": "op1", "w2": "op0"}, "g"))
    assert out["insts"][0]["inputs"] == ["layer7"] and out["insts"][0]["attrs"]["func_name"] == "g"
    with pytest.raises(TuningError, match="gets block 'dense'"):
        rename_blocks(trace, {"dense": "op1"}, {"x": "op0"})


#: A tune whose space (83**3 four-way tilings of a 64**3 matmul) no trial budget of these tests
#: exhausts, so a run given ``NEVER_DONE`` trials is still running whenever a signal arrives,
#: however fast the machine.
SCRIPT = textwrap.dedent("""
    import sys
    import mlc_mlir as mlc
    from mlc_mlir import ops
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("a", (64, 64)); b = f.arg("b", (64, 64))
        f.output(ops.matmul(a, b))

    def space(sch):
        i, j, k = sch.get_loops(sch.get_block("matmul"))
        sch.split(i, sch.sample_perfect_tile(i, 4, 32))
        sch.split(j, sch.sample_perfect_tile(j, 4, 32))
        sch.split(k, sch.sample_perfect_tile(k, 4, 32))

    mlc.tune(bb.finish(), trials=int(sys.argv[2]), work_dir=sys.argv[1], space=space,
             progress=False, executor=mlc.tune.LocalExecutor(1), batch_size=2)
""")
NEVER_DONE = 10**6


def _wait_for_records(proc, db_path, n):
    """Block until ``db_path`` has ``n`` whole records (the run is then mid-way by construction);
    the deadline only guards against a hung child."""
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        if db_path.exists() and db_path.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"the tune exited ({proc.poll()}) or hung before writing {n} records")


def test_sigkill_keeps_completed_records_and_resume_reaches_budget(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    work = tmp_path / "work"
    db_path = work / "database.jsonl"
    proc = subprocess.Popen([sys.executable, str(script), str(work), str(NEVER_DONE)])
    try:
        _wait_for_records(proc, db_path, 5)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    data = db_path.read_bytes()
    records = [TuningRecord.from_json(line.decode()) for line in data.split(b"\n")[:-1]]  # whole lines
    assert len(records) >= 5
    assert len({r.candidate for r in records}) == len(records)
    killed_at = len(Database(db_path))
    budget = killed_at + 6
    subprocess.run([sys.executable, str(script), str(work), str(budget)], check=True, timeout=300)
    db = Database(db_path)
    assert len(db) == budget
    assert len({r.candidate for r in db.records()}) == budget
    assert [r.candidate for r in db.records()][:killed_at] == [r.candidate for r in records][:killed_at]


def test_ctrl_c_stops_cleanly_and_keeps_records(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    work = tmp_path / "work"
    db_path = work / "database.jsonl"
    proc = subprocess.Popen([sys.executable, str(script), str(work), str(NEVER_DONE)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_records(proc, db_path, 3)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-2000:]
    db = Database(db_path)
    assert 3 <= len(db) < NEVER_DONE
    assert db_path.read_bytes().count(b"\n") == len(db)      # every record whole
    assert len({r.candidate for r in db.records()}) == len(db)
