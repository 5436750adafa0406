"""model.fit throughput: RingStrategy on 1 and 2 ranks beside MirroredStrategy and MWMS, in one run.

    python benchmarks/fit_scaling.py [--parts scaling,pinned,overhead,one-rank] [--rounds 5] [--model cnn]
        [--json results.json]

A small CNN on synthetic 32x32x3 images, 64 images per replica per step (weak scaling), one
intra-op thread per process. Each run's figure is the median of 5 calls of fit (2 epochs each,
after a warm-up epoch); the runs are interleaved over rounds and the medians printed. Processes
without a strategy read their input as a tfring rank among as many on this host would (tf.data
autotuning off with one core or less per process: tfring/strategy/data_autotuning.py).

- scaling: RingStrategy on 1 and 2 ranks; `tf.distribute.MirroredStrategy` on 2 logical CPU
  devices in one process (its model.fit works); `MultiWorkerMirroredStrategy` with 2 worker
  processes through a custom `strategy.run` loop (its model.fit crashes with Keras 3); and two
  independent processes without a strategy, run at once: what the cores give two processes at
  all. Scaling efficiency = images/s(2 ranks) / (2 x images/s(1 rank)).
- pinned: the per-step overhead. 2 ranks started with `tfring run --bind-to core` (each rank on
  its own core), with the dataset sharded by record and with each rank reading its own 64-row
  batches (`AutoShardPolicy.OFF`), against their ceiling: two independent processes without a
  strategy, each pinned to its own core, doing the same per-rank work; the same processes with
  TensorFlow's default (autotuning on) are printed below the table. Below it too, what a
  synchronous job could make of the ceiling's processes: twice the slower one, and the two in
  lockstep (each step at the slower one's time for it, from per-step clocks): a synchronous job
  waits at every step for its slowest rank, so on a machine whose step times vary it cannot reach
  the sum of two processes that never wait for each other.
- overhead: the pinned part's first comparison alone (2 pinned ranks against 2 pinned processes).
  With `--model bn24` (24 Conv+BatchNorm blocks, 122 variables, 16 images per replica) it shows
  what a batch-norm-heavy step pays; `--model plain24` is the same net without BatchNorm (50).
- one-rank: one rank under RingStrategy against the same script with no strategy, unpinned and
  pinned to one core.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from tfring.launch.addresses import free_port

HERE = os.path.abspath(__file__)
# The model (`--model`, handed to the workers as FIT_SCALING_MODEL) and its images per replica per step.
MODELS = {"cnn": 64, "bn24": 16, "plain24": 16}
MODEL = os.environ.get("FIT_SCALING_MODEL", "cnn")
PER_REPLICA = MODELS[MODEL]
STEPS = 40
FITS = 5


def _model(keras):
    if MODEL in ("bn24", "plain24"):
        return _deep24(keras, batch_norm=MODEL == "bn24")
    return keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])


def _deep24(keras, batch_norm):
    """24 blocks of Conv2D + ReLU at 16x16x16, then a classifier. With `batch_norm` each
    convolution (then without bias) is followed by a BatchNormalization: 122 variables, 96 of them
    batch-norm's (a batch-norm-heavy step); without, 50 variables."""
    layers = [keras.Input((32, 32, 3))]
    for k in range(24):
        layers.append(keras.layers.Conv2D(16, 3, strides=2 if k == 0 else 1, padding="same", use_bias=not batch_norm))
        layers += [keras.layers.BatchNormalization()] if batch_norm else []
        layers.append(keras.layers.ReLU())
    return keras.Sequential(layers + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])


def _data(replicas):
    import numpy as np

    n = PER_REPLICA * replicas * STEPS
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 32, 32, 3)).astype("float32"), rng.integers(0, 10, n).astype("int32")


def _dataset(replicas, rank, per_rank_input):
    """Global batches of the whole data, or (per_rank_input) this rank's own 64-row batches of its
    part, marked `AutoShardPolicy.OFF` so the strategy uses them as they are."""
    import tensorflow as tf

    x, y = _data(replicas)
    if not per_rank_input:
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(PER_REPLICA * replicas).prefetch(2).cache()
    part = slice(rank * PER_REPLICA * STEPS, (rank + 1) * PER_REPLICA * STEPS)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = tf.data.Dataset.from_tensor_slices((x[part], y[part])).batch(PER_REPLICA).prefetch(2).cache()
    return ds.with_options(options)


