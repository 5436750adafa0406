"""Large-batch training on scikit-learn's digits: the linear scaling rule, warm-up and LARS.

    python examples/large_batch.py            # one process (the global batch is what matters)
    tfring run -np 2 python examples/large_batch.py

Trains the digits CNN of examples/digits.py for the same number of epochs with
  base: SGD + momentum at batch 32 and the base learning rate;
  (a)  batch 512, learning rate scaled by the linear rule (x16), no warm-up;
  (b)  the same with a 5-epoch gradual warm-up from the base rate;
  (c)  LARS (Nesterov) at batch 512 with the same warm-up;
and prints the validation accuracy of each, the mean over 3 seeds. Fixed split and seeds.
"""

import argparse
import os
import sys

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfring  # noqa: E402
from digits import make_model  # noqa: E402

BASE_BATCH = 32
LARGE_BATCH = 512
# LARS as in the paper: every layer adapted (biases too); biases get no weight decay. With the
# default exclusions (biases at ratio 1) the x16 rate that LARS needs makes the biases diverge.
ADAPT_EXCLUDE = []


def _data():
    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]
    y = digits.target.astype("int32")
    return train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)


def run(strategy, config, seed, args, data):
    """Trains one configuration with one seed; returns the validation accuracy."""
    x_train, x_val, y_train, y_val = data
    batch = BASE_BATCH if config == "base" else LARGE_BATCH
    lr = tfring.scale_learning_rate(args.base_lr, batch, base_batch_size=BASE_BATCH)
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = make_model()
        if config == "lars":
            optimizer = tfring.optimizers.LARS(tfring.scale_learning_rate(args.lars_base_lr, batch, BASE_BATCH),
                                               momentum=0.9, nesterov=True, weight_decay=args.weight_decay,
                                               exclude_from_layer_adaptation=ADAPT_EXCLUDE)
        else:
            optimizer = keras.optimizers.SGD(lr, momentum=0.9, nesterov=True)
        model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    callbacks = []
    if config in ("warmup", "lars"):
        start = args.lars_base_lr if config == "lars" else args.base_lr
        callbacks.append(tfring.callbacks.LearningRateWarmup(warmup_epochs=args.warmup_epochs, start_lr=start))
    # Drop the last partial batch so every step has the named global batch (and ranks divide it).
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(4096, seed=seed).batch(
        batch, drop_remainder=True)
    model.fit(train, epochs=args.epochs, verbose=0, callbacks=callbacks)
    val_batch = strategy.num_replicas_in_sync * 8
    n = len(x_val) // val_batch * val_batch
    return model.evaluate(x_val[:n], y_val[:n], batch_size=val_batch, verbose=0, return_dict=True)["accuracy"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--warmup-epochs", type=float, default=5)
    parser.add_argument("--base-lr", type=float, default=0.01, help="SGD rate at batch 32")
    parser.add_argument("--lars-base-lr", type=float, default=1.0, help="LARS rate at batch 32 (scaled x16)")
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--configs", default="base,large,warmup,lars")
    args = parser.parse_args()

    tf.config.threading.set_intra_op_parallelism_threads(2)
    strategy = tfring.RingStrategy()
    data = _data()
    names = {"base": f"SGD, batch {BASE_BATCH}, lr {args.base_lr:g}",
             "large": f"(a) SGD, batch {LARGE_BATCH}, linear rule, no warm-up",
             "warmup": f"(b) SGD, batch {LARGE_BATCH}, linear rule, {args.warmup_epochs:g}-epoch warm-up",
             "lars": f"(c) LARS, batch {LARGE_BATCH}, linear rule, {args.warmup_epochs:g}-epoch warm-up"}
    results = {}
    for config in args.configs.split(","):
        accuracies = [run(strategy, config, seed, args, data) for seed in range(args.seeds)]
        results[config] = accuracies
        if strategy.rank == 0:
            print(f"{names[config]:<58} val accuracy {np.mean(accuracies):.4f} "
                  f"(seeds: {', '.join(f'{a:.4f}' for a in accuracies)})", flush=True)
    if strategy.rank == 0 and "base" in results:
        for config in results:
            if config != "base":
                gap = 100 * (np.mean(results[config]) - np.mean(results["base"]))
                print(f"{config}: {gap:+.2f} points vs base batch")


if __name__ == "__main__":
    main()
