"""What Adasum costs beside the sum: `tfring.ops.allreduce(op="adasum")` against `op="sum"` on the
same tensors, in one job, 2 and 4 ranks on this machine.

    .venv/bin/python benchmarks/adasum.py [--ranks 2,4] [--repeats 15] [--workloads resnet50,small1000]

The workloads are `benchmarks/allreduce.py`'s (ResNet-50's gradient list, about 102 MB in 214
tensors; 1000 tensors of 256 floats), float32, the rank as the random seed. Each rank calls the
two ops in turns (`paired_calls`: the order flips every round, a barrier before each call), inside
a `tf.function` as a training step does. Printed: median milliseconds per call and adasum / sum.

Bytes, not measured here but what the times follow: the ring sum receives 2(P-1)/P x N bytes per
rank; Adasum gathers every rank's tensors, (P-1) x N (equal to the ring's at 2 ranks, twice it at
4), then computes the pairwise combination of every level in double on every rank.
"""

import argparse
import os
import statistics
import sys

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
from allreduce import paired_calls  # noqa: E402
from allreduce import report  # noqa: E402
from allreduce import tensors  # noqa: E402
from allreduce import tfring_step  # noqa: E402
from compression import last_result  # noqa: E402
from multihost import run_launcher  # noqa: E402

OPS = ("sum", "adasum")


def worker(args):
    """One rank: times both ops on each workload; rank 0 prints a RESULT line."""
    import tensorflow as tf

    import tfring

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tfring.init()
    samples = {}
    for workload in args.workloads:
        arrays = tensors(workload, tfring.rank())
        calls = {op: tfring_step(arrays, op=op) for op in OPS}
        timed = paired_calls(calls, tfring.ops.barrier, args.repeats)
        samples.update({f"{workload}/{op}": seconds for op, seconds in timed.items()})
    if tfring.rank() == 0:
        report("tfring", samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--workloads", default="resnet50,small1000")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per job (900)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.workloads = args.workloads.split(",")
    if args.worker:
        worker(args)
        return 0
    print("| workload | ranks | sum, ms | adasum, ms | adasum / sum |")
    print("|---|---:|---:|---:|---:|")
    for ranks in (int(r) for r in args.ranks.split(",")):
        argv = [sys.executable, "-m", "tfring", "run", "-np", str(ranks), sys.executable, HERE, "--worker",
                "--repeats", str(args.repeats), "--workloads", ",".join(args.workloads)]
        out, err = run_launcher(argv, args.timeout)
        result = last_result(out)
        if result is None:
            print(f"{ranks} ranks failed: {(out + err)[-2000:]}", file=sys.stderr)
            return 1
        for workload in args.workloads:
            sum_ms, adasum_ms = (1000 * statistics.median(result["samples"][f"{workload}/{op}"]) for op in OPS)
            print(f"| {workload} | {ranks} | {sum_ms:.1f} | {adasum_ms:.1f} | {adasum_ms / sum_ms:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
