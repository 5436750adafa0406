"""Step time of a Horovod script on tfring.horovod beside the same training under RingStrategy, in one run.

    .venv/bin/python benchmarks/horovod_step.py [--np 2] [--rounds 3] [--json results.json]
        [--horovod-python PATH]

Issue 35's benchmark. The same MLP (2.1 M parameters, 8.4 MB of float32 gradients) trains on
synthetic rows, 32 per rank per step, one intra-op thread per rank, as a `tfring run -np N` job on
this host:
- `tfring.horovod`: Horovod's pattern with the import line changed (`hvd.DistributedOptimizer`, each
  rank fits its own rows with the per-rank batch, `BroadcastGlobalVariablesCallback(0)`);
- `RingStrategy`: the same model and global batch (32 x N) under `tfring.RingStrategy()`;
- one process with the per-rank batch and no communication (the compute alone).
And the same model in a `DistributedGradientTape` loop (a `tf.function` step, SGD with momentum):
- `tape`: on `tfring.horovod.tensorflow`, under `tfring run`;
- `horovod-tape`: on Horovod 0.28.1 itself, under `horovodrun --gloo`, with `--horovod-python` naming
  the Python of an environment where Horovod is built (`make bench-horovod` builds one in
  .venv-horovod, on TensorFlow 2.16.2). Horovod's
  `DistributedOptimizer` is not timed: on Keras 3 it trains without averaging (docs/migrating.md,
  Coming from Horovod), so only its tape loop does Horovod's work.
Each prints the median time of a step (between `on_train_batch_end` calls, or steps of the loop,
after a warm-up epoch). Runs are interleaved over rounds; medians over rounds; ratios against
RingStrategy.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.abspath(__file__)
ROWS, STEPS, WIDTH = 32, 40, 1024
MODES = ("horovod", "ring", "alone", "tape", "horovod-tape")


def _model_and_optimizer(keras):
    """The benchmark's MLP (2.1 M parameters) and SGD with momentum, the same in every mode."""
    model = keras.Sequential([keras.Input((WIDTH,)), keras.layers.Dense(WIDTH, activation="relu"),
                              keras.layers.Dense(WIDTH, activation="relu"), keras.layers.Dense(10)])
    return model, keras.optimizers.SGD(0.01, momentum=0.9)


def _median_step_ms(times):
    """The median of the second epoch's steps, from the time each step ended."""
    return 1000 * statistics.median(b - a for a, b in zip(times[STEPS:], times[STEPS + 1:]))


def _tape_job(mode):
    """One rank's `DistributedGradientTape` loop on tfring.horovod or Horovod: rank 0 prints one JSON line."""
    import time

    import keras
    import numpy as np
    import tensorflow as tf

    if mode == "tape":
        import tfring.horovod.tensorflow as hvd
    else:
        import horovod.tensorflow as hvd
    tf.config.threading.set_intra_op_parallelism_threads(1)
    hvd.init()
    x = tf.constant(np.random.default_rng(hvd.rank()).standard_normal((ROWS, WIDTH)).astype("float32"))
    y = tf.constant(np.random.default_rng(1).integers(0, 10, ROWS))
    model, opt = _model_and_optimizer(keras)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # The tf.Variables under Keras 3's: Horovod's tape calls `.ref()`, which Keras 3 variables lack.
    sources = [v.value for v in model.trainable_variables]

    @tf.function
    def step(first):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, sources)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    step(True)
    times = []
    for _ in range(2 * STEPS):
        step(False).numpy()
        times.append(time.perf_counter())
    weights = float(sum(tf.reduce_sum(w) for w in model.trainable_variables))
    same = float(hvd.allreduce(tf.constant(weights, tf.float64), op=hvd.Max)) == weights
    if hvd.rank() == 0:
        print("RESULT", json.dumps({"mode": mode, "step_ms": _median_step_ms(times), "ranks_equal": same}),
              flush=True)


def _job(mode):
    """One rank's measurement (runs under tfring run, or alone): rank 0 prints one JSON line."""
    if mode in ("tape", "horovod-tape"):
        return _tape_job(mode)
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
        model, opt = _model_and_optimizer(keras)
        if mode == "horovod":
            opt = hvd.DistributedOptimizer(opt)
        model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    times = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter())

    callbacks = [Clock()] + ([hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if mode == "horovod" else [])
    model.fit(x, y, batch_size=global_rows, epochs=2, verbose=0, shuffle=False, callbacks=callbacks)
    if rank == 0:
        print("RESULT", json.dumps({"mode": mode, "step_ms": _median_step_ms(times)}), flush=True)


def _measure(mode, np_, horovod_python=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1")
    if mode == "horovod-tape":
        env = {k: v for k, v in env.items() if not k.startswith("TFRING_")}
        horovodrun = os.path.join(os.path.dirname(horovod_python), "horovodrun")
        cmd = [horovodrun, "-np", str(np_), "--gloo", horovod_python, HERE, "--rank-job", mode]
    elif mode == "alone":
        env = {k: v for k, v in env.items() if not k.startswith("TFRING_")}
        cmd = [sys.executable, HERE, "--rank-job", "alone"]
    else:
        cmd = [sys.executable, "-m", "tfring", "run", "-np", str(np_), sys.executable, HERE, "--rank-job", mode]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in out.stdout.splitlines() if "RESULT" in line]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{mode}: exit {out.returncode}: {out.stderr[-2000:]}")
    result = json.loads(lines[-1].split("RESULT", 1)[1])
    if result.get("ranks_equal") is False:
        raise RuntimeError(f"{mode}: the ranks' weights differ after the loop: its gradients were not averaged")
    return result["step_ms"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--horovod-python", default=None,
                        help="the Python of an environment with Horovod 0.28.1 built: adds its tape loop")
    parser.add_argument("--rank-job", choices=MODES, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_job:
        return _job(args.rank_job)
    modes = MODES if args.horovod_python else MODES[:-1]
    figures = {mode: [] for mode in modes}
    for _ in range(args.rounds):
        for mode in modes:
            figures[mode].append(_measure(mode, args.np, args.horovod_python))
    medians = {mode: statistics.median(values) for mode, values in figures.items()}
    print(f"{'':48} {'step ms (median)':>16} {'vs RingStrategy':>16}")
    names = {"horovod": f"tfring.horovod DistributedOptimizer, {args.np} ranks",
             "ring": f"RingStrategy, {args.np} ranks", "alone": "one process, per-rank batch (compute alone)",
             "tape": f"tfring.horovod DistributedGradientTape, {args.np} ranks",
             "horovod-tape": f"Horovod 0.28.1 DistributedGradientTape, {args.np} ranks"}
    for mode in modes:
        print(f"{names[mode]:48} {medians[mode]:16.1f} {medians[mode] / medians['ring']:16.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"np": args.np, "rounds": args.rounds, "step_ms": figures, "median_ms": medians}, f, indent=1)


if __name__ == "__main__":
    main()
