"""``mlc.llm.wait_policy.WaitPolicy``: the decode step's libomp blocktime chosen by timing the
step (a fake step whose duration depends on the blocktime it runs under), kept by a user's
``KMP_BLOCKTIME``, restored on the calling thread after each step, and off on one thread."""

import ctypes
import time

import pytest

from mlc_mlir.llm.wait_policy import WaitPolicy
from mlc_mlir.pipeline.libraries import libomp_path

OMP = ctypes.CDLL(libomp_path())


def _step(slow_when_sleeping: bool):
    """A step that takes 20 ms longer under one of the two blocktimes, and records them."""
    seen = []

    def step(x):
        bt = OMP.kmp_get_blocktime()
        seen.append(bt)
        if (bt == 0) == slow_when_sleeping:
            time.sleep(0.02)
        return x + 1
    return step, seen


@pytest.mark.parametrize("slow_when_sleeping", [False, True])
def test_chooses_the_faster_blocktime_and_restores_the_thread(monkeypatch, slow_when_sleeping):
    for v in ("KMP_BLOCKTIME", "OMP_WAIT_POLICY", "KMP_LIBRARY"):
        monkeypatch.delenv(v, raising=False)
    before = OMP.kmp_get_blocktime()
    policy = WaitPolicy(threads=2, probe=3, period=10)
    spin = policy.candidates[0]
    assert policy.candidates == [spin, 0] and spin > 0
    step, seen = _step(slow_when_sleeping)
    assert [policy.run(step, i) for i in range(10)] == list(range(1, 11))
    assert sorted(seen[:6]) == [0, 0, 0, spin, spin, spin]          # the probe alternates
    want = spin if slow_when_sleeping else 0
    assert policy.chosen == want and seen[6:] == [want] * 4
    assert OMP.kmp_get_blocktime() == before                        # the thread's own setting
    policy.run(step, 0)                                              # a new period probes again
    assert policy.chosen is None


@pytest.mark.parametrize("threads,env", [(1, None), (2, "KMP_BLOCKTIME"), (2, "OMP_WAIT_POLICY")])
def test_keeps_the_users_setting_and_one_thread(monkeypatch, threads, env):
    for v in ("KMP_BLOCKTIME", "OMP_WAIT_POLICY", "KMP_LIBRARY"):
        monkeypatch.delenv(v, raising=False)
    if env:
        monkeypatch.setenv(env, "passive" if env == "OMP_WAIT_POLICY" else "7")
    policy = WaitPolicy(threads=threads, probe=1, period=4)
    step, seen = _step(False)
    before = OMP.kmp_get_blocktime()
    for i in range(4):
        policy.run(step, i)
    assert policy.candidates == [] and policy.chosen is None
    assert seen == [before] * 4
