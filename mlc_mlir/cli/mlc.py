"""``mlc``: the project's command line (``mlc demo``; more subcommands join as they land)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from ..errors import MlcError
from .demo import run_demo


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _writable_dir(path: str) -> str:
    """Create ``path`` if needed and check it is a writable folder (before any long work)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot create {path}: {e.strerror}") from None
    if not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{path} is not writable")
    return path


def _demo(args) -> int:
    try:
        import sklearn  # noqa: F401  (the optional extra that trains the demo's model)
    except ImportError:
        print("error: mlc demo trains its model with scikit-learn, which is not installed: "
              "pip install 'mlc-mlir[demo]'", file=sys.stderr)
        return 2
    res = run_demo(dump_ir=args.dump_ir, seed=args.seed)
    if res["agreement"] < 1.0 or res["agreement_b1"] < 1.0:
        print("error: predictions differ from scikit-learn's", file=sys.stderr)
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mlc``; returns the process exit code (0 ok, 1 failure, 2 usage)."""
    p = argparse.ArgumentParser(prog="mlc", description="mlc-mlir: an ML compiler on MLIR")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="train an MLP on digits, compile it, compare with scikit-learn")
    d.add_argument("--dump-ir", metavar="DIR", type=_writable_dir,
                   help="write each compile stage's IR to DIR")
    d.add_argument("--seed", type=_non_negative_int, default=0, help="data split and training seed (>= 0)")
    d.set_defaults(fn=_demo)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except MlcError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
