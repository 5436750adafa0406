"""`tfrecord_dataset`: the input pipeline over shards written by `tfring convert`.

files (this rank's part: `file_selection`) -> parallel interleaved reads, each file's records
counted and checked against the meta file (`record_reader`) -> [cache] -> shuffle -> [repeat] ->
batch -> parse the batch with one `tf.io.parse_example` -> parallel decode / map
(`example_parsing`) -> prefetch. Records of 64 KiB and more are parsed and decoded one by one
before the batch instead (a batch of them would be one more copy).
"""

import tensorflow as tf

from tfring import checks
from tfring.data import example_parsing
from tfring.data import file_selection
from tfring.data import record_reader
from tfring.data import remote
from tfring import sharding

# Average record size above which records are parsed one by one rather than batch by batch.
_PARSE_EACH_ABOVE = 64 << 10


def tfrecord_dataset(prefix_or_pattern, batch_size, *, shuffle=True, shuffle_buffer=10000, repeat=False,
                     decode_images=True, image_size=None, map_fn=None, cache=False, drop_remainder=True,
                     shard="auto", prefetch="auto", seed=None, deterministic=False, skip_corrupt=False):
    """A `tf.data.Dataset` of `(features, label)` batches from shards written by `tfring convert`.

    `batch_size` is the global batch, as everywhere under RingStrategy (`model.fit(batch_size=)`,
    `dataset.batch(B)`): in a tfring job of N ranks with `shard="auto"`, each rank reads its own part
    (whole files when there are at least N files: rank r reads files r, r+N, ...; else every N-th
    record) in batches of batch_size / N rows. Every rank gets the same number of batches (the
    smallest part decides), and the dataset is marked so that `RingStrategy` does not shard it again.

    Args:
        prefix_or_pattern: the output prefix given to `tfring convert` (`data/train`), or a glob of
            its shard files. `s3://` and `hdfs://` work where tensorflow-io loads (TF 2.17).
        batch_size: the global batch: records per step over all ranks. In a job of N ranks it must
            divide by N (each rank's batches hold batch_size / N records).
        shuffle: shuffle records (file order and a buffer of `shuffle_buffer`).
        shuffle_buffer: the shuffle buffer's size in records.
        repeat: repeat forever (then pass `steps_per_epoch` to fit).
        decode_images: decode encoded images to uint8 tensors (float32 when resized).
        image_size: (height, width) to resize decoded images to; needed when sizes differ.
        map_fn: a function applied to `(features, label)` batches (or `features` when unlabelled),
            in parallel.
        cache: True to cache the records in memory, a path to cache them in a file.
        drop_remainder: drop a last partial batch.
        shard: "auto" (by the tfring job), "file", "record", or None (no sharding).
        prefetch: "auto" (autotuned), a number of batches, or 0.
        seed: the shuffle seed.
        deterministic: keep a fixed order through the parallel stages.
        skip_corrupt: skip the rest of a file at a corrupt record and log how many records were
            skipped, instead of failing with the file and byte offset.

    Returns:
        A `tf.data.Dataset`. Features are a dict by name, or the single tensor when there is one
        feature besides the label (images: the image).

    Example:

    >>> ds = tfring.data.tfrecord_dataset("data/train", batch_size=256, image_size=(224, 224))
    >>> model.fit(ds, epochs=90)
    """
    prefix_or_pattern = str(prefix_or_pattern)
    remote.check_path(prefix_or_pattern)
    checks.number("tfrecord_dataset", "batch_size", batch_size, integer=True, at_least=1)
    checks.choice("tfrecord_dataset", "shard", shard, ("auto", "file", "record", None))
    rank, size = _ranks_sharing(shard)
    part = file_selection.select_files(prefix_or_pattern, batch_size, rank, size, by=shard or "auto")
    records = record_reader.read_records(part.files, part.meta.compression, record_bytes=part.record_bytes,
                                         shuffle=shuffle, seed=seed, skip_corrupt=skip_corrupt,
                                         deterministic=deterministic)
    records = _this_ranks_records(records, part, skip_corrupt)
    if cache:
        records = records.cache(cache if isinstance(cache, str) else "")
    if shuffle:
        records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        records = records.repeat()
    dataset = example_parsing.parse_and_batch(
        records, part.meta, part.batch, each=part.record_bytes >= _PARSE_EACH_ABOVE, decode_images=decode_images,
        image_size=image_size, map_fn=map_fn, drop_remainder=drop_remainder, deterministic=deterministic)
    return _prefetched(_with_options(dataset, part.size, deterministic), prefetch)


def _ranks_sharing(shard):
    """(this rank, the number of ranks) that share the dataset: the tfring job's, else (0, 1)."""
    from tfring import runtime

    if shard is None or not runtime.is_initialized():
        return 0, 1
    return runtime.rank(), runtime.size()


def _this_ranks_records(records, part, skip_corrupt):
    """This rank's records, as many as every other rank takes (`sharding.records_per_rank`)."""
    if part.size == 1:
        return records
    take = part.records
    if skip_corrupt:
        found = record_reader.readable_on_every_rank(part.files, part.meta.compression)
        take = sharding.records_per_rank(found, part.size, part.by_file)
    if not part.by_file:
        records = records.shard(part.size, part.rank)  # record i to rank i % size (`sharding.rank_count`)
    return records.take(take)  # the same number of batches on every rank


def _with_options(dataset, size, deterministic):
    options = tf.data.Options()
    options.deterministic = bool(deterministic)
    if size > 1:
        # Already this rank's part: RingStrategy (and tf.distribute) must not shard it again.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options)


def _prefetched(dataset, prefetch):
    if not prefetch:
        return dataset
    gpus = tf.config.list_logical_devices("GPU")
    if gpus and not tf.distribute.has_strategy():
        # Batches wait on the GPU (the last transformation). Under a strategy, its distributed
        # dataset does the copy. Not exercised on our CPU-only machines.
        return dataset.apply(tf.data.experimental.prefetch_to_device(
            gpus[0].name, buffer_size=None if prefetch == "auto" else int(prefetch)))
    return dataset.prefetch(tf.data.AUTOTUNE if prefetch == "auto" else int(prefetch))
