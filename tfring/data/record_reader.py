"""Reading a rank's shard files: `tfrecord_dataset`'s second stage.

The files are read in parallel and interleaved; each file's records are counted and checked
against the meta file's count, so that a truncated or corrupt shard fails naming the file and the
byte offset (or, with `skip_corrupt`, is read up to the damage and the loss logged).
"""

import os
import sys

import numpy as np
import tensorflow as tf

from tfring.data import meta as meta_lib

# Uncompressed framing: a 12-byte header and a 4-byte footer around each record.
_FRAMING_BYTES = 16


def read_records(files, compression, *, record_bytes, shuffle=True, seed=None, skip_corrupt=False,
                 deterministic=False):
    """The serialized records of `files`, read in parallel, each file's count checked.

    Args:
        files: `(path, shard)` pairs (`shard["count"]`: the records the meta file lists).
        compression: the meta file's compression ("none", "gzip", "zlib").
        record_bytes: the average record size, which sets how many records are checked at once.
        shuffle: read the files in a shuffled order.
        seed: the shuffle seed.
        skip_corrupt: stop a file at a corrupt record and log the loss instead of failing.
        deterministic: keep a fixed order through the parallel reads.

    Returns:
        A `tf.data.Dataset` of scalar strings.

    Example:

    >>> records = read_records([("data/train-00000-of-00001.tfrecord", {"count": 20})], "none",
    ...                        record_bytes=100)
    """
    paths = tf.constant([p for p, _ in files])
    counts = tf.constant([s["count"] for _, s in files], tf.int64)
    dataset = tf.data.Dataset.from_tensor_slices((paths, counts))
    if shuffle:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    # The per-file check runs once per chunk of records; chunks of ~4 MB keep the interleave's
    # buffers small for large records and the bookkeeping cheap for small ones.
    chunk = int(min(1024, max(1, (4 << 20) // max(1, record_bytes))))
    read = counted_reader(meta_lib.COMPRESSION_TYPES[compression], skip_corrupt, chunk)
    return dataset.interleave(read, cycle_length=min(len(files), 16), block_length=1,
                              num_parallel_calls=min(len(files), parallel_calls()), deterministic=deterministic)


def parallel_calls():
    """Calls in flight in the pipeline's parallel stages: one per core, at least 2.

    Fixed rather than AUTOTUNE: AUTOTUNE starts every new iterator (each epoch of `model.fit`) at 1
    and ramps up, which on short epochs measured up to 2x slower on some passes.

    Returns:
        An int.
    """
    return max(2, os.cpu_count() or 2)


def counted_reader(compression, skip_corrupt, chunk=1024):
    """A function `(path, expected) -> records` that reads one file and checks its count.

    A corrupt record stops the file (TF's reader cannot resynchronise): that fails naming the file
    and the byte offset, or with `skip_corrupt` logs how many records were skipped. The bookkeeping
    runs once per chunk of records, not per record.

    Args:
        compression: TensorFlow's compression type ("", "GZIP", "ZLIB").
        skip_corrupt: log a short file instead of failing.
        chunk: records counted at once.

    Returns:
        A function for `tf.data.Dataset.interleave`.
    """

    def read(path, expected):
        chunks = tf.data.TFRecordDataset(path, compression_type=compression).ignore_errors().batch(chunk)
        end = tf.data.Dataset.from_tensors((tf.zeros([0], tf.string), True))
        flagged = chunks.map(lambda c: (c, False)).concatenate(end)
        step = _counting_step(path, expected, compression, skip_corrupt)
        scanned = flagged.scan((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), step)
        return scanned.filter(lambda records, last: tf.logical_not(last)).map(lambda records, last: records).unbatch()

    return read


def _counting_step(path, expected, compression, skip_corrupt):
    """The scan step over `(records, last)` chunks; its state is (records, bytes) read so far."""

    def step(state, element):
        count, offset = state
        records, last = element
        checked = tf.cond(last, lambda: _checked_at_end(path, count, offset, expected, compression, skip_corrupt),
                          lambda: count)
        n = tf.size(records, out_type=tf.int64)
        size = tf.reduce_sum(tf.cast(tf.strings.length(records), tf.int64)) + _FRAMING_BYTES * n
        return (checked + n, offset + size), (records, last)

    return step


def _checked_at_end(path, count, offset, expected, compression, skip_corrupt):
    """`count`, once the file's end has been checked: fewer records than expected fail (or are
    logged with skip_corrupt), more always fail (the meta file belongs to another conversion)."""
    short = count < expected
    message = _damage_message(path, count, offset, expected, compression)
    extra = tf.debugging.Assert(count <= expected, [tf.strings.join([
        "tfring.data: ", path, " holds more records than the ", tf.strings.as_string(expected),
        " its meta file lists: the meta file belongs to another conversion"])])
    if skip_corrupt:
        def report():
            note = tf.print(tf.strings.join([message, ": skipped ", tf.strings.as_string(expected - count),
                                             " records"]), output_stream=sys.stderr)
            with tf.control_dependencies([note]):
                return tf.identity(count)

        with tf.control_dependencies([extra]):
            return tf.cond(short, report, lambda: count)
    check = tf.debugging.Assert(tf.logical_not(short), [message])
    with tf.control_dependencies([check, extra]):
        return tf.identity(count)


def _damage_message(path, count, offset, expected, compression):
    reached = [" (after record ", tf.strings.as_string(count), " of ", tf.strings.as_string(expected), ")"]
    if compression:  # offsets inside a compressed stream mean nothing to a reader of the file
        return tf.strings.join(["tfring.data: corrupt or truncated data in ", path] + reached + [
            ": a compressed shard cannot be read past damage, the rest of the file is lost"])
    return tf.strings.join(["tfring.data: corrupt or truncated record in ", path, " at byte ",
                            tf.strings.as_string(offset)] + reached)


def readable_on_every_rank(files, compression):
    """With skip_corrupt in a job of several ranks: how many records each rank can read.

    Corrupt records are only found by reading, and a rank that skips some would run fewer steps
    than the others (and `fit` would fail). So each rank reads its files once up front, the ranks
    exchange what they found, and rank 0 logs how many records each rank skipped.

    Args:
        files: this rank's `(path, shard)` pairs.
        compression: the meta file's compression ("none", "gzip", "zlib").

    Returns:
        A NumPy array: the records each rank can read in its files, by rank.
    """
    from tfring import runtime
    from tfring.ops import collectives

    found = sum(readable_records(path, compression) for path, _ in files)
    expected = sum(s["count"] for _, s in files)
    table = collectives.allgather(tf.constant([[found, expected - found]], tf.int64)).numpy()
    skipped = table[:, 1].tolist()
    if any(skipped) and runtime.rank() == 0:
        print(f"tfring.data: {sum(skipped)} records skipped as corrupt, by rank: {skipped}; every rank reads "
              f"as many records as the rank with the fewest", file=sys.stderr, flush=True)
    return table[:, 0]


def readable_records(path, compression):
    """How many records of one file can be read before the first damaged one.

    Args:
        path: the shard file.
        compression: the meta file's compression ("none", "gzip", "zlib").

    Returns:
        An int.
    """
    records = tf.data.TFRecordDataset(path, compression_type=meta_lib.COMPRESSION_TYPES[compression])
    return int(records.ignore_errors().reduce(np.int64(0), lambda n, _: n + 1))
