"""How `RingStrategy` gives each rank its share of a dataset batched with the global batch size.

Two ways, chosen per dataset (as MultiWorkerMirroredStrategy's AUTO policy does) by the rule
in `sharding`, which `tfring.data.tfrecord_dataset` follows too:

- by file, when the dataset reads records from files (TFRecord, text lines, fixed-length records)
  and there are at least as many files as ranks: rank r reads files r, r + size, ... and splits
  each of its global batches into size pieces, so it reads only its own share of the data;
- by record otherwise: every rank reads every global batch and keeps its contiguous slice of
  B / size rows (a short last batch splits as evenly as it can: 13 rows over 2 ranks are 7 and 6;
  see `sharding.rank_rows`, and `step_rows` for how the step stays exact). Exact (the global batch
  is the one a single process sees) at the cost of reading everything on every rank.

A dataset whose auto-shard policy is OFF (sharded by its maker, e.g. `tfring.data.tfrecord_dataset`)
is used as is.
"""

import logging

import tensorflow as tf
from absl import logging as absl_logging
from tensorflow.python.data.experimental.ops import distribute as data_distribute
from tensorflow.python.distribute import input_ops

from tfring import sharding

_log = logging.getLogger("tfring")

_NOT_BATCHED = ("RingStrategy: the dataset must be batched with the global batch size (call "
                ".batch(global_batch_size)); each rank then trains on its share of every batch")

# Dataset ops that read records from a file (the readers TF's own auto-shard rewrite knows).
_READER_OPS = ("TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset")


def shard_for_rank(dataset, rank, size):
    """This rank's share of `dataset`, a dataset of global batches.

    Args:
        dataset: a `tf.data.Dataset` batched with the global batch size.
        rank: this process's rank.
        size: the number of ranks.

    Returns:
        A `tf.data.Dataset` of this rank's batches (global batch / size rows each), with TF's own
        auto-shard rewrite turned off.

    Raises:
        ValueError: the dataset is not batched, or its static batch size does not divide by size.
    """
    if size > 1 and not _shard_policy_off(dataset):
        global_batch = _static_global_batch(dataset, size)
        files = count_input_files(dataset)
        if sharding.reads_by_file(files, size):
            _log.info("RingStrategy: sharding the input by file (%d files over %d ranks)", files, size)
            dataset = _shard_by_file(dataset, rank, size)
        else:
            _log.info("RingStrategy: sharding the input by record (%s files for %d ranks)",
                      "no" if files is None else files, size)
            dataset = _slice_global_batches(dataset, rank, size, global_batch)
    return without_autoshard(dataset)


def count_input_files(dataset):
    """The number of files `dataset` reads records from, or None when it reads no files (or the
    count is not known without running the pipeline).

    Follows the dataset's inputs down to a file reader (`tf.data.TFRecordDataset(files)`, or an
    `interleave`/`flat_map` whose function opens a reader) and counts the file names it is given.

    Args:
        dataset: a `tf.data.Dataset`.

    Returns:
        An int, or None.

    Example:

    >>> count_input_files(tf.data.TFRecordDataset(["a.tfrecord", "b.tfrecord"]).batch(8))
    2
    """
    filenames = _filenames_dataset(dataset)
    if filenames is None or not tf.executing_eagerly():
        return None
    try:
        count = int(filenames.cardinality())
    except (tf.errors.OpError, ValueError, TypeError):
        return None
    return count if count >= 0 else None


def _filenames_dataset(dataset):
    seen = set()
    pending = [dataset]
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        filenames = getattr(node, "_filenames", None)
        if isinstance(filenames, tf.data.Dataset):  # TFRecordDataset, TextLineDataset, ...
            return filenames
        inputs = node._inputs() if hasattr(node, "_inputs") else []
        if len(inputs) == 1 and _opens_files(node) and _is_file_names(inputs[0]):
            return inputs[0]  # Dataset.list_files(...).interleave(tf.data.TFRecordDataset)
        pending.extend(i for i in inputs if isinstance(i, tf.data.Dataset))
    return None


def _opens_files(node):
    function = getattr(getattr(node, "_map_func", None), "function", None)
    if function is None:
        return False
    graph_def = function.graph.as_graph_def()
    ops = {n.op for n in graph_def.node}
    ops.update(n.op for f in graph_def.library.function for n in f.node_def)
    return any(op.startswith(_READER_OPS) for op in ops)


def _is_file_names(dataset):
    spec = dataset.element_spec
    return isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string and spec.shape.rank == 0


# Transformations that keep "one element = one example" (with _SLICING_SOURCES: certainly unbatched).
_PER_ELEMENT = ("_MapDataset", "_ParallelMapDataset", "_FilterDataset", "_ShuffleDataset", "_RepeatDataset",
                "_PrefetchDataset", "CacheDataset", "_CacheDataset", "_TakeDataset", "_SkipDataset",
                "_OptionsDataset", "_ShardDataset")
