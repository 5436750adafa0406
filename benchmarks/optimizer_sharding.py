"""Optimizer-state sharding (ZeRO stages 1 and 2): memory, step time and bytes per rank, sharded
against unsharded, in one run.

    .venv/bin/python benchmarks/optimizer_sharding.py [--ranks 2,4] [--width 2048] [--layers 24]
        [--optimizer adam] [--steps 4] [--stages 0,1,2] [--hosts-rate MBIT] [--limit-mb M] [--json FILE]
    .venv/bin/python benchmarks/optimizer_sharding.py --balance

A stack of `--layers` Dense layers of `--width` x `--width` (no bias) and a Dense(1) head: 24 x
2048 x 2048 is 100.7 M parameters, 403 MB in float32, and Adam's two moments are 805 MB more. Each
configuration is one `tfring run -np N` job (unsharded; `RingStrategy(shard_optimizer_state=True)`,
stage 1; and with `shard_gradients=True` too, stage 2; one intra-op thread per rank) that builds the
model, runs one step (tracing), then `--steps` timed steps of a global batch of 16 rows. Every rank
records:

- the optimizer's state bytes (the sum of `optimizer.variables`, from the variables);
- its peak resident memory (`ru_maxrss`) after the model was built and at the end;
- the median step time;
- the bytes it handed to collectives per step, by kind (`tfring.traffic()` over the timed steps:
  an input's bytes, whatever the ring sends for it; an allreduce of N bytes sends 2(P-1)/P N per
  rank, a reduce-scatter (P-1)/P N, and the broadcasts of every owner's updated values about N).

Printed: one row per (ranks, stage), the largest rank's figures; then for each rank count and
stage the state saved per rank, the peak RSS saved, and the state's share 1/N would give.

With `--hosts-rate MBIT` (root, iproute2, util-linux, openssh-server): the stages again on 2
emulated hosts of one rank each, their links shaped to MBIT Mbit/s (`tfring_dev.emulated_hosts`;
TCP between them), where the bytes each stage sends decide the step time.

With `--limit-mb M` (root, cgroup v1 memory controller): the largest model that trains under a
memory limit of M MB per rank, for each stage, on the first rank count of `--ranks`. Each rank
joins a cgroup of its own with that limit before TensorFlow starts (the kernel kills a rank that
goes over, and the job fails); the number of layers is bisected between 1 and `--max-layers`.
The cgroups are removed whatever happens.

With `--balance`: no job, the partition alone. For well-known models (Keras' ResNet50, VGG16 and
MobileNetV2, built without weights, and a BERT-base-sized encoder of Keras layers), the most
bytes of optimizer state any rank holds when whole variables are given to ranks, as a multiple of
an even share (1/N of the whole, what cutting one flattened buffer into N parts gives), for 2, 4,
8 and 16 ranks.
"""

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
from allreduce import _quiet_env  # noqa: E402

GLOBAL_BATCH = 16
STAGES = {0: "no", 1: "state", 2: "state + gradients"}
CGROUPS = "/sys/fs/cgroup/memory"


def worker(args):
    if args.cgroup:  # before TensorFlow allocates anything
        with open(os.path.join(f"{args.cgroup}-r{os.environ['TFRING_RANK']}", "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    import resource

    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    import keras

    import tfring

    strategy = tfring.RingStrategy(shard_optimizer_state=args.stage >= 1, shard_gradients=args.stage == 2)
    with strategy.scope():
        layers = [keras.Input((args.width,))]
        layers += [keras.layers.Dense(args.width, use_bias=False) for _ in range(args.layers)]
        model = keras.Sequential(layers + [keras.layers.Dense(1)])
        model.compile(optimizer=args.optimizer, loss="mse")
    built_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rng = np.random.default_rng(0)
    x = rng.standard_normal((GLOBAL_BATCH * (args.steps + 1), args.width)).astype("float32") / args.width ** 0.5
    y = rng.standard_normal((len(x), 1)).astype("float32")
    times, moved = [], {}

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()
            if batch == 1:  # after the traced step
                moved["before"] = tfring.traffic()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.start)

    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[Clock()])
    result = {
        "rank": strategy.rank, "size": strategy.size, "stage": args.stage,
        "parameters": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
        "state_bytes": int(sum(v.numpy().nbytes for v in model.optimizer.variables)),
        "built_rss": built_rss, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "step_s": float(np.median(times[1:])),  # the first step traces
        "bytes_per_step": {kind: (c["bytes"] - moved["before"][kind]["bytes"]) / args.steps
                           for kind, c in tfring.traffic().items() if c["bytes"] > moved["before"][kind]["bytes"]},
    }
    with open(os.path.join(args.out, f"r{strategy.rank}.json"), "w") as f:
        json.dump(result, f)


