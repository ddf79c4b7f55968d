"""Run PyTorch's OpInfo sample inputs (``torch.testing._internal.common_methods_invocations.op_db``,
the suite PyTorch tests its backends with) through ``from_torch`` + ``compile`` and compare with
eager at PyTorch's default float32 tolerances (``torch.testing.assert_close``: rtol 1.3e-6,
atol 1e-5); print pass / fail / unsupported per OpInfo entry with grouped reasons.

    python benchmarks/conformance/torch_opinfo.py [--include REGEX] [--max-samples N] [--dtype D]
        [--shard K/N] [--log FILE ...] [--logged-only] [--json]

Needs ``expecttest`` (``pip install 'mlc-mlir[test]'``) to import ``op_db``.

Each float32 sample becomes a module whose ``forward`` takes the sample's tensors and calls the
OpInfo's op with its other arguments as constants; it is exported (``torch.export`` +
``run_decompositions``). unsupported: the export fails, the graph holds an ATen op with no
converter (the reason names it), or the import refuses the sample (``BuildError``); fail:
anything else (wrong values, shapes or dtypes, a compile error, a crash). "claimed": the samples
whose exported graph has only ATen ops with a converter. Each sample runs in a forked child, so
an abort or a hang (``--timeout``) is one failed sample.

Every entry is tried by default; an entry whose first samples (up to ``CLAIM_PROBES``) all export
to graphs with an ATen op that has no converter (or fail to export) is "not claimed": it is
listed with the reason and its samples are not compiled. The entries of a long run can be split
(``--shard K/N``) and logged (``--log FILE``: one JSON line per entry, entries already in the file
are read instead of run), so a run can be resumed or its shards merged by one last call with all
logs.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import types
import warnings

import numpy as np
import torch

import mlc_mlir as mlc
from forked import run_forked  # benchmarks/conformance/forked.py; this folder is on sys.path
from mlc_mlir.frontends.torch import decomposition_table, from_exported_program
from mlc_mlir.target import host_target


def _reason(err: str) -> str:
    last = [ln for ln in err.strip().splitlines() if ln.strip()][-1] if err.strip() else err
    last = re.sub(r" \(node '[^']*', .*?\): ", ": ", last)
    last = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", last)
    return last[:160]


class _Call(torch.nn.Module):
    """``forward(*tensors)`` = ``op(*args, **kwargs)`` with the sample's tensors at their places."""

    def __init__(self, op, spec, consts):
        super().__init__()
        self.op, self.spec, self.consts = op, spec, consts

    def forward(self, *tensors):
        it = iter(tensors)
        leaves = [next(it) if c is _TENSOR else c for c in self.consts]
        args, kwargs = torch.utils._pytree.tree_unflatten(leaves, self.spec)
        return self.op(*args, **kwargs)


_TENSOR = object()


def _outputs(out):
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        return None
    return outs


def _import(opinfo, sample):
    """``(mod, tensors, want)`` of one sample exported and imported, or its ``(status, reason)``
    when it is not claimed."""
    leaves, spec = torch.utils._pytree.tree_flatten(((sample.input,) + tuple(sample.args), dict(sample.kwargs)))
    # compiled functions take C-contiguous arrays (never copied): OpInfo's non-contiguous sample
    # tensors are passed as contiguous copies, and eager runs on the same copies (an exported
    # input is a tensor of its own, so as_strided of a partial view cannot read the view's base)
    leaves = [x.clone(memory_format=torch.contiguous_format) if isinstance(x, torch.Tensor) else x for x in leaves]
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    consts = [_TENSOR if isinstance(x, torch.Tensor) else x for x in leaves]
    model = _Call(opinfo.op, spec, consts).eval()
    try:
        with torch.no_grad():
            want = _outputs(model(*tensors))
    except Exception as e:  # noqa: BLE001  (as_strided past the end of its own copy's storage)
        return "unsupported", _reason(f"eager on the contiguous copies: {type(e).__name__}: {e}")
    if want is None:
        return "unsupported", "the op returns something other than tensors"
    with torch.no_grad():
        again = _outputs(model(*tensors))
    if getattr(opinfo, "name", "") not in UNDEFINED_VALUES and any(
            not torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) for a, b in zip(want, again)):
        return "unsupported", "random: two eager calls differ (dropout, normal, randint, ...)"
    try:
        with torch.no_grad():
            ep = torch.export.export(model, tuple(tensors)).run_decompositions(decomposition_table())
    except Exception as e:  # noqa: BLE001  (any export failure is the sample's result)
        return "unsupported", _reason(f"export: {type(e).__name__}: {e}")
    try:
        mod = from_exported_program(ep)
    except mlc.BuildError as e:
        missing = re.findall(r"^  (aten\.\S+) x\d+", str(e), re.M)  # the import's unsupported-op list
        return "unsupported", ("no converter: " + ", ".join(missing)) if missing else _reason(f"BuildError: {e}")
    return mod, tensors, want


UNDEFINED_VALUES = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
"""Entries whose results hold uninitialized memory: only their shapes and dtypes are compared."""


