"""`tfrecord_dataset`: the input pipeline over shards written by `tfring convert`.

files (sharded by rank) -> parallel interleaved reads, each file's records counted and checked
against the meta file -> [cache] -> shuffle -> [repeat] -> batch -> parse the batch with one
`tf.io.parse_example` -> parallel decode / map -> prefetch. Records of 64 KiB and more are parsed
and decoded one by one before the batch instead (a batch of them would be one more copy).
"""

import os
import re
import sys

import numpy as np
import tensorflow as tf

from tfring.data import meta as meta_lib
from tfring.data import remote

_SHARD_NAME = re.compile(r"^(?P<prefix>.*)-\d{5}-of-\d{5}\.tfrecord(\.gz|\.zz)?$")
_COMPRESSION = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}
# Average record size above which records are parsed one by one rather than batch by batch.
_PARSE_EACH_ABOVE = 64 << 10


def _resolve(prefix_or_pattern):
    """(meta, [(path, shard record)]) for a prefix or a glob of shard files."""
    if any(c in prefix_or_pattern for c in "*?["):
        files = sorted(tf.io.gfile.glob(prefix_or_pattern))
        if not files:
            raise FileNotFoundError(f"no files match {prefix_or_pattern}")
        match = _SHARD_NAME.match(files[0])
        if not match:
            raise ValueError(f"{files[0]} is not a tfring shard (PREFIX-00000-of-00016.tfrecord); "
                             f"tfrecord_dataset reads datasets written by `tfring convert`")
        meta = meta_lib.load_meta(match.group("prefix"))
        wanted = {os.path.basename(f) for f in files}
        folder = os.path.dirname(files[0])
        shards = [s for s in meta.shards if s["file"] in wanted]
    else:
        prefix = prefix_or_pattern[: -len(meta_lib.META_SUFFIX)] if prefix_or_pattern.endswith(
            meta_lib.META_SUFFIX) else prefix_or_pattern
        meta = meta_lib.load_meta(prefix)
        folder = os.path.dirname(prefix)
        shards = meta.shards
    shards = [s for s in shards if s["count"] > 0]
    if not shards:
        raise ValueError(f"{prefix_or_pattern}: no records to read")
    return meta, [((folder.rstrip("/") + "/" if folder else "") + s["file"], s) for s in shards]


def _check_sizes(files):
    """A shard whose size differs from the meta file's is truncated or replaced: say which."""
    for path, shard in files:
        try:
            size = tf.io.gfile.stat(path).length
        except tf.errors.NotFoundError:
            raise FileNotFoundError(f"shard {path} listed in the meta file is missing") from None
        if size != shard["bytes"]:
            what = "truncated" if size < shard["bytes"] else "longer than written"
            raise ValueError(f"shard {path} is {what}: {size} bytes, the meta file says {shard['bytes']} "
                             f"(damaged from byte {min(size, shard['bytes'])}); convert the data again")


def _counted_reader(compression, skip_corrupt, chunk=1024):
    """Reads one file and checks that it yields the meta file's count. A corrupt record stops the
    file (TF's reader cannot resynchronise): that fails naming the file and the byte offset, or
    with skip_corrupt logs how many records were skipped. The bookkeeping runs once per chunk of
    records, not per record."""

    def read(path, expected):
        chunks = tf.data.TFRecordDataset(path, compression_type=compression).ignore_errors().batch(chunk)
        end = tf.data.Dataset.from_tensors((tf.zeros([0], tf.string), True))
        flagged = chunks.map(lambda c: (c, False)).concatenate(end)

        def step(state, element):
            count, offset = state
            records, last = element

            def at_end():
                short = count < expected
                reached = [" (after record ", tf.strings.as_string(count), " of ", tf.strings.as_string(expected), ")"]
                if compression:  # offsets inside a compressed stream mean nothing to a reader of the file
                    message = tf.strings.join(["tfring.data: corrupt or truncated data in ", path] + reached + [
                        ": a compressed shard cannot be read past damage, the rest of the file is lost"])
                else:
                    message = tf.strings.join(["tfring.data: corrupt or truncated record in ", path, " at byte ",
                                               tf.strings.as_string(offset)] + reached)
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

            checked = tf.cond(last, at_end, lambda: count)
            n = tf.size(records, out_type=tf.int64)
            # Uncompressed framing: 12-byte header and 4-byte footer around each record.
            size = tf.reduce_sum(tf.cast(tf.strings.length(records), tf.int64)) + 16 * n
            return (checked + n, offset + size), (records, last)

        scanned = flagged.scan((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), step)
        return scanned.filter(lambda records, last: tf.logical_not(last)).map(lambda records, last: records).unbatch()

    return read