def run_config(args, ranks, stage, layers=None, cgroup=None, hosts=None):
    """Every rank's figures, or None when the job failed under a memory limit (`cgroup`). With
    `hosts` (emulated hosts), one rank on each of the first `ranks` hosts."""
    with tempfile.TemporaryDirectory() as out:
        where = ["-np", str(ranks)]
        if hosts is not None:
            where = ["-H", ",".join(f"{h}:1" for h in hosts.names[:ranks]), "--rsh", shlex.join(hosts.ssh_command)]
            where += [arg for k in ("PYTHONPATH",) if k in os.environ for arg in ("-x", f"{k}={os.environ[k]}")]
        cmd = [sys.executable, "-m", "tfring", "run", *where, sys.executable, HERE, "--worker",
               "--out", out, "--width", str(args.width), "--layers", str(layers or args.layers),
               "--optimizer", args.optimizer, "--steps", str(args.steps), "--stage", str(stage)]
        cmd += ["--cgroup", cgroup] if cgroup else []
        job = subprocess.run(cmd, capture_output=True, text=True, env=_quiet_env(), timeout=1800)
        if job.returncode != 0:
            if cgroup:
                return None
            sys.exit(f"the job of {ranks} ranks (stage {stage}) failed:\n{(job.stdout + job.stderr)[-3000:]}")
        return [json.load(open(os.path.join(out, f"r{r}.json"))) for r in range(ranks)]


@contextlib.contextmanager
def memory_limits(ranks, limit_mb):
    """A cgroup per rank limited to `limit_mb`, named by the prefix this yields; removed after."""
    prefix = os.path.join(CGROUPS, f"tfring-sharding-bench-{os.getpid()}")
    made = []
    try:
        for r in range(ranks):
            path = f"{prefix}-r{r}"
            os.mkdir(path, 0o700)
            made.append(path)
            for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
                with contextlib.suppress(OSError):  # (no swap accounting: the first alone)
                    with open(os.path.join(path, name), "w") as f:
                        f.write(str(limit_mb << 20))
        yield prefix
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                os.rmdir(path)  # (its processes have exited: the job is over)


def largest_fitting(args, ranks, stage, limit_mb):
    """The most layers (1..max_layers) whose job completes under `limit_mb` per rank, and how many tried."""
    low, high, tried = 0, args.max_layers, 0
    with memory_limits(ranks, limit_mb) as prefix:
        while low < high:
            middle = (low + high + 1) // 2
            tried += 1
            if run_config(args, ranks, stage, layers=middle, cgroup=prefix) is None:
                high = middle - 1
            else:
                low = middle
    return low, tried


def _mb(value):
    return f"{value / 1e6:.0f}"


def print_table(results):
    print("| ranks | sharded | parameters | optimizer state MB per rank (max) | peak RSS MB per rank (max) "
          "| RSS after build MB | step s (median, max over ranks) | MB handed to collectives per step |")
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    for (ranks, stage), rows in results.items():
        moved = ", ".join(f"{kind} {_mb(b)}" for kind, b in sorted(rows[0]["bytes_per_step"].items()))
        print(f"| {ranks} | {STAGES[stage]} | {rows[0]['parameters'] / 1e6:.1f} M | "
              f"{_mb(max(r['state_bytes'] for r in rows))} | {_mb(max(r['peak_rss'] for r in rows))} | "
              f"{_mb(max(r['built_rss'] for r in rows))} | {max(r['step_s'] for r in rows):.2f} | {moved} |")
    print()
    for ranks in sorted({k[0] for k in results}):
        plain = results.get((ranks, 0))
        for stage in (1, 2):
            sharded = results.get((ranks, stage))
            if not plain or not sharded:
                continue
            state = max(r["state_bytes"] for r in plain)
            held = max(r["state_bytes"] for r in sharded)
            saved = max(r["peak_rss"] for r in plain) - max(r["peak_rss"] for r in sharded)
            print(f"{ranks} ranks, sharded {STAGES[stage]}: state per rank {_mb(held)} MB of {_mb(state)} "
                  f"({held / state:.3f}; 1/N = {1 / ranks:.3f}); peak RSS lower by {_mb(saved)} MB, where "
                  f"(1 - 1/N) of the state is {_mb(state * (1 - 1 / ranks))} MB")