TIES_IN_ANY_ORDER = {"topk"}
"""Entries whose index output may list equal values in any order (``torch.topk`` documents no
order among ties, and its CPU kernel's differs from a first-index rule): that output is compared
by the values it selects (``gather`` of the input along the op's dim) rather than position by
position."""


def _tie_indices(opinfo, sample, tensors, g, w, i) -> bool:
    """Whether output ``i`` is an index output of a :data:`TIES_IN_ANY_ORDER` entry whose
    indices ``g`` select the same values as eager's ``w``."""
    if opinfo.name not in TIES_IN_ANY_ORDER or i != 1 or w.dtype != torch.int64 or g.shape != w.shape:
        return False
    dim = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("dim", -1)
    x = tensors[0]
    if x.dim() == 0:
        return torch.equal(g, w)
    return torch.equal(x.gather(dim, g), x.gather(dim, w))


def run_sample(opinfo, sample) -> tuple:
    """(status, reason) of one OpInfo sample: ``pass``, ``fail`` or ``unsupported``."""
    imported = _import(opinfo, sample)
    if isinstance(imported[0], str):
        return imported
    mod, tensors, want = imported
    try:
        got = mlc.compile(mod)(*[t.numpy().astype(np.int8) if t.dtype == torch.bool else t.numpy() for t in tensors])
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        if len(got) != len(want):
            return "fail", f"{len(got)} outputs; expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            g = np.asarray(g)
            if w.dtype == torch.bfloat16:  # torch.from_numpy has no ml_dtypes bfloat16
                g = torch.from_numpy(g.astype(np.float32)).to(torch.bfloat16)
            else:
                g = torch.from_numpy(g.astype(bool) if w.dtype == torch.bool else np.ascontiguousarray(g))
            if opinfo.name in UNDEFINED_VALUES:
                if g.shape != w.shape or g.dtype != w.dtype:
                    return "fail", f"shape/dtype {tuple(g.shape)} {g.dtype}; expected {tuple(w.shape)} {w.dtype}"
                continue
            if _tie_indices(opinfo, sample, tensors, g, w, i):
                continue
            torch.testing.assert_close(g.reshape(w.shape) if g.numel() == w.numel() and g.dim() != w.dim() and
                                       w.dim() == 0 else g, w.contiguous(), equal_nan=True)
    except Exception as e:  # noqa: BLE001  (a wrong value or a compile error is a failed sample)
        return "fail", _reason(f"{type(e).__name__}: {e}")
    return "pass", ""


def probe(opinfo, sample) -> tuple:
    """``("claimed", "")`` when the sample exports and imports (no compile), else its
    ``(status, reason)``."""
    imported = _import(opinfo, sample)
    return imported if isinstance(imported[0], str) else ("claimed", "")


def _isolated(fn, timeout: int) -> tuple:
    """``fn()`` in a forked child (:func:`forked.run_forked`): its (status, reason), an exception
    as a failed sample, or a failure naming a signal/timeout."""
    def sample():
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            return "fail", _reason(f"{type(e).__name__}: {e}")

    return run_forked(sample, timeout)


CLAIM_PROBES = 3  # samples tried before an entry counts as not claimed


def _entry(opinfo, dtype, max_samples: int, timeout: int) -> dict:
    """One entry's record: ``{"claimed": bool, "samples": [(status, reason), ...]}``; the samples
    of an entry that is not claimed are its probes' outcomes."""
    try:
        samples = list(opinfo.sample_inputs("cpu", dtype, requires_grad=False))[:max_samples]
    except Exception as e:  # noqa: BLE001
        return {"claimed": False, "samples": [("unsupported", _reason(f"sample_inputs: {type(e).__name__}: {e}"))]}
    probes = []
    for s in samples[:CLAIM_PROBES]:
        try:  # in this process: an export and an import (no compile) leave no thread behind
            probes.append(probe(opinfo, s))
        except Exception as e:  # noqa: BLE001
            probes.append(("unsupported", _reason(f"{type(e).__name__}: {e}")))
        if probes[-1][0] == "claimed":
            break
    else:
        return {"claimed": False, "samples": probes}
    return {"claimed": True, "samples": [_isolated(lambda s=s: run_sample(opinfo, s), timeout) for s in samples]}


def _warm_up() -> None:
    """Import torch.export's lazy modules and probe the host target in this process once, so
    that each forked child does not redo it (several seconds a sample). Nothing is compiled here:
    a forked child of a process that ran the JIT engine can hang."""
    host_target()
    probe(types.SimpleNamespace(op=torch.neg), types.SimpleNamespace(input=torch.ones(2), args=(), kwargs={}))


def _load(logs, max_samples: int) -> dict:
    done = {}
    for path in logs or ():
        try:
            with open(path) as f:
                for line in f:
                    if line.strip():
                        rec = json.loads(line)
                        done[rec["name"]] = {"claimed": rec["claimed"],
                                             "samples": [tuple(x) for x in rec["samples"][:max_samples]]}
        except FileNotFoundError:
            pass
    return done


