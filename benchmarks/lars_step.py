"""One optimizer step on ResNet-50's variables: fused LARS op vs composed-TF LARS vs Keras SGD.

    python benchmarks/lars_step.py [--repeats 30] [--threads 0]

Builds ResNet-50 (keras.applications, random weights: 214 trainable variables, 25.6 M floats),
makes one set of random gradients, and times `optimizer.apply_gradients` inside a `tf.function`
(the way `model.fit` calls it) for each optimizer, interleaved over repeats; prints medians and
ratios. Targets: fused <= 1.3x SGD-momentum time and >= 2x faster than composed.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: TensorFlow's default)")
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    import tfring

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    model = keras.applications.ResNet50(weights=None)
    variables = model.trainable_variables
    rng = np.random.default_rng(0)
    grads = [tf.constant(rng.standard_normal(v.shape).astype("float32") * 1e-3) for v in variables]
    floats = sum(int(np.prod(v.shape)) for v in variables)

    optimizers = {
        "Keras SGD, momentum 0.9": keras.optimizers.SGD(0.1, momentum=0.9),
        "tfring LARS, fused op": tfring.optimizers.LARS(0.1, fused=True),
        "tfring LARS, composed TF ops": tfring.optimizers.LARS(0.1, fused=False),
    }
    steps = {}
    for name, opt in optimizers.items():
        opt.build(variables)
        steps[name] = tf.function(lambda g, opt=opt: opt.apply_gradients(zip(g, variables)))
        for _ in range(3):  # trace and warm up
            steps[name](grads)
    times = {name: [] for name in optimizers}
    for _ in range(args.repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step(grads)
            times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    sgd, fused, composed = med["Keras SGD, momentum 0.9"], med["tfring LARS, fused op"], med[
        "tfring LARS, composed TF ops"]
    print(f"\noptimizer step on ResNet-50's variables ({len(variables)} tensors, {floats / 1e6:.1f} M floats), "
          f"{os.cpu_count()} cores, TF {tf.__version__}, medians of {args.repeats}")
    print(f"| {'optimizer':<30} | {'ms / step':>9} | {'x SGD':>6} |")
    print(f"|{'-' * 32}|{'-' * 10}:|{'-' * 7}:|")
    for name, ms in med.items():
        print(f"| {name:<30} | {ms:>9.1f} | {ms / sgd:>6.2f} |")
    print(f"fused / SGD-momentum: {fused / sgd:.2f}x (target <= 1.3x); "
          f"composed / fused: {composed / fused:.2f}x (target >= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