_SLICING_SOURCES = ("_TensorSliceDataset", "_RangeDataset", "_UnbatchDataset")


def _certainly_unbatched(dataset):
    """True when `dataset` is rows sliced from arrays with no batching after: its elements could
    still share a first dimension (rows of 4 features with 4 targets) and pass for batches of 4."""
    node = dataset
    while type(node).__name__ not in _SLICING_SOURCES:
        if type(node).__name__ not in _PER_ELEMENT:
            return False  # a batch, a generator, a zip...: it may well yield batches
        inputs = node._inputs() if hasattr(node, "_inputs") else []
        if len(inputs) != 1:
            return False
        node = inputs[0]
    return True


def _static_global_batch(dataset, size):
    specs = [s for s in tf.nest.flatten(dataset.element_spec) if isinstance(s, tf.TensorSpec)]
    if not specs or any(s.shape.rank == 0 for s in specs):
        raise ValueError(f"{_NOT_BATCHED}; its elements include scalars: {dataset.element_spec}")
    if _certainly_unbatched(dataset):
        raise ValueError(f"{_NOT_BATCHED}; it yields single examples (sliced from arrays, no .batch() "
                         f"after): {dataset.element_spec}")
    known = {s.shape[0] for s in specs if s.shape.rank is not None and s.shape[0] is not None}
    if len(known) > 1:
        raise ValueError(f"{_NOT_BATCHED}; its components have different first dimensions {sorted(known)}, "
                         f"so they are not batches of one size: {dataset.element_spec}")
    batch = known.pop() if known else None
    if batch is not None:
        sharding.rank_batch(batch, size, what="the dataset's batch size")
    return batch


def _batch_size(element):
    """The element's batch size, with a run-time check that all its components share it."""
    tensors = [t for t in tf.nest.flatten(element) if isinstance(t, tf.Tensor)]
    batch = tf.shape(tensors[0])[0]
    checks = [tf.debugging.assert_equal(tf.shape(t)[0], batch, message=_NOT_BATCHED) for t in tensors[1:]]
    with tf.control_dependencies(checks):
        return tf.identity(batch)


def _slice_global_batches(dataset, rank, size, global_batch):
    """Each element is a global batch; keep this rank's rows of it (see `sharding.rank_rows`)."""
    del global_batch  # checked statically by the caller; short last batches split unevenly

    def take_slice(element):
        start, count = sharding.rank_rows(_batch_size(element), rank, size)

        def cut(t):
            return t[start:start + count] if isinstance(t, tf.Tensor) and t.shape.rank else t

        return tf.nest.map_structure(cut, element)

    return _map_elements(dataset, take_slice)


def _map_elements(dataset, fn):
    """`dataset.map(fn)` with `fn` given each whole element and its structure kept.

    tf.data spreads an element that is a tuple over the function's arguments: taking `*parts` and
    returning a tuple keeps a 1-tuple a 1-tuple (Keras' `(x,)`, the inputs of a model fed no
    targets: read as `(x, y)` if it became `x`), and any other element is passed as it is.
    """
    if isinstance(dataset.element_spec, tuple):
        return dataset.map(lambda *parts: tuple(fn(parts)), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _shard_by_file(dataset, rank, size):
    """Rank r reads files r, r + size, ...; each of its global batches is split into size pieces."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.FILE
    dataset = input_ops.auto_shard_dataset(_quietly(dataset.with_options, options), size, rank, size)

    def check(element):
        with tf.control_dependencies([_batch_size(element)]):
            return tf.nest.map_structure(lambda t: tf.identity(t) if isinstance(t, tf.Tensor) else t, element)

    dataset = _map_elements(dataset, check)
    return data_distribute._LegacyRebatchDataset(dataset, size)


def without_autoshard(dataset):
    """`dataset` with TF's auto-shard rewrite off: we shard ourselves, and the rewrite would only
    cost time (it re-serializes the whole input graph, constants included, at every iterator start).

    Args:
        dataset: a `tf.data.Dataset`.

    Returns:
        The same dataset with `AutoShardPolicy.OFF`.
    """
    if _shard_policy_off(dataset):
        return dataset
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return _quietly(dataset.with_options, options)


def _quietly(fn, *args):
    # tf.data logs a warning when an option someone set (Keras sets DATA) is overridden.
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        return fn(*args)
    finally:
        absl_logging.set_verbosity(verbosity)


def _shard_policy_off(dataset):
    policy = dataset.options().experimental_distribute.auto_shard_policy
    return policy == tf.data.experimental.AutoShardPolicy.OFF
