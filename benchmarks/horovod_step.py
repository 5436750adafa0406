"""Step time of a Horovod script on tfring.horovod beside the same training under RingStrategy, in one run.

    .venv/bin/python benchmarks/horovod_step.py [--np 2] [--rounds 3] [--json results.json]

Issue 35's benchmark. The same MLP (2.1 M parameters, 8.4 MB of float32 gradients) trains on
synthetic rows, 32 per rank per step, one intra-op thread per rank, as a `tfring run -np N` job on
this host:
- `tfring.horovod`: Horovod's pattern with the import line changed (`hvd.DistributedOptimizer`, each
  rank fits its own rows with the per-rank batch, `BroadcastGlobalVariablesCallback(0)`);
- `RingStrategy`: the same model and global batch (32 x N) under `tfring.RingStrategy()`;
- one process with the per-rank batch and no communication (the compute alone).
Each prints the median time of a step (between `on_train_batch_end` calls, after a warm-up epoch).
Runs are interleaved over rounds; medians over rounds; ratios against RingStrategy.
Horovod 0.28.1 itself is not in this run: it does not work on Keras 3 (see README, Coming from Horovod).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.abspath(__file__)
ROWS, STEPS, WIDTH = 32, 40, 1024
MODES = ("horovod", "ring", "alone")


def _job(mode):
    """One rank's measurement (runs under tfring run, or alone): rank 0 prints one JSON line."""
    import time

    import keras
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    if mode == "ring":
        import tfring

        strategy = tfring.RingStrategy()
        rank, size, scope = strategy.rank, strategy.size, strategy.scope()
    else:
        import contextlib

        import tfring.horovod.tensorflow.keras as hvd

        hvd.init()
        rank, size, scope = hvd.rank(), hvd.size(), contextlib.nullcontext()
    per_rank = ROWS
    global_rows = per_rank * (size if mode == "ring" else 1)
    # Horovod: each rank its own rows; RingStrategy: the same global rows on every rank (it takes its share).
    x = np.random.default_rng(0 if mode == "ring" else rank).standard_normal((global_rows * STEPS, WIDTH)).astype(
        "float32")
    y = np.random.default_rng(1).integers(0, 10, len(x))
    with scope:
        model = keras.Sequential([keras.Input((WIDTH,)), keras.layers.Dense(WIDTH, activation="relu"),
                                  keras.layers.Dense(WIDTH, activation="relu"), keras.layers.Dense(10)])
        opt = keras.optimizers.SGD(0.01, momentum=0.9)
        if mode == "horovod":
            opt = hvd.DistributedOptimizer(opt)
        model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    times = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter())

    callbacks = [Clock()] + ([hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if mode == "horovod" else [])
    model.fit(x, y, batch_size=global_rows, epochs=2, verbose=0, shuffle=False, callbacks=callbacks)
    steps = [b - a for a, b in zip(times[STEPS:], times[STEPS + 1:])]  # the second epoch
    if rank == 0:
        print("RESULT", json.dumps({"mode": mode, "step_ms": 1000 * statistics.median(steps)}), flush=True)


def _measure(mode, np_):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1")
    if mode == "alone":
        env = {k: v for k, v in env.items() if not k.startswith("TFRING_")}
        cmd = [sys.executable, HERE, "--rank-job", "alone"]
    else:
        cmd = [sys.executable, "-m", "tfring", "run", "-np", str(np_), sys.executable, HERE, "--rank-job", mode]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in out.stdout.splitlines() if "RESULT" in line]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{mode}: exit {out.returncode}: {out.stderr[-2000:]}")
    return json.loads(lines[-1].split("RESULT", 1)[1])["step_ms"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--rank-job", choices=MODES, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_job:
        return _job(args.rank_job)
    figures = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            figures[mode].append(_measure(mode, args.np))
    medians = {mode: statistics.median(values) for mode, values in figures.items()}
    print(f"{'':44} {'step ms (median)':>16} {'vs RingStrategy':>16}")
    names = {"horovod": f"tfring.horovod DistributedOptimizer, {args.np} ranks",
             "ring": f"RingStrategy, {args.np} ranks", "alone": "one process, per-rank batch (compute alone)"}
    for mode in MODES:
        print(f"{names[mode]:44} {medians[mode]:16.1f} {medians[mode] / medians['ring']:16.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"np": args.np, "rounds": args.rounds, "step_ms": figures, "median_ms": medians}, f, indent=1)


if __name__ == "__main__":
    main()