def _readable_on_every_rank(files, compression):
    """With skip_corrupt in a job of several ranks: how many records each rank can read.

    Corrupt records are only found by reading, and a rank that skips some would run fewer steps
    than the others (and `fit` would fail). So each rank reads its files once up front, the ranks
    exchange what they found, and rank 0 logs how many records each rank skipped.
    """
    from tfring import runtime
    from tfring.ops import collectives

    def readable(path):
        records = tf.data.TFRecordDataset(path, compression_type=compression).ignore_errors()
        return int(records.reduce(np.int64(0), lambda n, _: n + 1))

    found = sum(readable(path) for path, _ in files)
    expected = sum(s["count"] for _, s in files)
    table = collectives.allgather(tf.constant([[found, expected - found]], tf.int64)).numpy()
    skipped = table[:, 1].tolist()
    if any(skipped) and runtime.rank() == 0:
        print(f"tfring.data: {sum(skipped)} records skipped as corrupt, by rank: {skipped}; every rank reads "
              f"as many records as the rank with the fewest", file=sys.stderr, flush=True)
    return table[:, 0]


def _parse_spec(meta):
    spec = {}
    for f in meta.features:
        if f.encoding == "int":
            spec[f.name] = tf.io.FixedLenFeature(f.shape, tf.int64)
        elif f.encoding == "float":
            spec[f.name] = tf.io.FixedLenFeature(f.shape, tf.float32)
        else:
            spec[f.name] = tf.io.FixedLenFeature([], tf.string)
    return spec


def _image_shape(meta, image_size):
    uniform = meta.source.get("uniform_image_shape")
    shapes = meta.source.get("image_shapes") or []
    channels = max((s[2] for s in shapes), default=3)
    if image_size is not None:
        return (int(image_size[0]), int(image_size[1]), channels)
    if uniform is None:
        raise ValueError("the images differ in size (e.g. " + ", ".join("x".join(map(str, s)) for s in shapes[:3])
                         + "): pass image_size=(height, width) to resize them, or decode_images=False")
    return tuple(uniform)


