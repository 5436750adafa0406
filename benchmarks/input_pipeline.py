"""Input pipeline throughput: tfring.data.tfrecord_dataset vs a naive TFRecord pipeline vs loose files.

    python benchmarks/input_pipeline.py [--jpegs 20000] [--patches 2000] [--batch 256] [--repeats 3]

Generates, in a temporary folder, small JPEGs in class folders and 120x120x12 uint16 patches
(BigEarthNet-like), converts both with `tfring convert`'s API (timing MB/s), then times one pass
over each dataset (built once, one untimed pass first, as model.fit reuses a dataset every epoch),
interleaved over repeats (medians):
- tfring: `tfrecord_dataset` (parallel interleaved reads, batch-then-parse, parallel decode, prefetch);
- naive: TFRecordDataset -> per-record parse_single_example (+ decode) -> batch, no parallelism or
  prefetch;
- loose files (JPEGs only): list_files -> read_file -> decode -> batch, no parallelism.
Every pipeline decodes the images (JPEG -> uint8, patches -> uint16) so they do the same work.
Target: tfring >= 3x the naive pipeline. Beside records/s it prints the process CPU time per record
and the cores kept busy, which tell apart doing less work per record from using more cores.
"""

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _make_jpegs(root, n, size=32):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(10):
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
    base = rng.integers(0, 255, (size, size, 3)).astype("uint8")
    for i in range(n):
        image = np.roll(base, i % size, axis=i % 2)
        Image.fromarray(image).save(os.path.join(root, f"class{i % 10}", f"{i:06d}.jpg"), quality=90)


def _make_patches(path, n):
    import numpy as np

    rng = np.random.default_rng(1)
    patches = np.lib.format.open_memmap(path, mode="w+", dtype="uint16", shape=(n, 120, 120, 12))
    block = rng.integers(0, 10000, (120, 120, 12)).astype("uint16")
    for i in range(n):
        patches[i] = np.roll(block, i, axis=0)
    patches.flush()


def _naive(files, parse_one):
    import tensorflow as tf

    def build(batch):
        return tf.data.TFRecordDataset(files).map(parse_one).batch(batch)

    return build


def _loose_jpegs(root):
    import tensorflow as tf

    def build(batch):
        def load(path):
            image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
            label = tf.strings.to_number(tf.strings.substr(tf.strings.split(path, os.sep)[-2], 5, 1), tf.int64)
            return image, label

        return tf.data.Dataset.list_files(os.path.join(root, "*", "*.jpg"), shuffle=False).map(load).batch(batch)

    return build


def _cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _time_pass(dataset):
    """(records/s, process CPU seconds per record) of one pass."""
    start, cpu = time.perf_counter(), _cpu_seconds()
    records = 0
    for x, _ in dataset:
        records += int(x.shape[0])
    return records / (time.perf_counter() - start), (_cpu_seconds() - cpu) / records


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jpegs", type=int, default=20000)
    parser.add_argument("--patches", type=int, default=2000, help="120x120x12 uint16 patches (346 KB each)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to generate the data (default: a temporary folder)")
    args = parser.parse_args()

    import tensorflow as tf

    from tfring.data import tfrecord_dataset
    from tfring.data import write_tfrecords

    work = args.dir or tempfile.mkdtemp(prefix="tfring-input-bench-")
    try:
        print(f"generating {args.jpegs} JPEGs and {args.patches} patches in {work} ...", flush=True)
        _make_jpegs(os.path.join(work, "jpegs"), args.jpegs)
        _make_patches(os.path.join(work, "patches.npy"), args.patches)
        convert = {}
        for name, source in (("jpegs", os.path.join(work, "jpegs")), ("patches", os.path.join(work, "patches.npy"))):
            start = time.perf_counter()
            meta = write_tfrecords(source, os.path.join(work, "tfr", name), num_shards=16, progress=False)
            seconds = time.perf_counter() - start
            size = sum(s["bytes"] for s in meta.shards)
            convert[name] = (meta.total / seconds, size / seconds / 1e6, size / 1e6)

        def shard_files(name):
            return sorted(tf.io.gfile.glob(os.path.join(work, "tfr", name + "-*-of-*.tfrecord")))

        jpeg_spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
        patch_spec = {"patches": tf.io.FixedLenFeature([], tf.string)}

        def parse_jpeg(record):
            ex = tf.io.parse_single_example(record, jpeg_spec)
            return tf.io.decode_jpeg(ex["image"], channels=3), ex["label"]

        def parse_patch(record):
            ex = tf.io.parse_single_example(record, patch_spec)
            return tf.reshape(tf.io.decode_raw(ex["patches"], tf.uint16), [120, 120, 12]), tf.constant(0)

        peers = {
            ("jpegs", "tfring tfrecord_dataset"): lambda b: tfrecord_dataset(os.path.join(work, "tfr", "jpegs"), b,
                                                                              shuffle=False, drop_remainder=False),
            ("jpegs", "naive TFRecord pipeline"): _naive(shard_files("jpegs"), parse_jpeg),
            ("jpegs", "loose JPEG files"): _loose_jpegs(os.path.join(work, "jpegs")),
            ("patches", "tfring tfrecord_dataset"): lambda b: tfrecord_dataset(
                os.path.join(work, "tfr", "patches"), b, shuffle=False, drop_remainder=False,
                map_fn=lambda x: (x, 0)),
            ("patches", "naive TFRecord pipeline"): _naive(shard_files("patches"), parse_patch),
        }
        # Each dataset is built once and iterated once untimed (tracing, file checks), as model.fit
        # iterates one dataset per epoch; then timed passes, interleaved.
        datasets = {key: build(args.batch) for key, build in peers.items()}
        for dataset in datasets.values():
            _time_pass(dataset)
        times = {key: [] for key in peers}
        for _ in range(args.repeats):
            for key, dataset in datasets.items():
                times[key].append(_time_pass(dataset))
        print(f"\ninput pipeline, records/s (one pass, batch {args.batch}), {os.cpu_count()} cores, "
              f"TF {tf.__version__}, medians of {args.repeats}")
        print(f"| {'data':<36} | {'pipeline':<26} | {'records/s':>10} | {'x naive':>7} | {'CPU us/record':>13} "
              f"| {'cores busy':>10} |")
        print(f"|{'-' * 38}|{'-' * 28}|{'-' * 11}:|{'-' * 8}:|{'-' * 14}:|{'-' * 11}:|")
        labels = {"jpegs": f"{args.jpegs} JPEGs 32x32", "patches": f"{args.patches} patches 120x120x12 uint16"}
        for data in ("jpegs", "patches"):
            naive = statistics.median(r for r, _ in times[(data, "naive TFRecord pipeline")])
            for (d, peer), samples in times.items():
                if d == data:
                    med = statistics.median(r for r, _ in samples)
                    cpu = statistics.median(c for _, c in samples)
                    print(f"| {labels[data]:<36} | {peer:<26} | {med:>10.0f} | {med / naive:>7.2f} | "
                          f"{cpu * 1e6:>13.1f} | {cpu * med:>10.2f} |")
        for name, (rps, mbps, size) in convert.items():
            print(f"converter, {labels[name]}: {rps:.0f} records/s, {mbps:.1f} MB/s ({size:.0f} MB in 16 shards)")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
