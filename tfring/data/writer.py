"""Converts a dataset into sharded TFRecord files with a meta file: `tfring convert` / `write_tfrecords`.

The plan (which examples go to which shard) is fixed before writing and saved as
`PREFIX.plan.json`. Each shard is written under a temporary name, checksummed and renamed when
complete, and its checksum recorded in the plan; so a run killed midway leaves no file under a
final shard name, and `resume=True` keeps every complete shard whose checksum still matches and
writes the rest. `PREFIX.meta.json` is written last; the plan is then removed.
"""

import concurrent.futures
import hashlib
import math
import os
import threading
import time

import numpy as np

from tfring.data import meta as meta_lib
from tfring.data.encoding import check_value
from tfring.data.encoding import example_bytes
from tfring.data.sources import BadItem
from tfring.data.sources import open_source

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
_COMPRESSION = {"none": None, "gzip": "GZIP", "zlib": "ZLIB"}


def parse_size(text):
    """'128MB' -> 128000000 (B, KB, MB, GB, KiB, MiB, GiB; a bare number is bytes).

    Args:
        text: the size.

    Returns:
        An int > 0.

    Raises:
        ValueError: not a size.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        number, unit = float(text), ""
    else:
        s = str(text).strip().upper().replace(" ", "")
        digits = s.rstrip("KMGIB")
        number, unit = digits, s[len(digits):]
        try:
            number = float(number)
        except ValueError:
            number = -1
    if unit not in _UNITS or number <= 0:
        raise ValueError(f"not a size: {text!r} (examples: 128MB, 1GiB, 500000)")
    return int(number * _UNITS[unit])


class _Progress:
    """A tqdm bar with records/s and MB/s when tqdm is there and wanted; a thread-safe counter always."""

    def __init__(self, total, enabled):
        self.records = 0
        self.bytes = 0
        self._lock = threading.Lock()
        self._start = time.perf_counter()
        self._bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, unit="rec", unit_scale=True, smoothing=0.1, dynamic_ncols=True)
            except ImportError:
                pass

    def add(self, records, size):
        with self._lock:
            self.records += records
            self.bytes += size
            if self._bar is not None:
                self._bar.update(records)
                elapsed = max(time.perf_counter() - self._start, 1e-9)
                self._bar.set_postfix_str(f"{self.bytes / elapsed / 1e6:.1f} MB/s", refresh=False)

    def close(self):
        if self._bar is not None:
            self._bar.close()
        return time.perf_counter() - self._start


def _sha256(path):
    import tensorflow as tf

    h = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        while True:
            block = f.read(1 << 22)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def _existing_outputs(prefix):
    import tensorflow as tf

    found = tf.io.gfile.glob(prefix + "-*-of-*.tfrecord*")
    for suffix in (meta_lib.META_SUFFIX, meta_lib.PLAN_SUFFIX):
        if meta_lib.exists(prefix + suffix):
            found.append(prefix + suffix)
    return sorted(found)


def _plan(source, num_shards, shard_size, shuffle, seed):
    indices = np.arange(len(source))
    if shuffle:
        indices = np.random.default_rng(seed).permutation(len(source))
    if num_shards is None:
        sample = [i for i in indices[: min(len(indices), 32)]]
        sizes = []
        for i in sample:
            try:
                sizes.append(len(example_bytes(source.features, source.example(int(i)))))
            except BadItem:
                continue
        per_example = (sum(sizes) / len(sizes)) if sizes else 1
        num_shards = max(1, math.ceil(per_example * len(source) / shard_size))
    num_shards = min(num_shards, len(source))
    return [part.tolist() for part in np.array_split(indices, num_shards)]


def _verified_complete(prefix, progress):
    """A finished dataset met again with resume=True: check every shard against the meta file."""
    result = meta_lib.load_meta(prefix)
    folder = os.path.dirname(prefix)
    for shard in result.shards:
        path = folder.rstrip("/") + "/" + shard["file"]
        if not meta_lib.exists(path) or _sha256(path) != shard["sha256"]:
            raise ValueError(f"{prefix} is complete according to its meta file, but shard {path} is missing or "
                             f"its checksum differs; delete the dataset and convert again")
    if progress:
        print(f"tfring convert: {prefix} is already complete ({result.total} records, {len(result.shards)} shards, "
              f"checksums verified)", flush=True)
    return result


_SHARD_KEYS = ("file", "count", "bytes", "sha256")


def _dataset_meta(source, records, compression, shuffle, seed):
    """The meta file's contents, built from the shards' plan records alone (kept or rewritten alike)."""
    image_shapes = sorted({tuple(shape) for r in records for shape in r["image_shapes"]})
    skipped = sorted((item for r in records for item in r["skipped"]), key=str)
    source_info = dict(source.description, shuffle=bool(shuffle), seed=seed)
    if image_shapes:
        source_info["image_shapes"] = [list(shape) for shape in image_shapes[:16]]
        source_info["uniform_image_shape"] = list(image_shapes[0]) if len(image_shapes) == 1 else None
    return meta_lib.DatasetMeta(features=list(source.features), label=source.label,
                                shards=[{k: r[k] for k in _SHARD_KEYS} for r in records], compression=compression,
                                source=source_info, classes=source.classes, skipped=skipped)


def write_tfrecords(source, output_prefix, format="auto", shard_size="128MB", num_shards=None, compression="none",
                    workers=None, shuffle=False, seed=None, resume=False, skip_bad=False, label=None,
                    datasets=None, labels_file=None, progress=True):
    """Converts `source` into `PREFIX-00000-of-0000N.tfrecord[.gz]` shards and `PREFIX.meta.json`.

    Args:
        source: a file or folder (see `tfring.data.sources.FORMATS`), or a `Source`.
        output_prefix: the output path prefix (local, or `s3://`/`hdfs://` where tensorflow-io loads).
        format: "auto" or a format name.
        shard_size: the target size of a shard ("128MB"); ignored when `num_shards` is given.
        num_shards: the number of shards.
        compression: "none", "gzip" or "zlib".
        workers: shards written in parallel (default: the number of CPUs, at most 8).
        shuffle: shuffle the examples before sharding (with `seed`).
        seed: the shuffle seed.
        resume: keep the complete, verified shards of an interrupted run with the same arguments.
        skip_bad: skip unreadable items (reported in the result and the meta file) instead of failing.
        label: the label feature for numpy/csv/parquet/hdf5 (default "label" when present).
        datasets: the HDF5 datasets to store.
        labels_file: a CSV of `file,label` for TIFF patches.
        progress: show a progress bar (tqdm) and print a summary line.

    Returns:
        The `DatasetMeta` written.

    Raises:
        ValueError: bad arguments, unusable input, or an output prefix holding another dataset.
        BadItem: an unreadable item (without `skip_bad`), naming it.

    Example:

    >>> meta = write_tfrecords("images/", "data/train", num_shards=16, shuffle=True, seed=0)
    >>> meta.total
    20000
    """
    import tensorflow as tf

    from tfring.data import remote

    if compression not in _COMPRESSION:
        raise ValueError(f"compression must be one of {', '.join(_COMPRESSION)}, got {compression!r}")
    if num_shards is not None and (isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1):
        raise ValueError(f"num_shards must be a positive int, got {num_shards!r}")
    shard_bytes = parse_size(shard_size)
    workers = workers or min(8, os.cpu_count() or 1)
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    remote.check_path(output_prefix)
    if isinstance(source, str):
        source = open_source(source, format=format, label=label, datasets=datasets, labels_file=labels_file)
    if not meta_lib.is_remote(output_prefix):
        output_prefix = os.path.abspath(output_prefix)
        os.makedirs(os.path.dirname(output_prefix), exist_ok=True)

    plan_path = output_prefix + meta_lib.PLAN_SUFFIX
    shards = _plan(source, num_shards, shard_bytes, shuffle, seed)
    fingerprint = {"source": source.description, "examples": len(source), "shards": [len(s) for s in shards],
                   "shuffle": bool(shuffle), "seed": seed, "compression": compression}
    existing = _existing_outputs(output_prefix)
    meta_path = output_prefix + meta_lib.META_SUFFIX
    done = {}
    if resume and meta_lib.exists(plan_path):
        previous = meta_lib.read_json(plan_path)
        if previous.get("fingerprint") != fingerprint:
            raise ValueError(f"--resume: {plan_path} was written for other arguments or another source "
                             f"(it says {previous.get('fingerprint')}); rerun with the same arguments")
        done = previous.get("done", {})
    elif resume and meta_lib.exists(meta_path):
        return _verified_complete(output_prefix, progress)
    elif existing:
        raise ValueError(f"{output_prefix} already holds a dataset ({len(existing)} files, e.g. "
                         f"{os.path.basename(existing[0])}); choose another output prefix or delete them first")
    plan = {"fingerprint": fingerprint, "done": done}
    meta_lib.write_json_atomically(plan_path, plan)
    for stale in tf.io.gfile.glob(output_prefix + "-*.tmp-*"):
        tf.io.gfile.remove(stale)  # temporary files of a killed run

    names = [meta_lib.shard_file_name(output_prefix, i, len(shards), compression) for i in range(len(shards))]
    bar = _Progress(len(source), progress)
    lock = threading.Lock()
    results = {}

    def write_shard(index):
        final = names[index]
        kept = done.get(str(index))
        if kept and "skipped" in kept and tf.io.gfile.exists(final) and _sha256(final) == kept["sha256"]:
            bar.add(kept["count"], kept["bytes"])
            return kept  # complete and verified by the interrupted run's checksum
        partial = f"{final}.tmp-{os.getpid()}-{threading.get_ident()}"
        count = 0
        skipped, image_shapes = [], set()
        options = tf.io.TFRecordOptions(compression_type=_COMPRESSION[compression])
        with tf.io.TFRecordWriter(partial, options) as writer:
            for i in shards[index]:
                try:
                    values = source.example(int(i))
                    for spec in source.features:
                        if spec.encoding not in ("image",):
                            check_value(spec, values[spec.name])
                except (BadItem, ValueError) as e:
                    if not skip_bad:
                        raise BadItem(source.item_name(int(i)), getattr(e, "reason", str(e))) from None
                    skipped.append({"item": source.item_name(int(i)), "reason": getattr(e, "reason", str(e))})
                    continue
                if "channels" in values and "height" in values:
                    image_shapes.add((int(values["height"]), int(values["width"]), int(values["channels"])))
                data = example_bytes(source.features, values)
                writer.write(data)
                count += 1
                bar.add(1, len(data))
        size = tf.io.gfile.stat(partial).length
        digest = _sha256(partial)
        # What the meta file needs from this shard travels with it in the plan, so that a resumed
        # run's meta equals an uninterrupted run's.
        record = {"file": os.path.basename(final), "count": count, "bytes": size, "sha256": digest,
                  "skipped": skipped, "image_shapes": sorted(list(s) for s in image_shapes)}
        # Record the checksum before the rename: a file under a final name is always in the plan
        # (killed in between, the plan names a file that does not exist, and resume rewrites it).
        with lock:
            plan["done"][str(index)] = record
            meta_lib.write_json_atomically(plan_path, plan)
        tf.io.gfile.rename(partial, final, overwrite=True)
        return record

    try:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            futures = {pool.submit(write_shard, i): i for i in range(len(shards))}
            for future in concurrent.futures.as_completed(futures):
                results[futures[future]] = future.result()
    finally:
        elapsed = bar.close()
    result = _dataset_meta(source, [results[i] for i in range(len(shards))], compression, shuffle, seed)
    meta_lib.write_json_atomically(output_prefix + meta_lib.META_SUFFIX, result.to_json())
    tf.io.gfile.remove(plan_path)
    if progress:
        total_bytes = sum(s["bytes"] for s in result.shards)
        print(f"tfring convert: {result.total} records in {len(result.shards)} shards, {total_bytes / 1e6:.1f} MB, "
              f"{elapsed:.1f} s ({result.total / max(elapsed, 1e-9):.0f} records/s, "
              f"{total_bytes / 1e6 / max(elapsed, 1e-9):.1f} MB/s)"
              + (f"; skipped {len(result.skipped)} unreadable items (listed in the meta file)" if result.skipped else "")
              + f" -> {output_prefix}{meta_lib.META_SUFFIX}", flush=True)
    return result
