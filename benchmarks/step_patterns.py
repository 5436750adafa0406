"""What tfring's allreduce op adds to a step, in the patterns training steps have, beside TensorFlow
alone, in one run.

    .venv/bin/python benchmarks/step_patterns.py [--tensors 1000] [--size 256] [--separate 100]
        [--repeats 25] [--no-spin] [--json FILE]

Two ranks on this host (`tfring run -np 2`, one intra-op thread each). Each pattern is one
`tf.function`, timed as the median of `--repeats` calls (after two untimed ones, each call behind
a barrier, the two in turns), once with tfring's op and once with TensorFlow alone (`tf.identity_n` where the op
was), so the difference is what the collective adds. Grappler removes `identity_n` and may then
fold the ops on either side of it (in the optimizer pattern `(v * 1.0001) * 1e-9` becomes one
multiply), which it cannot do around a collective; so a third peer puts tfring's own pass-through
op (`TfringRelay`, which grappler leaves alone and which hands the same buffers on) in the
collective's place; and a fourth puts the pass-through behind a tfring barrier that waits for every
input, so the ranks meet there and no data moves (what tfring adds over it is what moving the
tensors costs). The table gives what tfring adds over all three:

- captured: `--tensors` float32 vectors of `--size` captured by the function, every result
  returned (the README's figure);
- variables: the vectors read from variables, all-reduced in one op, every result reduced and the
  sums added up (a step that reads its gradients' sources and uses every result);
- optimizer: the vectors computed from variables (`v * 1.0001`), all-reduced in one op, each result
  feeding an `assign_sub` (an optimizer's pattern);
- separate: `--separate` vectors of 64 floats, each all-reduced by an op of its own in one function
  (as a step reduces batch-norm statistics and metric variables one by one), beside the same
  vectors in one op; and the engine alone on the same NumPy buffers through its C API (no
  TensorFlow), one collective per vector and one for all; and, for one op each, the same
  collectives as start ops chained in program order and waited for after (`tfring.ops.started`).

Printed: per pattern, the median ms with TensorFlow alone, with the pass-through, behind the barrier
and with tfring, the ms tfring adds over each, and that per 1000 tensors. The calls take turns, the order reversed
every other round.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
from allreduce import _quiet_env  # noqa: E402
from allreduce import core_step  # noqa: E402
from allreduce import paired_calls  # noqa: E402
from allreduce import parse_results  # noqa: E402
from allreduce import report  # noqa: E402

SEPARATE_SIZE = 64  # floats per separately reduced vector: a batch-norm layer's statistic


def _variables(count, size, seed):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    return [tf.Variable(rng.standard_normal(size).astype("float32")) for _ in range(count)]


def captured(reduce, variables):
    """The vectors captured as constants, every result returned."""
    import tensorflow as tf

    grads = [tf.constant(v.numpy()) for v in variables]
    return tf.function(lambda: reduce(grads))


def read_and_summed(reduce, variables):
    """The vectors read from variables, reduced, every result summed."""
    import tensorflow as tf

    return tf.function(lambda: tf.add_n([tf.reduce_sum(r) for r in reduce([v.read_value() for v in variables])]))


def optimizer_like(reduce, variables):
    """The vectors computed from variables, reduced, each result feeding an `assign_sub`."""
    import tensorflow as tf

    def step():
        reduced = reduce([v * 1.0001 for v in variables])
        for v, r in zip(variables, reduced):
            v.assign_sub(r * 1e-9)
        return tf.constant(0.0)
    return tf.function(step)


def separately(reduce, variables):
    """Each vector reduced by an op of its own."""
    import tensorflow as tf

    return tf.function(lambda: tf.add_n([tf.reduce_sum(reduce([v.read_value()])[0]) for v in variables]))


def separately_started(variables):
    """Each vector reduced by a collective of its own, started (`tfring.ops.started`: start ops chained
    in program order, each returning at once) before any is waited for."""
    import tensorflow as tf

    from tfring.ops import started

    def step():
        pending = [started.allreduce_start([v.read_value()]) for v in variables]
        return tf.add_n([tf.reduce_sum(p.wait()[0]) for p in pending])
    return tf.function(step)


PATTERNS = {
    "captured": ("captured", captured, "tensors"),
    "variables": ("read from variables, every result summed", read_and_summed, "tensors"),
    "optimizer": ("computed, each result into assign_sub", optimizer_like, "tensors"),
    "separate_fused": ("small vectors in one op", read_and_summed, "separate"),
    "separate": ("small vectors, one op each", separately, "separate"),
}


def synced(lib, tensors):
    """The pass-through behind a barrier that waits for every tensor: the ranks meet where the
    collective would be, and no data moves. What tfring adds over it is what moving the tensors
    costs; the barrier's own cost over the pass-through is what any collective at that point pays
    for the ranks reaching it at different times."""
    import tensorflow as tf

    import tfring

    with tf.control_dependencies(tensors):
        met = tfring.ops.barrier()
    with tf.control_dependencies([met]):
        return list(lib.tfring_relay(tensors))


def _wait(out):
    """The step's last output on the host (a function's call returns once it ran, on CPU)."""
    return (out[-1] if isinstance(out, (list, tuple)) else out).numpy()


def _each(step, arrays):
    """One call of `step([a])` for each array, in turn."""
    steps = [step([a]) for a in arrays]

    def run():
        for one in steps:
            one()
    return run


def worker(args):
    import tensorflow as tf

    import tfring

    if args.no_spin:  # before TensorFlow's context starts: its thread pools are made then
        from tensorflow.core.protobuf import config_pb2
        from tensorflow.python.eager import context

        config = config_pb2.ConfigProto()
        config.experimental.disable_thread_spinning = True
        context.context()._config = config
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tfring.init()
    from tfring.ops import collectives

    lib = collectives._ops()
    peers = {"tf": lambda ts: tf.identity_n(ts), "passthrough": lambda ts: list(lib.tfring_relay(ts)),
             "synced": lambda ts: synced(lib, ts), "tfring": lambda ts: tfring.ops.allreduce(ts, op="sum")}
    counts = {"tensors": (args.tensors, args.size), "separate": (args.separate, SEPARATE_SIZE)}
    for name, (_, make, kind) in PATTERNS.items():
        count, size = counts[kind]
        steps = {peer: make(reduce, _variables(count, size, tfring.rank())) for peer, reduce in peers.items()}
        calls = {peer: (lambda s=step: _wait(s())) for peer, step in steps.items()}
        if kind == "separate":  # the engine alone, through its C API on NumPy buffers: no TensorFlow
            arrays = [v.numpy() for v in _variables(count, size, tfring.rank())]
            calls["core"] = core_step(arrays) if name == "separate_fused" else _each(core_step, arrays)
            if name == "separate":
                started_step = separately_started(_variables(count, size, tfring.rank()))
                calls["started"] = lambda: _wait(started_step())
        samples = paired_calls(calls, tfring.ops.barrier, args.repeats)
        if tfring.rank() == 0:
            report(name, samples, f"{count} x {size} float32")


def run_job(args):
    cmd = [sys.executable, "-m", "tfring", "run", "-np", "2", sys.executable, HERE, "--worker",
           "--tensors", str(args.tensors), "--size", str(args.size), "--separate", str(args.separate),
           "--repeats", str(args.repeats)] + (["--no-spin"] if args.no_spin else [])
    job = subprocess.run(cmd, capture_output=True, text=True, env=_quiet_env(), timeout=1800)
    if job.returncode != 0:
        sys.exit(f"the job failed:\n{(job.stdout + job.stderr)[-3000:]}")
    return parse_results(job.stdout)


def print_table(results):
    import numpy as np

    print("| pattern | tensors | TF alone ms | TF + pass-through ms | TF + barrier ms | tfring ms | tfring adds ms "
          "(over TF alone, the pass-through, the barrier) | per 1000 tensors | core alone ms | started ops ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        ms = {peer: 1000 * np.median(values) for peer, values in r["samples"].items()}
        extra = " | ".join(f"{ms[peer]:.2f}" if peer in ms else "" for peer in ("core", "started"))
        count = int(r["note"].split(" x ")[0])
        added = [ms["tfring"] - ms[base] for base in ("tf", "passthrough", "synced")]
        print(f"| {PATTERNS[r['peer']][0]} | {r['note']} | {ms['tf']:.2f} | {ms['passthrough']:.2f} | "
              f"{ms['synced']:.2f} | {ms['tfring']:.2f} | {', '.join(f'{a:.2f}' for a in added)} | "
              f"{', '.join(f'{a * 1000 / count:.2f}' for a in added)} | {extra} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=1000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--separate", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--no-spin", action="store_true",
                        help="TensorFlow's thread pools block at once instead of spinning for work "
                             "(ConfigProto.experimental.disable_thread_spinning), in both peers")
    parser.add_argument("--json", help="also write the raw samples here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    start = time.monotonic()
    results = run_job(args)
    print_table(results)
    print(f"\n(2 ranks on this host, medians of {args.repeats}; measured in {time.monotonic() - start:.0f} s, "
          f"{time.strftime('%Y-%m-%d')})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