def print_hosts(args):
    from tfring_dev.emulated_hosts import EmulatedHosts
    from tfring_dev.emulated_hosts import available

    ok, reason = available()
    if not ok:
        print(f"\n(no emulated hosts: {reason})")
        return
    results = {}
    with EmulatedHosts(2, rate_mbit=args.hosts_rate) as hosts:
        for stage in args.stage_list:
            results[(2, stage)] = run_config(args, 2, stage, hosts=hosts)
    print(f"\nOn 2 emulated hosts (one rank each), links of {args.hosts_rate} Mbit/s:\n")
    print_table(results)


def print_largest(args):
    if os.geteuid() != 0 or not os.path.exists(os.path.join(CGROUPS, "memory.limit_in_bytes")):
        print(f"\n(no largest model under --limit-mb: needs root and the cgroup v1 memory controller at {CGROUPS})")
        return
    ranks = int(args.ranks.split(",")[0])
    print(f"\nThe largest model that trains under {args.limit_mb} MB per rank, {ranks} ranks "
          f"({args.width} x {args.width} layers):")
    for stage in args.stage_list:
        layers, tried = largest_fitting(args, ranks, stage, args.limit_mb)
        params = layers * args.width * args.width + args.width + 1
        print(f"- sharded {STAGES[stage]}: {layers} layers, {params / 1e6:.1f} M parameters ({tried} jobs tried)")


def encoder(vocabulary=30522, width=768, blocks=12, heads=12, hidden=3072, length=128):
    """A BERT-base-sized encoder of Keras layers (110 M parameters): the variables' shapes matter here."""
    import keras

    tokens = keras.Input((length,), dtype="int32")
    x = keras.layers.Embedding(vocabulary, width)(tokens)
    for _ in range(blocks):
        attended = keras.layers.MultiHeadAttention(heads, width // heads)(x, x)
        x = keras.layers.LayerNormalization()(x + attended)
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(width)(keras.layers.Dense(hidden)(x)))
    return keras.Model(tokens, x)


def print_balance():
    import keras

    from tfring.strategy.sharding import partition

    models = {"ResNet50": lambda: keras.applications.ResNet50(weights=None),
              "VGG16": lambda: keras.applications.VGG16(weights=None),
              "MobileNetV2": lambda: keras.applications.MobileNetV2(weights=None),
              "BERT-base-sized encoder": encoder}
    counts = (2, 4, 8, 16)
    print("| model | parameters | variables | largest variable MB | " +
          " | ".join(f"{n} ranks" for n in counts) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(counts))
    for name, build in models.items():
        sizes = [v.numpy().nbytes for v in build().trainable_variables]
        shares = []
        for n in counts:
            loads = [0] * n
            for size, owner in zip(sizes, partition.owners(sizes, n)):
                loads[owner] += size
            shares.append(f"{max(loads) / (sum(sizes) / n):.2f}")
        print(f"| {name} | {sum(sizes) / 4e6:.1f} M | {len(sizes)} | {max(sizes) / 1e6:.1f} | " +
              " | ".join(shares) + " |")
        keras.backend.clear_session()
    print("\n(the most state any rank holds, whole variables per rank, as a multiple of 1/N of the whole; "
          "a flattened buffer cut in N even parts is 1.00)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--hosts-rate", type=int, help="also run on 2 emulated hosts at this many Mbit/s")
    parser.add_argument("--limit-mb", type=int, help="also find the largest model under this memory per rank")
    parser.add_argument("--max-layers", type=int, default=64)
    parser.add_argument("--balance", action="store_true", help="only the partition's balance on well-known models")
    parser.add_argument("--json", help="also write every rank's figures here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stages", default="0,1,2", help="which to run: 0 unsharded, 1 the optimizer state, "
                        "2 the gradients too")
    parser.add_argument("--stage", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--cgroup", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.balance:
        return print_balance()
    start = time.monotonic()
    results = {}
    args.stage_list = [int(k) for k in args.stages.split(",")]
    for ranks in (int(r) for r in args.ranks.split(",")):
        for stage in args.stage_list:
            results[(ranks, stage)] = run_config(args, ranks, stage)
    print_table(results)
    if args.hosts_rate:
        print_hosts(args)
    if args.limit_mb:
        print_largest(args)
    print(f"\n({args.optimizer}, global batch {GLOBAL_BATCH}, {args.steps} timed steps; measured in "
          f"{time.monotonic() - start:.0f} s, {time.strftime('%Y-%m-%d')})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": [r for rows in results.values() for r in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
