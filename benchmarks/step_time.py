"""Step time of model.fit under RingStrategy, and what each step all-reduces, in one run.

    sudo .venv/bin/python benchmarks/step_time.py [--parts overlap,accumulation,fit-overhead] [--rounds 3]
        [--json results.json]

Issue 16's benchmark, growing with it.

Overlap (needs root, iproute2 and openssh-server: the hosts are `tfring_dev.emulated_hosts`): two
emulated hosts, one rank each, each rank pinned to its own core, the link shaped to `--rate` Mbit/s
(default 1000). A VGG-like CNN (convolutions first, ~21 M parameters in its dense layers at the
end, so most gradient bytes exist early in the backward pass) trains on synthetic 32x32 images.
Printed: the step's compute alone (the same model and per-rank batch, one rank, no
communication), the allreduce of its gradients alone (one fused collective, between the hosts),
and the step under RingStrategy with `bucket_bytes=0` (one allreduce after the backward pass) and
with each of `--buckets` (MiB), with `bucket_bytes="auto"` after its trial (what it picked), and
with one allreduce per gradient tensor as it is ready (Horovod's pattern, no fusion), beside the
target max(compute, communication) * 1.15.

Accumulation: a 2.1 M-parameter MLP
(8.4 MB of float32 gradients) trains on synthetic rows, 32 per rank per micro-step, with
`gradient_accumulation_steps` k = 1 (no accumulation) and k = 4, as a `tfring run -np N` job on
this host, one intra-op thread per rank. For each k it prints the median time of a micro-step
(timed between `on_train_batch_end` calls, after a warm-up epoch) and the gradient bytes each
rank all-reduced per micro-step (`tfring.traffic()`): accumulation should cut the traffic by k.

Fit overhead: `benchmarks/fit_scaling.py`'s pinned part on this host (2 ranks bound to a core
each, by record and with `AutoShardPolicy.OFF`, beside two independent pinned processes).

The runs are interleaved over rounds; medians over rounds.
"""

import argparse
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.abspath(__file__)
ROWS_PER_RANK = 32
MICRO_STEPS = 32
WIDTH = 1024


def _accumulation_job(k):
    """One rank's accumulation measurement (runs under tfring run): prints one JSON line on rank 0."""
    import time

    import keras
    import numpy as np
    import tensorflow as tf

    import tfring

    tf.config.threading.set_intra_op_parallelism_threads(1)
    strategy = tfring.RingStrategy()
    rows = ROWS_PER_RANK * strategy.size * MICRO_STEPS
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, WIDTH)).astype("float32")
    y = rng.integers(0, 10, rows).astype("int32")
    with strategy.scope():
        model = keras.Sequential([keras.Input((WIDTH,)), keras.layers.Dense(WIDTH, activation="relu"),
                                  keras.layers.Dense(WIDTH, activation="relu"), keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.SGD(0.01, gradient_accumulation_steps=k if k > 1 else None),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batch = ROWS_PER_RANK * strategy.size
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)  # warm-up: tracing
    stamps = []
    timer = keras.callbacks.LambdaCallback(on_train_batch_end=lambda *_, **__: stamps.append(time.perf_counter()))
    before = tfring.traffic()["allreduce"]["bytes"]
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[timer])
    sent = tfring.traffic()["allreduce"]["bytes"] - before
    gradient_bytes = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_weights)
    if strategy.rank == 0:
        steps = [b - a for a, b in zip(stamps, stamps[1:])]
        print("RESULT " + json.dumps({"k": k, "step_ms": 1000 * statistics.median(steps),
                                      "allreduce_bytes_per_step": sent / MICRO_STEPS,
                                      "gradient_bytes": gradient_bytes}), flush=True)


def _run(np_, k):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", STEP_TIME_JOB=f"accumulation:{k}")
    proc = subprocess.run([sys.executable, "-m", "tfring", "run", "-np", str(np_), sys.executable, HERE, "--rank"],
                          env=env, capture_output=True, text=True, timeout=600)
    return _result(proc, f"k={k}")


def _result(proc, what):
    if proc.returncode != 0:
        raise SystemExit(f"{what}: the job failed:\n{proc.stderr[-3000:]}")
    line = next(line for line in proc.stdout.splitlines() if "RESULT " in line)
    return json.loads(line.split("RESULT ", 1)[1])


# ---- overlap ----
IMAGE = 32
OVERLAP_STEPS = 8
# One allreduce per gradient tensor, each starting as soon as its gradient exists: Horovod's
# pattern with its fusion buffer off (bucket_bytes=1 closes a bucket after every tensor).
PER_TENSOR = "per-tensor"


def _pin_to_own_core():
    """Pins this process to core (rank % cores), before TensorFlow sizes its thread pools."""
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[int(os.environ.get("TFRING_RANK", "0")) % len(cores)]})


