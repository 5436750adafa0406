"""What a finished conversion reports: the meta file's contents and the summary line."""

from tfring.data import meta as meta_lib

_SHARD_KEYS = ("file", "count", "bytes", "sha256")
# Image shapes listed in the meta file (enough to tell a reader what differs).
_LISTED_SHAPES = 16


def dataset_meta(source, records, compression, shuffle, seed):
    """The meta file's contents, built from the shards' records alone (kept or rewritten alike,
    so that a resumed run's meta file equals an uninterrupted run's).

    Args:
        source: the `Source`.
        records: the shards' records (`shard_writer.write_shard`), in shard order.
        compression: the compression.
        shuffle: whether the examples were shuffled.
        seed: the shuffle seed.

    Returns:
        A `DatasetMeta`.
    """
    skipped = sorted((item for r in records for item in r["skipped"]), key=str)
    source_info = dict(source.description, shuffle=bool(shuffle), seed=seed)
    source_info.update(image_shape_info(records))
    return meta_lib.DatasetMeta(features=list(source.features), label=source.label,
                                shards=[{k: r[k] for k in _SHARD_KEYS} for r in records], compression=compression,
                                source=source_info, classes=source.classes, skipped=skipped)


def image_shape_info(records):
    """The images' shapes for the meta file's source: `image_shapes` (the first few, sorted) and
    `uniform_image_shape` (the one shape, or None when they differ); {} without images.

    Args:
        records: the shards' records.

    Returns:
        A dict.

    Example:

    >>> image_shape_info([{"image_shapes": [[8, 8, 3]]}, {"image_shapes": [[8, 8, 3]]}])
    {'image_shapes': [[8, 8, 3]], 'uniform_image_shape': [8, 8, 3]}
    """
    shapes = sorted({tuple(shape) for r in records for shape in r["image_shapes"]})
    if not shapes:
        return {}
    return {"image_shapes": [list(shape) for shape in shapes[:_LISTED_SHAPES]],
            "uniform_image_shape": list(shapes[0]) if len(shapes) == 1 else None}


def summary_line(result, elapsed, prefix):
    """`tfring convert`'s last line: records, shards, size, time and rates, skipped items.

    Args:
        result: the `DatasetMeta` written.
        elapsed: the seconds the conversion took.
        prefix: the output prefix.

    Returns:
        A str.
    """
    total_bytes = sum(s["bytes"] for s in result.shards)
    seconds = max(elapsed, 1e-9)
    skipped = (f"; skipped {len(result.skipped)} unreadable items (listed in the meta file)"
               if result.skipped else "")
    return (f"tfring convert: {result.total} records in {len(result.shards)} shards, {total_bytes / 1e6:.1f} MB, "
            f"{elapsed:.1f} s ({result.total / seconds:.0f} records/s, {total_bytes / 1e6 / seconds:.1f} MB/s)"
            f"{skipped} -> {prefix}{meta_lib.META_SUFFIX}")
