"""The one sharding rule: which files, records and rows each rank gets, and its batch.

`RingStrategy` applies it to the datasets it distributes (`input_sharding`) and
`tfring.data.tfrecord_dataset` to the shards it reads, so both split an input the same way:

- `batch_size` is the global batch everywhere (`model.fit(batch_size=)`, `dataset.batch(B)`,
  `tfrecord_dataset(prefix, B)`): each rank's batch is B / ranks, and a B that does not divide by
  the ranks is refused (`rank_batch`).
- With at least as many files as ranks, ranks read whole files, rank r files r, r + ranks, ...
  (`reads_by_file`, `rank_files`); else every rank reads everything and keeps its share.
- n items over the ranks: as even as possible, the first n % ranks take one more (13 rows over 2
  ranks are 7 and 6; 1 row over 2 ranks leaves rank 1 none: `rank_count`); a batch's rows are
  cut into contiguous slices in rank order (`rank_rows`).

Plain Python, no TensorFlow: counts may be ints or integer tensors (only `+ - * //` touch them).
"""


def rank_batch(global_batch, size, where="RingStrategy", what="batch_size"):
    """Rows per step on each rank for a global batch of `global_batch` rows.

    The batch size a user gives is the global batch (all ranks together). It must divide by the
    number of ranks: uneven shares of every step would change what the batch size means.

    Args:
        global_batch: the global batch size, an int.
        size: the number of ranks.
        where: the public name being called; starts the error message.
        what: what the global batch is called there (an argument's name).

    Returns:
        `global_batch // size`.

    Raises:
        ValueError: `global_batch` does not divide by `size`; says what to use instead.

    Example:

    >>> rank_batch(256, 4)
    64
    """
    if global_batch % size:
        raise ValueError(f"{where}: {what} is the global batch ({global_batch}), which must divide evenly among "
                         f"the {size} ranks; use a multiple of {size}")
    return global_batch // size


def reads_by_file(files, size, by="auto", where="RingStrategy"):
    """Whether the ranks read whole files (True) or every rank reads every file (False).

    By file, each rank reads only its own part; that needs a file for every rank, so "auto"
    chooses it when there are at least as many files as ranks.

    Args:
        files: the number of files the input reads, or None when it reads none (or it is unknown).
        size: the number of ranks.
        by: "auto", "file" (required: fails with fewer files than ranks) or "record".
        where: the public name being called; starts the error message.

    Returns:
        A bool; always False for a single rank.

    Raises:
        ValueError: `by="file"` with fewer files than ranks.

    Example:

    >>> reads_by_file(16, 4), reads_by_file(3, 4)
    (True, False)
    """
    if size <= 1 or by == "record":
        return False
    if by == "file" and (files or 0) < size:
        raise ValueError(f"{where}: shard='file' needs at least {size} files, there are {files or 0}")
    return files is not None and files >= size


def rank_files(files, rank, size):
    """The files rank `rank` reads when the ranks read by file: files rank, rank + size, ...

    (The same split as `tf.data.Dataset.shard(size, rank)`, which `RingStrategy`'s by-file path
    has TensorFlow's auto-shard rewrite apply to a dataset's file names.)

    Args:
        files: a sequence (file names, or anything listed per file).
        rank: the rank.
        size: the number of ranks.

    Returns:
        A list.

    Example:

    >>> rank_files(["a", "b", "c"], 0, 2)
    ['a', 'c']
    """
    return list(files[rank::size])


def rank_count(items, rank, size):
    """How many of `items` items rank `rank` takes: as even as possible, the first `items % size`
    ranks one more.

    Args:
        items: the number of items (int or integer scalar tensor).
        rank: the rank.
        size: the number of ranks.

    Returns:
        `ceil((items - rank) / size)`, of the type of `items`.

    Example:

    >>> [rank_count(13, r, 2) for r in range(2)], [rank_count(1, r, 2) for r in range(2)]
    ([7, 6], [1, 0])
    """
    return (items + size - 1 - rank) // size


def rank_rows(rows, rank, size):
    """Rows [start, start + count) of a batch of `rows` rows that rank `rank` takes.

    Contiguous slices in rank order, sized by `rank_count`: a last batch of 13 rows over 2 ranks
    gives rows 0-6 to rank 0 and 7-12 to rank 1.

    Args:
        rows: the batch's row count (int or integer scalar tensor).
        rank: the rank (an int).
        size: the number of ranks.

    Returns:
        (start, count).

    Example:

    >>> rank_rows(13, 1, 2)
    (7, 6)
    """
    start = sum(rank_count(rows, r, size) for r in range(rank))  # rank r starts where ranks < r end
    return start, rank_count(rows, rank, size)


def records_per_rank(found, size, by_file):
    """The records each rank takes so that every rank runs the same number of steps.

    The smallest part decides: a rank with more records would run steps the others do not join.

    Args:
        found: the records each rank can read, by rank: by file, in that rank's own files; by
            record, in all the files (every rank reads them all and keeps its `rank_count`).
        size: the number of ranks.
        by_file: whether the ranks read by file.

    Returns:
        An int.

    Example:

    >>> records_per_rank([13, 7], 2, by_file=True), records_per_rank([20, 20], 2, by_file=False)
    (7, 10)
    """
    shares = found if by_file else [rank_count(found[0], r, size) for r in range(size)]
    return int(min(shares))
