"""What the cross-rank check of NumPy inputs costs a `fit` call (`tfring.strategy.input.digest`).

    python benchmarks/input_digest.py [--gib 1] [--repeats 7]

Digests arrays of about `--gib` GiB (float32 contiguous, the same as a strided column view, and
uint8 images) and prints the median milliseconds per digest beside the time to read the whole
array once (`np.sum`), the least any full comparison would cost. The digest reads a fixed sample
of elements, so its cost does not grow with the array. One process: the allgather of the two
numbers each rank sends per call is not included.
"""

import argparse
import statistics
import time

import numpy as np

from tfring.strategy.input import digest as input_digest


def _median_ms(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    n = int(args.gib * (1 << 30))
    floats = np.random.default_rng(0).random(n // 4, dtype=np.float32).reshape(-1, 256)
    arrays = {
        f"float32 {floats.shape}": floats,
        f"float32 column view {floats[:, :128].shape}": floats[:, :128],
        f"uint8 images {(n // (224 * 224 * 3), 224, 224, 3)}": np.ones((n // (224 * 224 * 3), 224, 224, 3), np.uint8),
    }
    print(f"{'array':<48} {'GiB':>6} {'digest ms':>10} {'read once ms':>13} {'ratio':>7}")
    for name, array in arrays.items():
        digest = _median_ms(lambda: input_digest.array_digest(array), args.repeats)
        read = _median_ms(lambda: np.sum(array, dtype=np.float64), max(3, args.repeats // 2))
        print(f"{name:<48} {array.nbytes / (1 << 30):>6.2f} {digest:>10.2f} {read:>13.1f} {digest / read:>7.4f}")


if __name__ == "__main__":
    main()
