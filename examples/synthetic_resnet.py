"""ResNet-50 on synthetic images with RingStrategy: a throughput check, no data needed.

    tfring run -np 2 python examples/synthetic_resnet.py --batch-size 32 --image-size 112 --steps 20

Rank 0 prints images/s of the timed steps (after warm-up). The batch size is global.
"""

import argparse
import time

import keras
import numpy as np
import tensorflow as tf

import tfring


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32, help="global batch size")
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    strategy = tfring.RingStrategy()
    if args.batch_size % strategy.size:
        raise SystemExit(f"--batch-size {args.batch_size} must be a multiple of the {strategy.size} ranks")
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.applications.ResNet50(weights=None, input_shape=(args.image_size, args.image_size, 3),
                                            classes=1000)
        model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False))
    rng = np.random.default_rng(0)
    images = rng.random((args.batch_size, args.image_size, args.image_size, 3), dtype=np.float32)
    labels = rng.integers(0, 1000, args.batch_size).astype("int32")
    data = tf.data.Dataset.from_tensors((images, labels)).repeat()

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == args.warmup:
                self.start = time.perf_counter()

    timer = Timer()
    model.fit(data, steps_per_epoch=args.warmup + args.steps, epochs=1, verbose=0, callbacks=[timer])
    elapsed = time.perf_counter() - timer.start
    if strategy.rank == 0:
        ips = args.steps * args.batch_size / elapsed
        print(f"ResNet-50, {strategy.size} rank(s), global batch {args.batch_size}, "
              f"{args.image_size}px: {ips:.1f} images/s over {args.steps} steps")


if __name__ == "__main__":
    main()