def _fit_images_per_second(strategy, replicas, rank, per_rank_input=False, like_ranks=None):
    """Images per second of the whole job (all replicas): the median of FITS calls of fit, 2
    epochs each, after one epoch to warm up. (On this machine a whole fit call now and then runs
    ~50 % slower, with or without a strategy; one call per process made that noise.)
    `like_ranks`: read the input as tfring does on each of that many ranks on this host."""
    import keras
    import numpy as np

    with strategy.scope():
        model = _model(keras)
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = _dataset(replicas, rank, per_rank_input)
    if like_ranks:  # the input as tfring gives it to each of `like_ranks` ranks on this host
        from tfring.strategy.input import autotuning as data_autotuning

        ds = data_autotuning.for_rank(ds, like_ranks)
    model.fit(ds, epochs=1, verbose=0)  # warm-up: tracing, caches
    rates, fits = [], []
    for _ in range(FITS):
        clock = _step_clock()
        start = time.perf_counter()
        model.fit(ds, epochs=2, verbose=0, callbacks=[clock])
        seconds = time.perf_counter() - start
        rates.append(2 * PER_REPLICA * replicas * STEPS / seconds)
        fits.append({"seconds": seconds, "steps": clock.steps()})
    return float(np.median(rates)), fits


def _step_clock():
    """A Keras callback timing each step: from one batch's start to the next's (or the epoch's
    end). It only overrides `on_*_begin` and `on_epoch_end`, so Keras still dispatches batch ends
    to its thread pool as it does with no callback (a batch-end hook would make that synchronous)."""
    import keras

    class StepClock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.marks = []  # per epoch: the start of each batch, then the epoch's end

        def on_epoch_begin(self, epoch, logs=None):
            self.marks.append([])

        def on_train_batch_begin(self, batch, logs=None):
            self.marks[-1].append(time.perf_counter())

        def on_epoch_end(self, epoch, logs=None):
            self.marks[-1].append(time.perf_counter())

        def steps(self):
            return [b - a for epoch in self.marks for a, b in zip(epoch, epoch[1:])]

    return StepClock()


def _outside_steps(fit):
    """Seconds of a fit outside its steps: epoch starts and ends (iterators, callbacks)."""
    return fit["seconds"] - sum(fit["steps"])


def _slowest_steps(fits_by_process):
    """Per fit and step, the longest of the processes' times for that step: (fits, steps) seconds."""
    import numpy as np

    return np.max(np.array([[f["steps"] for f in fits] for fits in fits_by_process]), axis=0)


def lockstep_ips(fits_by_process):
    """What the processes would make in lockstep, each step at the pace of that step's slowest one:
    per fit, the processes' mean time outside steps plus, for each step, the longest of their
    times for it; the median over fits, in images per second of all processes together.

    Args:
        fits_by_process: per process, its fits as `_fit_images_per_second` returns them.

    Returns:
        Images per second (a float).
    """
    import numpy as np

    slowest = _slowest_steps(fits_by_process)
    outside = np.mean([[_outside_steps(f) for f in fits] for fits in fits_by_process], axis=0)
    images = len(fits_by_process) * slowest.shape[1] * PER_REPLICA
    return float(np.median(images / (outside + slowest.sum(axis=1))))


def step_figures(fits_by_process):
    """Where a run's time goes: its median step and its median time per fit outside steps (epoch
    starts and ends: iterators, callbacks), in ms. With several processes, a step counts at its
    slowest process' time for it, as in `lockstep_ips`.

    Args:
        fits_by_process: per process, its fits as `_fit_images_per_second` returns them.

    Returns:
        {"step_ms": float, "outside_ms": float}.
    """
    import numpy as np

    outside = [_outside_steps(f) for fits in fits_by_process for f in fits]
    return {"step_ms": 1e3 * float(np.median(_slowest_steps(fits_by_process))),
            "outside_ms": 1e3 * float(np.median(outside))}