def _vgg(keras):
    conv = [keras.layers.Conv2D(c, 3, padding="same", activation="relu") for c in (64, 64, 128, 128)]
    return keras.Sequential([keras.Input((IMAGE, IMAGE, 3)), conv[0], conv[1], keras.layers.MaxPooling2D(),
                             conv[2], conv[3], keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                             keras.layers.Dense(2048, activation="relu"), keras.layers.Dense(2048, activation="relu"),
                             keras.layers.Dense(10)])


def _bucket_setting(run):
    """A run's `bucket_bytes`: "auto", 1 for one bucket per gradient tensor, or the bytes given."""
    return {"auto": "auto", PER_TENSOR: 1}.get(run) or int(run)


def _overlap_job(run, rows):
    """One rank's step time: `run` is "compute" (one process, no strategy) or a `bucket_bytes`."""
    _pin_to_own_core()
    import time

    import keras
    import numpy as np
    import tensorflow as tf

    import tfring

    tf.config.threading.set_intra_op_parallelism_threads(1)
    if run == "compute":
        # What RingStrategy sets up for a rank on one core (tfring.strategy.inter_op_threads).
        tf.config.threading.set_inter_op_parallelism_threads(2)
    strategy = None if run == "compute" else tfring.RingStrategy(bucket_bytes=_bucket_setting(run))
    size = strategy.size if strategy else 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows * size * OVERLAP_STEPS, IMAGE, IMAGE, 3)).astype("float32")
    y = rng.integers(0, 10, len(x)).astype("int32")
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = _vgg(keras)
        model.compile(optimizer=keras.optimizers.SGD(0.001), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if run == "auto":  # the tuner's trial: 6 sizes x 7 steps, a retrace each
        model.fit(x, y, batch_size=rows * size, epochs=6, verbose=0)
    else:
        model.fit(x[:rows * size * 2], y[:rows * size * 2], batch_size=rows * size, epochs=1, verbose=0)  # tracing
    stamps, spans = [], []
    timer = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda *_, **__: spans.append([time.time() * 1e6]),
        on_train_batch_end=lambda *_, **__: (stamps.append(time.perf_counter()), spans[-1].append(time.time() * 1e6)))
    model.fit(x, y, batch_size=rows * size, epochs=1, verbose=0, shuffle=False, callbacks=[timer])
    if os.environ.get("TFRING_TIMELINE"):  # for the picture (step_picture.py)
        with open(os.path.join(os.path.dirname(os.environ["TFRING_TIMELINE"]), f"steps.rank{strategy.rank}.json"),
                  "w") as f:
            json.dump(spans, f)
    result = {"step_ms": 1000 * statistics.median(b - a for a, b in zip(stamps, stamps[1:])),
              "gradient_bytes": sum(int(np.prod(v.shape)) * 4 for v in model.trainable_weights)}
    if strategy:
        grads = [tf.ones(v.shape) for v in model.trainable_weights]
        reduce = tf.function(lambda g: tfring.ops.allreduce(g))
        reduce(grads)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            reduce(grads)[0].numpy()
            times.append(time.perf_counter() - start)
        result["allreduce_ms"] = 1000 * statistics.median(times)
        result["bucket_bytes"] = strategy.bucket_bytes
    if not strategy or strategy.rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


def _overlap_command(hosts, run, rows, timeline=None):
    env = dict(TF_CPP_MIN_LOG_LEVEL="2", STEP_TIME_JOB=f"overlap:{run}:{rows}")
    if timeline:
        env["TFRING_TIMELINE"] = timeline
    exports = [arg for k, v in env.items() for arg in ("-x", f"{k}={v}")]
    placement = f"{hosts.names[0]}:1" if run == "compute" else ",".join(f"{h}:1" for h in hosts.names[:2])
    return ([sys.executable, "-m", "tfring", "run", "-H", placement, "--rsh", shlex.join(hosts.ssh_command)]
            + exports + [sys.executable, HERE, "--rank"])


