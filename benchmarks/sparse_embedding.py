"""A large Embedding's gradient: allgathered rows (tfring's default) vs densified and all-reduced.

    python benchmarks/sparse_embedding.py [--np 2] [--vocab 1000000] [--dim 64] [--steps 20]

Trains a bag-of-words model (Embedding(vocab, dim) -> mean -> Dense) with SGD under RingStrategy,
once with `sparse_as_dense=False` (the rows each rank looked up travel: values and indices) and
once with `sparse_as_dense=True` (the whole vocab x dim table is all-reduced every step, what
tfring did before). Prints the median step time of each (after 3 warm-up steps) and the bytes each
rank hands to the collectives per step for the embedding, side by side.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

RANK = r'''
import json, os, sys, time
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
vocab, dim, steps, batch, tokens = (int(os.environ[k]) for k in ("VOCAB", "DIM", "STEPS", "BATCH", "TOKENS"))
strategy = tfring.RingStrategy(sparse_as_dense=os.environ["DENSE"] == "1")
rng = np.random.default_rng(0)  # the same arrays on every rank (each keeps its rows of every batch)
x = rng.integers(0, vocab, (batch * (steps + 3), tokens))
y = (x[:, 0] % 2).astype("int32")
with strategy.scope():
    model = keras.Sequential([keras.Input((tokens,), dtype="int64"), keras.layers.Embedding(vocab, dim),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Times(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        self.t = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        times.append(time.perf_counter() - self.t)


times = []
model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[Times()])
if strategy.rank == 0:
    print("TIMES", json.dumps(times[3:]))
'''


def run_mode(args, dense):
    env = dict(os.environ, VOCAB=str(args.vocab), DIM=str(args.dim), STEPS=str(args.steps), BATCH=str(args.batch),
               TOKENS=str(args.tokens), DENSE="1" if dense else "0", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONWARNINGS="ignore")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(RANK)
    try:
        proc = subprocess.run([sys.executable, "-m", "tfring", "run", "-np", str(args.np), sys.executable, f.name],
                              env=env, capture_output=True, text=True, timeout=1800)
    finally:
        os.unlink(f.name)
    line = next((l for l in proc.stdout.splitlines() if "TIMES" in l), None)
    if proc.returncode != 0 or line is None:
        sys.exit(f"benchmark run failed:\n{proc.stderr[-3000:]}")
    import json

    return json.loads(line.split("TIMES", 1)[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=256, help="global batch (rows)")
    parser.add_argument("--tokens", type=int, default=20, help="ids per row")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    rows_per_rank = args.batch // args.np * args.tokens  # looked-up rows (duplicates included)
    sparse_bytes = rows_per_rank * (args.dim * 4 + 8)      # float32 values + int64 indices
    dense_bytes = args.vocab * args.dim * 4
    print(f"Embedding({args.vocab}, {args.dim}): {dense_bytes / 2**20:.0f} MiB dense; {args.np} ranks, "
          f"global batch {args.batch} x {args.tokens} ids, {args.steps} timed steps")
    results = {}
    for name, dense in (("sparse (allgather rows)", False), ("sparse_as_dense=True", True)):
        times = run_mode(args, dense)
        results[name] = statistics.median(times) * 1e3
    print(f"{'mode':26} {'embedding bytes/rank/step':>26} {'median ms/step':>15}")
    print(f"{'sparse (allgather rows)':26} {sparse_bytes:>26,} {results['sparse (allgather rows)']:>15.1f}")
    print(f"{'sparse_as_dense=True':26} {dense_bytes:>26,} {results['sparse_as_dense=True']:>15.1f}")
    print(f"ratio dense/sparse: bytes {dense_bytes / sparse_bytes:.0f}x, "
          f"time {results['sparse_as_dense=True'] / results['sparse (allgather rows)']:.1f}x")


if __name__ == "__main__":
    main()