def run(include: str = ".*", max_samples: int = 8, timeout: int = 120, dtype: str = "float32",
        shard: tuple = (0, 1), logs=None, logged_only: bool = False) -> dict:
    """``{entry name: {"claimed": bool, "samples": [(status, reason), ...]}}`` for the ``dtype``
    samples of the selected entries (those matching ``include``, every ``shard[1]``-th from
    ``shard[0]``); entries found in the ``logs`` files are read, not run, and the new ones are
    appended to the first log; ``logged_only`` runs nothing (a table of the logs)."""
    from torch.testing._internal.common_methods_invocations import op_db

    torch.set_num_threads(1)  # no intra-op thread pool across fork
    warnings.filterwarnings("ignore")  # torch.export's pytree deprecations, the ops' own warnings
    tdtype = getattr(torch, dtype)
    pattern = re.compile(include)
    done = _load(logs, max_samples)
    _warm_up()
    results = {}
    for i, opinfo in enumerate(op_db):
        name = opinfo.name + (f".{opinfo.variant_test_name}" if opinfo.variant_test_name else "")
        if not pattern.search(name) or tdtype not in opinfo.supported_dtypes("cpu"):
            continue
        if name in done:
            results[name] = done[name]
            continue
        if i % shard[1] != shard[0] or logged_only:
            continue
        results[name] = _entry(opinfo, tdtype, max_samples, timeout)
        if logs:
            with open(logs[0], "a") as f:
                f.write(json.dumps({"name": name, **results[name]}) + "\n")
    return results


def table(results: dict) -> dict:
    """Per claimed entry: pass / fail / unsupported counts and reasons; totals over the claimed
    entries' samples; the entries not claimed with their first reason, and the reasons' counts."""
    ops, total, groups, not_claimed = {}, collections.Counter(), collections.Counter(), {}
    for name, rec in sorted(results.items()):
        outcomes = rec["samples"]
        if not rec["claimed"]:
            not_claimed[name] = outcomes[-1][1] if outcomes else ""
            continue
        c = collections.Counter(s for s, _ in outcomes)
        ops[name] = {**{k: c[k] for k in ("pass", "fail", "unsupported")},
                     "reasons": dict(collections.Counter(f"{s}: {r}" for s, r in outcomes if r))}
        groups.update(f"{s}: {r}" for s, r in outcomes if s == "fail")
        total.update(c)
    claimed = total["pass"] + total["fail"]
    return {"ops": ops, "total": dict(total), "claimed_samples": claimed,
            "claimed_pass_rate": total["pass"] / claimed if claimed else None,
            "ops_with_a_claimed_sample": sum(1 for v in ops.values() if v["pass"] + v["fail"]),
            "failure_groups": dict(groups.most_common()),
            "not_claimed": not_claimed,
            "not_claimed_reasons": dict(collections.Counter(not_claimed.values()).most_common())}


def _print(res: dict) -> None:
    print(f"{'OpInfo entry':40s} {'pass':>5s} {'fail':>5s} {'unsup':>5s}")
    for k, v in res["ops"].items():
        print(f"{k[:40]:40s} {v['pass']:5d} {v['fail']:5d} {v['unsupported']:5d}")
        for reason, n in collections.Counter(v["reasons"]).most_common(3):
            print(f"    {n:3d} x {reason}")
    print("failure groups (claimed entries):")
    for reason, n in res["failure_groups"].items():
        print(f"    {n:3d} x {reason}")
    print(f"entries not claimed: {len(res['not_claimed'])}; their reasons:")
    for reason, n in res["not_claimed_reasons"].items():
        print(f"    {n:3d} x {reason}")
    t = collections.Counter(res["total"])
    print(f"total: {t['pass']} pass, {t['fail']} fail, {t['unsupported']} unsupported of {sum(t.values())} samples "
          f"of {len(res['ops'])} claimed entries")
    rate = res["claimed_pass_rate"]
    print(f"claimed samples: {t['pass']} pass of {res['claimed_samples']}"
          + (f" ({100.0 * rate:.1f}%)" if rate is not None else "")
          + f"; entries with a claimed sample: {res['ops_with_a_claimed_sample']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--include", default=".*", help="regex of OpInfo names (default: every entry)")
    ap.add_argument("--max-samples", type=int, default=8, help="samples per entry (default 8)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per sample (default 120)")
    ap.add_argument("--dtype", default="float32", help="the samples' dtype (default float32; e.g. int64, bool)")
    ap.add_argument("--shard", default="0/1", help="K/N: run every N-th selected entry from the K-th (default 0/1)")
    ap.add_argument("--log", action="append", help="JSON-lines log: entries in it are read, new ones appended "
                    "to the first (repeat to merge shards)")
    ap.add_argument("--logged-only", action="store_true", help="run nothing: the table of the entries in the logs")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    k, n = (int(x) for x in args.shard.split("/"))
    res = table(run(args.include, args.max_samples, args.timeout, args.dtype, (k, n), args.log, args.logged_only))
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        _print(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