def worker(kind):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    if kind in ("ring", "ring-off"):
        import tfring

        strategy = tfring.RingStrategy()
        ips, fits = _fit_images_per_second(strategy, strategy.size, strategy.rank, per_rank_input=kind == "ring-off")
        if strategy.rank == 0:  # ranks step in lockstep: rank 0's clock times every rank's steps
            print("RESULT " + json.dumps({"peer": f"tfring RingStrategy, {strategy.size} rank(s)", "ips": ips,
                                          **step_figures([fits])}))
    elif kind in ("alone", "alone-autotune"):
        # No strategy and no communication: what this machine gives the processes that share it.
        # "alone" iterates the input as a tfring rank among as many does (tf.data autotuning off
        # with one core or less per process); "alone-autotune" as TensorFlow does by default.
        like_ranks = None if kind == "alone-autotune" else int(os.environ.get("FIT_SCALING_PROCESSES", "1"))
        ips, fits = _fit_images_per_second(tf.distribute.get_strategy(), 1, 0, like_ranks=like_ranks)
        print("RESULT " + json.dumps({"peer": "one process alone, no strategy", "ips": ips, "fits": fits}))
    elif kind == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        ips, _ = _fit_images_per_second(strategy, 2, 0)
        print("RESULT " + json.dumps({"peer": "MirroredStrategy, 2 logical CPUs, 1 process", "ips": ips}))
    elif kind == "mwms":
        import keras

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        rank = strategy.cluster_resolver.task_id
        x, y = _data(2)
        with strategy.scope():
            model = _model(keras)
            opt = keras.optimizers.SGD(0.01)
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        ds = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(PER_REPLICA * 2).cache())

        @tf.function
        def step(batch):
            def replica(xb, yb):
                with tf.GradientTape() as tape:
                    loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)),
                                                      global_batch_size=PER_REPLICA * 2)
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            return strategy.reduce("SUM", strategy.run(replica, args=batch), axis=None)

        def epoch():
            for batch in ds:
                step(batch)

        epoch()
        start = time.perf_counter()
        epoch()
        epoch()
        ips = 2 * len(x) / (time.perf_counter() - start)
        if rank == 0:
            print("RESULT " + json.dumps({"peer": "MultiWorkerMirroredStrategy, 2 workers (custom loop)", "ips": ips}))



def _env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1")
    env.update(extra)
    return env


def _result(stdout):
    for line in stdout.splitlines():
        line = line.split("] ", 1)[-1] if line.startswith("[") else line
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return None


def _on_cores(cores):
    """A `preexec_fn` binding the child to `cores` (None: leave it as it is)."""
    return None if cores is None else (lambda: os.sched_setaffinity(0, cores))


def _ring(np_, worker, bind=False, cores=None):
    """A RingStrategy job through `tfring run`; `cores` binds the launcher (and so its ranks)."""
    cmd = [sys.executable, "-m", "tfring", "run", "-np", str(np_)] + (["--bind-to", "core"] if bind else [])
    proc = subprocess.run(cmd + [sys.executable, HERE, "--worker", worker], capture_output=True, text=True,
                          env=_env(), timeout=1200, preexec_fn=_on_cores(cores))
    return _result(proc.stdout), proc.stderr


def _independent(n, pinned, worker="alone"):
    """n processes without a strategy at once (each on its own core if pinned), their rates summed."""
    cores = sorted(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, HERE, "--worker", worker], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(FIT_SCALING_PROCESSES=str(n)),
                              preexec_fn=_on_cores([cores[i]] if pinned else None)) for i in range(n)]
    outs = [p.communicate(timeout=1200) for p in procs]
    results = [_result(out) for out, _ in outs]
    if None in results:
        return None, "".join(err for _, err in outs)
    what = f"{n} independent processes, no communication (sum)" if n > 1 else "one process, no strategy"
    fits = [r["fits"] for r in results]
    result = {"peer": what + (", each pinned to a core" if pinned else ""), "ips": sum(r["ips"] for r in results),
              **step_figures(fits)}
    if n > 1:  # a synchronous job runs every rank at its slowest rank's pace: n x the slowest process
        result["synchronous_ips"] = n * min(r["ips"] for r in results)
        result["lockstep_ips"] = lockstep_ips(fits)
    return result, ""


def _mwms():
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, HERE, "--worker", "mwms"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=_env(TF_CONFIG=json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                                             "task": {"type": "worker", "index": i}})))
             for i in range(2)]
    outs = [p.communicate(timeout=1200) for p in procs]
    return _result(outs[0][0]), outs[0][1] + outs[1][1]


