"""Train a small CNN on scikit-learn's bundled digits (8x8 images, offline) with RingStrategy.

    tfring run -np 2 python examples/digits.py

Every rank runs this same script. Each global batch of 64 images is split between the ranks, the
gradients are averaged across them, and rank 0 prints the validation accuracy.
"""

import argparse
import hashlib
import sys

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tfring


def make_model():
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    args = parser.parse_args()

    tf.config.threading.set_intra_op_parallelism_threads(1)
    keras.utils.set_random_seed(0)
    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]
    y = digits.target.astype("int32")
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)

    strategy = tfring.RingStrategy()
    with strategy.scope():
        model = make_model()
        model.compile(optimizer=keras.optimizers.Adam(2e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    # Any number of rows: the last, short batch is split between the ranks (the validation set's
    # 360 images are 5 batches of 64 and one of 40). The shuffle seed gives every rank one order.
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2048, seed=0).batch(args.batch_size)
    val = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(args.batch_size)
    # shuffle=False: the dataset shuffles itself (Keras warns that it ignores shuffle for datasets).
    # The progress lines print on rank 0 only.
    model.fit(train, epochs=args.epochs, shuffle=False, verbose=2)
    result = model.evaluate(val, verbose=0, return_dict=True)
    weights = np.concatenate([w.numpy().ravel() for w in model.weights])
    fingerprint = hashlib.sha256(weights.tobytes()).hexdigest()[:16]
    if strategy.rank == 0:
        print(f"digits: {strategy.size} ranks, global batch {args.batch_size}, {args.epochs} epochs: "
              f"validation accuracy {result['accuracy']:.4f} (loss {result['loss']:.4f})")
    # Every rank holds bit-identical weights (stderr is shown for every rank).
    print(f"rank {strategy.rank}: weights sha256 {fingerprint}", file=sys.stderr)


if __name__ == "__main__":
    main()
