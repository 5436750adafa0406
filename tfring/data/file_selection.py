"""Which shard files of a converted dataset a rank reads: `tfrecord_dataset`'s first stage.

The files come from the meta file (a prefix) or a glob of shard files, are checked against the
meta file's sizes, and are divided among the ranks by the rule in `tfring.sharding`.
"""

import dataclasses
import os

import tensorflow as tf

from tfring.data import meta as meta_lib
from tfring import sharding


@dataclasses.dataclass(frozen=True)
class RankFiles:
    """One rank's part of a converted dataset.

    Args:
        meta: the dataset's `DatasetMeta`.
        files: the `(path, shard)` pairs this rank reads (`shard`: the meta file's entry).
        by_file: whether the ranks read whole files (else every rank reads every file and keeps
            every size-th record, from its rank on).
        rank: this rank.
        size: the number of ranks sharing the dataset (1: not sharded).
        batch: the rows of this rank's batches (the global batch / size).
        records: the records this rank takes, the same on every rank.
    """

    meta: meta_lib.DatasetMeta
    files: list
    by_file: bool
    rank: int
    size: int
    batch: int
    records: int

    @property
    def record_bytes(self):
        """The average size of a record in this rank's files, in bytes."""
        return sum(s["bytes"] for _, s in self.files) / max(1, sum(s["count"] for _, s in self.files))


def select_files(prefix_or_pattern, batch_size, rank, size, by="auto"):
    """This rank's files of the dataset at `prefix_or_pattern`, checked against its meta file.

    Args:
        prefix_or_pattern: the dataset's output prefix (or meta file), or a glob of its shard files.
        batch_size: the global batch size.
        rank: this rank.
        size: the number of ranks sharing the dataset (1: not sharded).
        by: "auto", "file" or "record" (see `sharding.reads_by_file`).

    Returns:
        A `RankFiles`.

    Raises:
        FileNotFoundError: no meta file, no matching file, or a listed shard is missing.
        ValueError: a damaged shard, no records, or a global batch that does not divide by `size`.

    Example:

    >>> select_files("data/train", 256, rank=1, size=4).batch
    64
    """
    meta, files = resolve(prefix_or_pattern)
    check_sizes(files)
    batch = sharding.rank_batch(batch_size, size, where="tfrecord_dataset")
    return rank_part(meta, files, batch, rank, size, by)


def rank_part(meta, files, batch, rank, size, by="auto"):
    """Divides `files` among the ranks (no file is opened).

    Args:
        meta: the `DatasetMeta`.
        files: every `(path, shard)` pair of the dataset, in order.
        batch: the rows of each rank's batches.
        rank: this rank.
        size: the number of ranks.
        by: "auto", "file" or "record".

    Returns:
        A `RankFiles`.

    Example:

    >>> rank_part(meta, files, 2, rank=0, size=2).records   # files of 7, 7 and 6 records
    7
    """
    by_file = sharding.reads_by_file(len(files), size, by, where="tfrecord_dataset")
    counts = [s["count"] for _, s in files]
    if by_file:
        found = [sum(sharding.rank_files(counts, r, size)) for r in range(size)]
        files = sharding.rank_files(files, rank, size)
    else:
        found = [sum(counts)] * size
    records = sharding.records_per_rank(found, size, by_file)
    return RankFiles(meta, files, by_file, rank, size, batch, records)


def resolve(prefix_or_pattern):
    """The meta file and the shard files (with records) of a prefix or a glob of shard files.

    Args:
        prefix_or_pattern: an output prefix, a meta file's path, or a glob of shard files.

    Returns:
        `(meta, [(path, shard)])`, the shards that hold records, in the meta file's order.

    Raises:
        FileNotFoundError: no meta file, or no file matches the glob.
        ValueError: the glob matches files that are not tfring shards, or no records.
    """
    if any(c in prefix_or_pattern for c in "*?["):
        meta, folder, shards = _from_pattern(prefix_or_pattern)
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


def _from_pattern(pattern):
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no files match {pattern}")
    prefix = meta_lib.shard_prefix(files[0])
    if prefix is None:
        raise ValueError(f"{files[0]} is not a tfring shard (PREFIX-00000-of-00016.tfrecord); "
                         f"tfrecord_dataset reads datasets written by `tfring convert`")
    meta = meta_lib.load_meta(prefix)
    wanted = {os.path.basename(f) for f in files}
    return meta, os.path.dirname(files[0]), [s for s in meta.shards if s["file"] in wanted]


def check_sizes(files):
    """A shard whose size differs from the meta file's is truncated or replaced: say which.

    Args:
        files: `(path, shard)` pairs.

    Raises:
        FileNotFoundError: a shard is missing.
        ValueError: a shard's size differs from the meta file's (named, with the first byte that
            can be damaged).
    """
    for path, shard in files:
        try:
            size = tf.io.gfile.stat(path).length
        except tf.errors.NotFoundError:
            raise FileNotFoundError(f"shard {path} listed in the meta file is missing") from None
        if size != shard["bytes"]:
            what = "truncated" if size < shard["bytes"] else "longer than written"
            raise ValueError(f"shard {path} is {what}: {size} bytes, the meta file says {shard['bytes']} "
                             f"(damaged from byte {min(size, shard['bytes'])}); convert the data again")
