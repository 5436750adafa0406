"""The `tfring` command line: `tfring run -np N COMMAND ...`."""

import argparse
import sys


def _parser():
    parser = argparse.ArgumentParser(prog="tfring", description="Data-parallel training for Keras 3 / TensorFlow.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start N ranks of COMMAND on this host",
                         description="Start N ranks of COMMAND on this host and supervise them.")
    run.add_argument("-np", "--num-processes", dest="np", type=int, required=True, help="number of ranks")
    run.add_argument("--timeout", type=float, default=None,
                     help="seconds a collective may stall before failing (sets TFRING_TIMEOUT)")
    run.add_argument("--all-output", action="store_true",
                     help="show every rank's stdout (default: rank 0's stdout, every rank's stderr)")
    run.add_argument("program", nargs=argparse.REMAINDER, help="the command to run, e.g. python train.py")
    return parser


def main(argv=None):
    """Entry point of the `tfring` command; returns its exit code."""
    args = _parser().parse_args(argv)
    if args.command == "run":
        from tfring.strategy import launcher

        program = args.program[1:] if args.program[:1] == ["--"] else args.program
        if not program:
            print("tfring run: no command given (e.g. tfring run -np 2 python train.py)", file=sys.stderr)
            return 2
        if args.np < 1:
            print(f"tfring run: -np must be at least 1, got {args.np}", file=sys.stderr)
            return 2
        if args.timeout is not None and args.timeout <= 0:
            print(f"tfring run: --timeout must be > 0, got {args.timeout}", file=sys.stderr)
            return 2
        return launcher.run(program, args.np, timeout=args.timeout, all_output=args.all_output)
    return 2


if __name__ == "__main__":
    sys.exit(main())