def _mirrored():
    proc = subprocess.run([sys.executable, HERE, "--worker", "mirrored"], capture_output=True, text=True,
                          env=_env(), timeout=1200)
    return _result(proc.stdout), proc.stderr


FIRST_CORE = sorted(os.sched_getaffinity(0))[:1]
# key -> (label, how to run it); a label of None keeps the label the run reports.
RUNS = {
    "ring1": (None, lambda: _ring(1, "ring")),
    "ring2": (None, lambda: _ring(2, "ring")),
    "alone2": (None, lambda: _independent(2, pinned=False)),
    "mirrored": (None, _mirrored),
    "mwms": (None, _mwms),
    "ring2-pinned": ("tfring, 2 ranks, --bind-to core, sharded by record", lambda: _ring(2, "ring", bind=True)),
    "ring2-pinned-off": ("tfring, 2 ranks, --bind-to core, AutoShardPolicy.OFF",
                         lambda: _ring(2, "ring-off", bind=True)),
    "alone2-pinned": (None, lambda: _independent(2, pinned=True)),
    "alone2-pinned-autotune": ("2 independent processes, each pinned to a core, tf.data autotuning on",
                               lambda: _independent(2, pinned=True, worker="alone-autotune")),
    "ring1-pinned": ("tfring, 1 rank pinned to one core", lambda: _ring(1, "ring", bind=True, cores=FIRST_CORE)),
    "alone1-pinned": ("no strategy, pinned to one core", lambda: _independent(1, pinned=True)),
    "alone1": ("no strategy, unpinned", lambda: _independent(1, pinned=False)),
}
PARTS = {
    "scaling": ["ring1", "ring2", "alone2", "mirrored", "mwms"],
    "pinned": ["ring2-pinned", "ring2-pinned-off", "alone2-pinned", "alone2-pinned-autotune"],
    "overhead": ["ring2-pinned", "alone2-pinned"],
    "one-rank": ["ring1", "alone1", "ring1-pinned", "alone1-pinned"],
}
# (tfring run, its ceiling) for the overhead table.
OVERHEAD = [("ring2-pinned", "alone2-pinned"), ("ring2-pinned-off", "alone2-pinned"),
            ("ring1-pinned", "alone1-pinned"), ("ring1", "alone1")]


# Figures a run reports beside its images/s, kept per round under "<key>:<figure>".
FIGURES = ("synchronous_ips", "lockstep_ips", "step_ms", "outside_ms")


def measure(keys, rounds):
    """Runs each of `keys` (of RUNS) once per round, interleaved: (samples, labels) by key."""
    samples, labels = {k: [] for k in keys}, {}
    for _ in range(rounds):
        for key in keys:
            label, how = RUNS[key]
            result, err = how()
            if result is None:
                print(f"{key} failed:\n{err[-2000:]}", file=sys.stderr)
                continue
            samples[key].append(result["ips"])
            for name in FIGURES:
                if name in result:
                    samples.setdefault(f"{key}:{name}", []).append(result[name])
            labels[key] = label or result["peer"]
    return samples, labels


def _print_scaling(med, labels, rounds):
    keys = [k for k in PARTS["scaling"] if k in med]
    if keys == ["ring1"] or not keys:  # the scaling part was not run
        return
    print(f"\nmodel.fit throughput, {MODEL}, {PER_REPLICA} images per replica per step, "
          f"{os.cpu_count()} cores, medians of {rounds} interleaved rounds")
    print(f"| {'peer':<52} | {'images/s':>9} | {'x tfring 2 ranks':>16} |")
    print(f"|{'-' * 54}|{'-' * 10}:|{'-' * 17}:|")
    for k in keys:
        ratio = med[k] / med["ring2"] if "ring2" in med else float("nan")
        print(f"| {labels[k]:<52} | {med[k]:>9.1f} | {ratio:>16.2f} |")
    if "ring1" in med and "ring2" in med:
        print(f"scaling efficiency, 1 -> 2 ranks: {med['ring2'] / (2 * med['ring1']):.1%}")
    if "alone2" in med and "ring2" in med:
        print(f"2 ranks vs 2 independent processes on the same cores: {med['ring2'] / med['alone2']:.1%}")


