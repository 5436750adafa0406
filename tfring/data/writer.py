"""Converts a dataset into sharded TFRecord files with a meta file: `tfring convert` / `write_tfrecords`.

The plan (which examples go to which shard, `shard_plan`) is fixed before writing and saved as
`PREFIX.plan.json`. Each shard is written under a temporary name and checksummed (`shard_writer`),
its checksum recorded in the plan, then renamed; so a run killed midway leaves no file under a
final shard name, and `resume=True` keeps every complete shard whose checksum still matches and
writes the rest. `PREFIX.meta.json` is written last (`conversion_summary`); the plan is then removed.
"""

import concurrent.futures
import os

from tfring import checks
from tfring.data import conversion_summary
from tfring.data import meta as meta_lib
from tfring.data import shard_plan
from tfring.data import shard_writer
from tfring.data.progress import Progress
from tfring.data.sources import open_source

_WHERE = "write_tfrecords"
# Shards written in parallel by default: the CPUs, at most this many.
_MAX_WORKERS = 8


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
    from tfring.data import remote

    shard_bytes, workers = _checked_arguments(shard_size, num_shards, compression, workers)
    remote.check_path(output_prefix)
    if isinstance(source, str):
        source = open_source(source, format=format, label=label, datasets=datasets, labels_file=labels_file)
    output_prefix = _prepared_prefix(output_prefix)
    shards = shard_plan.split_examples(source, num_shards, shard_bytes, shuffle, seed)
    if shard_plan.finished(output_prefix, resume):
        return shard_plan.verify_complete(output_prefix, progress)
    plan = shard_plan.ShardPlan.start(output_prefix, shards, shard_plan.fingerprint(
        source, shards, shuffle, seed, compression), resume)
    bar = Progress(len(source), progress)
    try:
        records = _write_shards(source, plan, compression, skip_bad, workers, bar)
    finally:
        elapsed = bar.close()
    result = conversion_summary.dataset_meta(source, records, compression, shuffle, seed)
    meta_lib.write_json_atomically(output_prefix + meta_lib.META_SUFFIX, result.to_json())
    plan.remove()
    if progress:
        print(conversion_summary.summary_line(result, elapsed, output_prefix), flush=True)
    return result


def _checked_arguments(shard_size, num_shards, compression, workers):
    """(shard size in bytes, workers) once the arguments are checked."""
    checks.choice(_WHERE, "compression", compression, tuple(meta_lib.COMPRESSION_TYPES))
    if num_shards is not None:
        checks.number(_WHERE, "num_shards", num_shards, integer=True, at_least=1)
    shard_bytes = shard_plan.parse_size(shard_size)
    workers = workers or min(_MAX_WORKERS, os.cpu_count() or 1)
    return shard_bytes, checks.number(_WHERE, "workers", workers, integer=True, at_least=1)


def _prepared_prefix(output_prefix):
    """A local prefix made absolute, with its folder created; a remote one as it is."""
    if meta_lib.is_remote(output_prefix):
        return output_prefix
    output_prefix = os.path.abspath(output_prefix)
    os.makedirs(os.path.dirname(output_prefix), exist_ok=True)
    return output_prefix


def _write_shards(source, plan, compression, skip_bad, workers, bar):
    """Writes the plan's shards not done yet, `workers` at a time; returns every shard's record."""
    results = {}
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {pool.submit(_write_one, source, plan, i, compression, skip_bad, bar): i
                   for i in range(len(plan.shards))}
        for future in concurrent.futures.as_completed(futures):
            results[futures[future]] = future.result()
    return [results[i] for i in range(len(plan.shards))]


def _write_one(source, plan, index, compression, skip_bad, bar):
    kept = plan.kept(index)
    if kept:
        bar.add(kept["count"], kept["bytes"])
        return kept  # complete and verified by the interrupted run's checksum
    partial, record = shard_writer.write_shard(source, plan.shards[index], plan.file_name(index), compression,
                                               skip_bad, bar)
    plan.commit(index, partial, record)
    return record
