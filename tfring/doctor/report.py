"""`tfring doctor`'s command line: run the checks, print them (or JSON), exit 0 when nothing fails."""

import dataclasses
import json
import sys

from tfring.doctor.finding import FAIL
from tfring.doctor.finding import WARN

_MARKS = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "absent": "--  "}


def add_arguments(parser):
    """Adds `tfring doctor`'s options to `parser` (an argparse parser)."""
    parser.add_argument("--self-test", action="store_true",
                        help="also run a 2-rank job here: allreduce results against NumPy, and the bandwidth")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", default=None,
                       help="the hosts a job will use (host1:4,host2:4): ssh must reach each")
    where.add_argument("--hostfile", default=None, help="the same, as a file of 'host slots=N' lines")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds the self-test may take (default 300)")


def main(args):
    """Runs the checks `args` asks for (see `add_arguments`), prints the report and returns the exit
    code: 0 when no finding is a failure, 1 otherwise, 2 for bad arguments.

    Args:
        args: the parsed options (`add_arguments`).

    Returns:
        int, the exit code.

    Example:

    >>> import argparse
    >>> parser = argparse.ArgumentParser(); add_arguments(parser)
    >>> main(parser.parse_args([]))
    """
    from tfring.doctor import checks
    from tfring.doctor import selftest
    from tfring.launch import hosts

    try:
        host_list = (hosts.parse_host_list(args.hosts) if args.hosts else
                     hosts.read_hostfile(args.hostfile) if args.hostfile else None)
    except ValueError as e:
        print(f"tfring doctor: {e}", file=sys.stderr)
        return 2
    findings = checks.all_checks(host_list)
    if not args.json:
        _print(findings)
    result = None
    if args.self_test:
        if not args.json:
            print("running the self-test: a 2-rank job on this host ...", flush=True)
        finding, result = selftest.run(timeout=args.timeout)
        findings.append(finding)
        if not args.json:
            _print([finding])
    failed = [f.name for f in findings if f.status == FAIL]
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [dataclasses.asdict(f) for f in findings],
                          "self_test": result}, indent=1))
    else:
        warned = [f.name for f in findings if f.status == WARN]
        print(f"tfring doctor: {len(failed)} failed ({', '.join(failed)}), {len(warned)} warnings" if failed else
              f"tfring doctor: usable here" + (f" ({len(warned)} warnings: {', '.join(warned)})" if warned else ""))
    return 1 if failed else 0


def _print(findings):
    width = max(len(f.name) for f in findings)
    for f in findings:
        print(f"{_MARKS[f.status]}  {f.name.ljust(width)}  {f.detail}", flush=True)
        if f.fix:
            print(f"      {' ' * width}  fix: {f.fix}", flush=True)