def _decoder(meta, decode_images, image_size):
    """Turns a parsed batch into typed tensors."""
    shapes = {f.name: f for f in meta.features}
    image_shape = _image_shape(meta, image_size) if decode_images and any(
        f.encoding == "image" for f in meta.features) else None

    def decode_image(data):
        # The one-kernel decoder (tf.io.decode_image builds a chain of format checks per image).
        image = tf.raw_ops.DecodeImage(contents=data, channels=image_shape[2], dtype=tf.uint8,
                                       expand_animations=False)
        if image_size is not None:
            return tf.image.resize(image, image_shape[:2])
        image.set_shape(image_shape)
        return image

    def decode(batch, batched=True):
        out = {}
        for name, value in batch.items():
            f = shapes[name]
            if f.encoding == "int":
                out[name] = tf.cast(value, tf.bool if f.dtype == "bool" else tf.as_dtype(f.dtype))
            elif f.encoding == "raw":
                raw_type = tf.uint8 if f.dtype == "bool" else tf.as_dtype(f.dtype)
                flat = tf.io.decode_raw(value, raw_type, little_endian=True)
                out[name] = tf.reshape(flat, tf.concat([tf.shape(value), f.shape], 0))
                if f.dtype == "bool":
                    out[name] = tf.cast(out[name], tf.bool)
            elif f.encoding == "image" and image_shape is not None:
                dtype = tf.float32 if image_size is not None else tf.uint8
                out[name] = tf.map_fn(decode_image, value, fn_output_signature=tf.TensorSpec(image_shape, dtype)) \
                    if batched else decode_image(value)
            else:
                out[name] = value
        if image_shape is not None:
            for name in ("height", "width", "channels"):
                out.pop(name, None)  # the decoded image carries its shape
        return out

    return decode


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
    from tfring import runtime

    prefix_or_pattern = str(prefix_or_pattern)
    remote.check_path(prefix_or_pattern)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"tfrecord_dataset: batch_size must be a positive int, got {batch_size!r}")
    if shard not in ("auto", "file", "record", None):
        raise ValueError(f"tfrecord_dataset: shard must be 'auto', 'file', 'record' or None, got {shard!r}")
    meta, files = _resolve(prefix_or_pattern)
    _check_sizes(files)
    rank, size = (runtime.rank(), runtime.size()) if runtime.is_initialized() else (0, 1)
    if shard is None:
        size = 1
    if batch_size % size:
        raise ValueError(f"tfrecord_dataset: batch_size is the global batch ({batch_size}), which must divide "
                         f"evenly among the {size} ranks; use a multiple of {size}")
    rank_batch = batch_size // size
    by_file = size > 1 and (shard == "file" or (shard == "auto" and len(files) >= size))
    if by_file:
        if len(files) < size:
            raise ValueError(f"tfrecord_dataset: shard='file' needs at least {size} files, there are {len(files)}")
        parts = [files[r::size] for r in range(size)]
        per_rank = min(sum(s["count"] for _, s in part) for part in parts)
        files = parts[rank]
    else:
        per_rank = sum(s["count"] for _, s in files) // size
    if skip_corrupt and size > 1:
        readable = _readable_on_every_rank(files, meta.compression)
        per_rank = int(readable.min()) if by_file else int(readable[0]) // size

    paths = tf.constant([p for p, _ in files])
    counts = tf.constant([s["count"] for _, s in files], tf.int64)
    dataset = tf.data.Dataset.from_tensor_slices((paths, counts))
    if shuffle:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    # The per-file check runs once per chunk of records; chunks of ~4 MB keep the interleave's
    # buffers small for large records and the bookkeeping cheap for small ones.
    record_bytes = sum(s["bytes"] for _, s in files) / max(1, sum(s["count"] for _, s in files))
    chunk = int(min(1024, max(1, (4 << 20) // max(1, record_bytes))))
    # Fixed parallelism, one call per core: AUTOTUNE starts every new iterator (each epoch of
    # model.fit) at 1 and ramps up, which on short epochs measured up to 2x slower on some passes.
    parallel = max(2, os.cpu_count() or 2)
    dataset = dataset.interleave(_counted_reader(_COMPRESSION[meta.compression], skip_corrupt, chunk),
                                 cycle_length=min(len(files), 16), block_length=1,
                                 num_parallel_calls=min(len(files), parallel), deterministic=deterministic)
    if size > 1 and not by_file:
        dataset = dataset.shard(size, rank)
    if size > 1:
        dataset = dataset.take(per_rank)  # the same number of batches on every rank
    if cache:
        dataset = dataset.cache(cache if isinstance(cache, str) else "")
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    spec = _parse_spec(meta)
    decode = _decoder(meta, decode_images, image_size)
    label = meta.label

    def parse(serialized, batched=True):
        parsed = tf.io.parse_example(serialized, spec) if batched else tf.io.parse_single_example(serialized, spec)
        features = decode(parsed, batched)
        if label is None:
            return features if len(features) > 1 else next(iter(features.values()))
        target = features.pop(label)
        return (features if len(features) > 1 else next(iter(features.values()))), target

    if record_bytes >= _PARSE_EACH_ABOVE:
        # Large records: parsing a batch would copy every byte once more (into the batch of
        # strings) than parsing each record and batching the parsed tensors.
        dataset = dataset.map(lambda record: parse(record, batched=False), num_parallel_calls=parallel,
                              deterministic=deterministic)
        dataset = dataset.batch(rank_batch, drop_remainder=drop_remainder)
    else:
        dataset = dataset.batch(rank_batch, drop_remainder=drop_remainder)
        dataset = dataset.map(parse, num_parallel_calls=parallel, deterministic=deterministic)
    if map_fn is not None:
        dataset = dataset.map(map_fn, num_parallel_calls=parallel, deterministic=deterministic)
    options = tf.data.Options()
    options.deterministic = bool(deterministic)
    if size > 1:
        # Already this rank's part: RingStrategy (and tf.distribute) must not shard it again.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = dataset.with_options(options)
    if prefetch:
        gpus = tf.config.list_logical_devices("GPU")
        if gpus and not tf.distribute.has_strategy():
            # Batches wait on the GPU (the last transformation). Under a strategy, its distributed
            # dataset does the copy. Not exercised on our CPU-only machines.
            dataset = dataset.apply(tf.data.experimental.prefetch_to_device(
                gpus[0].name, buffer_size=None if prefetch == "auto" else int(prefetch)))
        else:
            dataset = dataset.prefetch(tf.data.AUTOTUNE if prefetch == "auto" else int(prefetch))
    return dataset