def overlap(args):
    """The overlap part: compute alone, communication alone, and the step with and without buckets."""
    from tfring_dev.emulated_hosts import EmulatedHosts

    runs = {run: [] for run in ["compute", "0"] + [str(int(float(mib) * 2**20)) for mib in args.buckets.split(",")]
            + ["auto", PER_TENSOR]}
    pictured = {"0": "bucket_bytes=0: one allreduce after the backward pass",
                str(4 << 20): "bucket_bytes=4 MiB (default): buckets leave as their gradients exist"}
    traces = tempfile.mkdtemp(prefix="tfring-step-time-") if args.picture else None
    with EmulatedHosts(2) as hosts:
        hosts.shape(args.rate)
        for _ in range(args.rounds):
            for run in runs:
                timeline = os.path.join(traces, run, "trace.json") if args.picture and run in pictured else None
                if timeline:
                    os.makedirs(os.path.dirname(timeline), exist_ok=True)
                proc = subprocess.run(_overlap_command(hosts, run, args.rows, timeline), capture_output=True,
                                      text=True, timeout=900)
                runs[run].append(_result(proc, run))
    if args.picture:
        import step_picture

        step_picture.draw([(title, os.path.join(traces, run)) for run, title in pictured.items() if run in runs],
                          args.picture)
        shutil.rmtree(traces)
        print(f"picture of step 4 (both ranks, last round): {args.picture}")
    med = {run: statistics.median(r["step_ms"] for r in results) for run, results in runs.items()}
    comm = statistics.median(r["allreduce_ms"] for run in runs if run != "compute" for r in runs[run])
    target = max(med["compute"], comm) * 1.15
    mb = runs["compute"][0]["gradient_bytes"] / 1e6
    print(f"overlap: 2 emulated hosts x 1 rank (each pinned to one core), link {args.rate} Mbit/s, VGG-like CNN "
          f"({mb:.1f} MB of gradients), {args.rows} images per rank per step; medians of {args.rounds} rounds")
    print(f"{'':48} {'ms':>9} {'vs target':>10}")
    rows = [("compute alone (1 rank)", med["compute"]), ("allreduce of the gradients alone", comm)]
    rows += [(_step_label(run, runs[run]), med[run]) for run in runs if run != "compute"]
    rows += [("target: max(compute, comm) x 1.15", target)]
    for name, ms in rows:
        print(f"{name:48} {ms:>9.1f} {ms / target:>10.2f}")
    return {"runs": runs, "medians_ms": med, "allreduce_ms": comm, "target_ms": target}


def _step_label(run, results):
    if run == PER_TENSOR:
        return "step, one allreduce per tensor (Horovod-style)"
    if run == "auto":
        picked = ", ".join(sorted({f"{r['bucket_bytes'] / 2**20:g}" for r in results}))
        return f"step, auto (picked {picked} MiB)"
    return f"step, bucket_bytes={int(run) / 2**20:g} MiB" if run != "0" else "step, bucket_bytes=0"


def accumulation(args):
    """The accumulation part: micro-step time and traffic with k = 1 and 4."""
    runs = {1: [], 4: []}
    for _ in range(args.rounds):
        for k in runs:
            runs[k].append(_run(args.np, k))
    print(f"gradient accumulation, {args.np} ranks on this host, {ROWS_PER_RANK} rows per rank per micro-step, "
          f"{runs[1][0]['gradient_bytes'] / 1e6:.1f} MB of gradients; medians of {args.rounds} rounds")
    print(f"{'k':>3} {'micro-step ms':>14} {'all-reduced MB per micro-step':>30} {'traffic vs k=1':>15}")
    base = statistics.median(r["allreduce_bytes_per_step"] for r in runs[1])
    summary = {}
    for k, results in runs.items():
        ms = statistics.median(r["step_ms"] for r in results)
        sent = statistics.median(r["allreduce_bytes_per_step"] for r in results)
        summary[k] = {"step_ms": ms, "allreduce_bytes_per_step": sent, "rounds": results}
        print(f"{k:>3} {ms:>14.2f} {sent / 1e6:>30.3f} {sent / base:>15.3f}")
    return summary


def fit_overhead(args):
    """The pinned fit overhead on this host: benchmarks/fit_scaling.py's pinned part."""
    import fit_scaling
    import numpy as np

    samples, labels = fit_scaling.measure(fit_scaling.PARTS["pinned"], args.rounds)
    med = {k: float(np.median(v)) for k, v in samples.items() if v}
    fit_scaling.print_overhead(med, samples, labels, args.rounds)
    return {"samples": samples, "medians": med, "labels": labels}


def _rank():
    kind, *params = os.environ["STEP_TIME_JOB"].split(":")
    if kind == "accumulation":
        return _accumulation_job(int(params[0]))
    return _overlap_job(params[0], int(params[1]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="overlap,accumulation,fit-overhead")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--np", type=int, default=2, help="accumulation: ranks on this host")
    parser.add_argument("--rate", type=int, default=1000, help="overlap: link rate, Mbit/s")
    parser.add_argument("--rows", type=int, default=256, help="overlap: images per rank per step")
    parser.add_argument("--buckets", default="1,4,25", help="overlap: bucket sizes to time, MiB")
    parser.add_argument("--picture", help="overlap: draw one step of the 0 and 4 MiB runs from their timelines "
                        "into this PNG (needs matplotlib)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        return _rank()
    parts = {"overlap": overlap, "accumulation": accumulation, "fit-overhead": fit_overhead}
    summary = {}
    for part in args.parts.split(","):
        summary[part] = parts[part](args)
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
