"""Step time of model.fit under RingStrategy, and what each step all-reduces, in one run.

    python benchmarks/step_time.py [--rounds 3] [--np 2] [--json results.json]

Issue 16's benchmark, growing with it. Today: gradient accumulation. A 2.1 M-parameter MLP
(8.4 MB of float32 gradients) trains on synthetic rows, 32 per rank per micro-step, with
`gradient_accumulation_steps` k = 1 (no accumulation) and k = 4, as a `tfring run -np N` job on
this host, one intra-op thread per rank. For each k it prints the median time of a micro-step
(timed between `on_train_batch_end` calls, after a warm-up epoch) and the gradient bytes each
rank all-reduced per micro-step (`tfring.traffic()`): accumulation should cut the traffic by k.
The runs are interleaved over rounds; medians over rounds.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.abspath(__file__)
ROWS_PER_RANK = 32
MICRO_STEPS = 32
WIDTH = 1024


def _job(k):
    """One rank's measurement (runs under tfring run): prints one JSON line on rank 0."""
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
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", STEP_TIME_K=str(k))
    proc = subprocess.run([sys.executable, "-m", "tfring", "run", "-np", str(np_), sys.executable, HERE, "--rank"],
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"k={k}: the job failed:\n{proc.stderr[-3000:]}")
    line = next(line for line in proc.stdout.splitlines() if "RESULT " in line)
    return json.loads(line.split("RESULT ", 1)[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        return _job(int(os.environ["STEP_TIME_K"]))
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
