"""``mlc``: the project's command line (``mlc demo``; more subcommands join as they land)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ..errors import MlcError


def _demo(args) -> int:
    from .demo import run_demo

    res = run_demo(dump_ir=args.dump_ir, seed=args.seed)
    if res["agreement"] < 1.0 or res["agreement_b1"] < 1.0:
        print("error: predictions differ from scikit-learn's", file=sys.stderr)
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mlc``; returns the process exit code."""
    p = argparse.ArgumentParser(prog="mlc", description="mlc-mlir: an ML compiler on MLIR")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="train an MLP on digits, compile it, compare with scikit-learn")
    d.add_argument("--dump-ir", metavar="DIR", help="write each compile stage's IR to DIR")
    d.add_argument("--seed", type=int, default=0, help="data split and training seed")
    d.set_defaults(fn=_demo)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except MlcError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
