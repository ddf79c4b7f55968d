"""``mlc``: the project's command line (``mlc demo``, ``tune``, ``compile``, ``run``, ``generate``)."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import List, Optional

from ..errors import MlcError
from .demo import run_demo
from .generate_command import add_generate_command
from .model_commands import add_model_commands
from .tune_command import run_tune


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


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
    res = run_demo(dump_ir=args.dump_ir, seed=args.seed, tune_trials=args.tune, tune_dir=args.tune_dir)
    if res["agreement"] < 1.0 or res["agreement_b1"] < 1.0:
        print("error: predictions differ from scikit-learn's", file=sys.stderr)
        return 1
    return 0


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit code 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _one_line(text: str) -> str:
    """The first line of a message (with the next one when the first ends in a colon)."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()] or [""]
    n = 2 if len(lines) > 1 and lines[0].endswith(":") else 1
    return " ".join(lines[:n]) + (" [more with --debug]" if len(lines) > n else "")


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mlc``; returns the process exit code: 0 ok, 1 a failed check (the demo's
    predictions) or an internal error, 2 a user error (bad arguments, unreadable or invalid
    files, any :class:`MlcError`), 130 interrupted.

    Every error is one line on stderr; ``--debug`` adds the full message and the traceback.
    """
    p = _Parser(prog="mlc", description="mlc-mlir: an ML compiler on MLIR")
    p.add_argument("--debug", action="store_true", help="on an error, print the full message and traceback")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="train an MLP on digits, compile it, compare with scikit-learn")
    d.add_argument("--dump-ir", metavar="DIR", type=_writable_dir,
                   help="write each compile stage's IR to DIR")
    d.add_argument("--seed", type=_non_negative_int, default=0, help="data split and training seed (>= 0)")
    d.add_argument("--tune", type=_non_negative_int, default=0, metavar="N",
                   help="also tune the model with N trials and compare with the default schedules")
    d.add_argument("--tune-dir", type=_writable_dir, default=None, metavar="DIR",
                   help="where the tuning records and curve go (default: a new folder under the "
                        "system's temporary directory, kept)")
    d.set_defaults(fn=_demo)
    t = sub.add_parser("tune", help="tune a graph module (.mlir) and keep the records")
    t.add_argument("module", help="MLIR file of a graph module (e.g. from mlc-opt or str(mod))")
    t.add_argument("--trials", type=_positive_int, default=64, help="measured candidates in all")
    t.add_argument("-o", dest="work_dir", type=_writable_dir, default="tune",
                   help="folder of database.jsonl and tuning_curve.png (resumes if present)")
    t.add_argument("--timeout", type=float, default=30.0, help="limit per candidate build/run, s")
    t.set_defaults(fn=lambda a: run_tune(a.module, a.trials, a.work_dir, a.timeout))
    add_model_commands(sub)
    add_generate_command(sub, _positive_int)
    for cmd in sub.choices.values():  # `mlc compile --debug ...` as well as `mlc --debug compile ...`
        cmd.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                         help="on an error, print the full message and traceback")
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        print("mlc: interrupted", file=sys.stderr)
        return 130
    except MlcError as e:
        if args.debug:
            traceback.print_exc()
        print(f"error: {e}" if args.debug else f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  (a bug, not a user error: one line unless --debug)
        if args.debug:
            traceback.print_exc()
        print(f"internal error: {type(e).__name__}: {_one_line(e)} (please report it; --debug shows "
              "the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