def print_overhead(med, samples, labels, rounds):
    """The overhead table: each tfring run of OVERHEAD beside its ceiling, medians and per round."""
    rows = [(a, b) for a, b in OVERHEAD if a in med and b in med]
    if not rows:
        return
    print(f"\nper-step overhead, {MODEL}: tfring against its ceiling (no strategy, same per-rank work), "
          f"medians of {rounds} interleaved rounds")
    print(f"| {'run':<52} | {'images/s':>9} | {'ceiling':>9} | {'of ceiling':>10} | {'per round':>17} |")
    print(f"|{'-' * 54}|{'-' * 10}:|{'-' * 10}:|{'-' * 11}:|{'-' * 18}:|")
    for a, b in rows:
        per_round = [x / y for x, y in zip(samples[a], samples[b])]
        spread = f"{min(per_round):.0%}-{max(per_round):.0%}" if per_round else "-"
        print(f"| {labels[a]:<52} | {med[a]:>9.1f} | {med[b]:>9.1f} | {med[a] / med[b]:>10.1%} | {spread:>17} |")
    for b in dict.fromkeys(b for _, b in rows):
        print(f"ceiling: {labels[b]}")
        for name, what in (("synchronous_ips", "its slower process alone, x2"),
                           ("lockstep_ips", "its processes in lockstep (each step at its slower process' time)")):
            if f"{b}:{name}" in med:
                bound = med[f"{b}:{name}"]
                print(f"  {what}: {bound:.1f} images/s; "
                      + ", ".join(f"{labels[a]}: {med[a] / bound:.1%} of it" for a, c in rows if c == b))
    if "alone2-pinned-autotune" in med and "alone2-pinned" in med:
        print(f"the ceiling's processes with TensorFlow's default (tf.data autotuning on, which tfring turns off "
              f"with one core per rank): {med['alone2-pinned-autotune']:.1f} images/s, "
              f"{med['alone2-pinned-autotune'] / med['alone2-pinned']:.1%} of the ceiling")


def print_steps(med, labels, rounds):
    """Where the time goes, for each run of the overhead table: its median step and its time per
    fit outside steps (a ceiling of several processes: each step at its slowest process' time)."""
    keys = [k for k in dict.fromkeys(k for row in OVERHEAD for k in row) if f"{k}:step_ms" in med]
    if not keys:
        return
    print(f"\nwhere the time goes: median step and time per fit (2 epochs) outside steps, "
          f"medians of {rounds} rounds")
    width = max(len(labels[k]) for k in keys)
    print(f"| {'run':<{width}} | {'step ms':>8} | {'outside steps, ms per fit':>25} |")
    print(f"|{'-' * (width + 2)}|{'-' * 9}:|{'-' * 26}:|")
    for k in keys:
        print(f"| {labels[k]:<{width}} | {med[k + ':step_ms']:>8.2f} | {med[k + ':outside_ms']:>25.1f} |")


def main():
    global MODEL, PER_REPLICA
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["ring", "ring-off", "alone", "alone-autotune", "mirrored", "mwms"])
    parser.add_argument("--parts", default="scaling,pinned,one-rank",
                        help=f"comma-separated, of {', '.join(PARTS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", choices=sorted(MODELS), default=MODEL,
                        help="cnn: the small CNN, 64 images per replica (default); bn24: 24 Conv+BatchNorm "
                             "blocks, 16 images per replica; plain24: the same without BatchNorm")
    parser.add_argument("--json", default="benchmarks/fit_scaling_results.json")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    MODEL, PER_REPLICA = args.model, MODELS[args.model]
    os.environ["FIT_SCALING_MODEL"] = MODEL  # the workers' environment (`_env`) starts from this one
    if args.rounds < 5:
        parser.error("--rounds must be at least 5 (this machine is noisy)")
    parts = args.parts.split(",")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {unknown}: choose from {', '.join(PARTS)}")
    import numpy as np

    keys = list(dict.fromkeys(k for p in parts for k in PARTS[p]))
    samples, labels = measure(keys, args.rounds)
    med = {k: float(np.median(v)) for k, v in samples.items() if v}
    _print_scaling(med, labels, args.rounds)
    print_overhead(med, samples, labels, args.rounds)
    print_steps(med, labels, args.rounds)
    with open(args.json, "w") as f:
        json.dump({"samples": samples, "medians": med, "labels": labels}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
