"""Sparse gradients (`tf.IndexedSlices`, e.g. an Embedding's) travel as rows, not as a dense table.

An Embedding of 10^6 x 64 floats has a 256 MB gradient when densified, of which a step touches
only the rows its batch looked up. As Horovod does by default, every rank's rows (values and
their indices) are allgathered instead, and the optimizer adds up the duplicates when it applies
them: the same sum as the dense allreduce. When so many rows are touched that gathering them would
move more bytes than a ring allreduce of the dense table (more rows over all ranks than 2 x the
table's rows), the gradient is densified and all-reduced instead. The choice is made from the
global row count, so every rank makes the same one. `RingStrategy(sparse_as_dense=True)` always
densifies (Horovod's option of the same name). Gradients about to be clipped always travel as rows
(`door`): one process clips the rows its batch looked up, duplicates apart, and a
densified table's summed rows have another norm and other values.

The rows reach the optimizer as one process's would, duplicates apart (Adam squares each before
adding them up). Where an optimizer adds them into a variable (`scatter_add` / `scatter_sub`, plain
SGD's update), they are added up first (`with_unique_rows`): TensorFlow's CPU scatter adds a row's
duplicates from several threads in any order, so the ranks would end with different last bits.
"""

import tensorflow as tf

from tfring.ops import collectives
from tfring.ops import ordering
from tfring.strategy import keras_patches
from tfring.strategy import step_rows


def _gathered(slices, process_set):
    return lambda: collectives.allgather_slices(slices, process_set)


def _densified(slices, dense_rows, process_set):
    def reduce_dense():
        dense = collectives.allreduce(tf.convert_to_tensor(slices), op="sum", process_set=process_set)
        return dense, tf.range(dense_rows, dtype=tf.int64)

    return reduce_dense


def reduce_slices(slices_list, size, sparse_as_dense=False, mean=False, as_rows=False, process_set=0):
    """Sums (or averages) each `tf.IndexedSlices` over the ranks.

    Args:
        slices_list: a list of `tf.IndexedSlices`, this rank's.
        size: the number of ranks.
        sparse_as_dense: densify every one and all-reduce it.
        mean: divide by `size` (a MEAN reduction) instead of summing.
        as_rows: never densify (gradients about to be clipped), whatever `sparse_as_dense` says.
        process_set: the tfring process set to reduce over (0: every rank); `size` is its size.

    Returns:
        A list of `tf.IndexedSlices` (possibly holding every row, when densified), one per input,
        identical on every rank.

    Example:

    >>> grads = reduce_slices([embedding_grad], size=2)
    """
    if not slices_list:
        return []
    if as_rows:
        out = [tf.IndexedSlices(*_gathered(s, process_set)(), s.dense_shape) for s in slices_list]
    elif sparse_as_dense:
        reduced = collectives.allreduce([tf.convert_to_tensor(s) for s in slices_list], op="sum",
                                        process_set=process_set)
        out = [tf.IndexedSlices(r, tf.range(tf.shape(r, out_type=tf.int64)[0]), s.dense_shape)
               for r, s in zip(reduced, slices_list)]
    else:
        rows = tf.stack([tf.shape(s.indices, out_type=tf.int64)[0] for s in slices_list])
        total = collectives.allreduce(rows, op="sum", process_set=process_set)
        out = []
        for k, s in enumerate(slices_list):
            dense_rows = tf.cast(s.dense_shape[0], tf.int64)
            values, indices = ordering.ordered(lambda: tf.cond(
                total[k] >= 2 * dense_rows, _densified(s, dense_rows, process_set), _gathered(s, process_set)))
            out.append(tf.IndexedSlices(values, indices, s.dense_shape))
    if mean:
        out = [tf.IndexedSlices(s.values / tf.cast(size, s.values.dtype), s.indices, s.dense_shape) for s in out]
    return out


def with_unique_rows(grads):
    """Each `tf.IndexedSlices` in `grads` with its duplicate rows added up, in a fixed order.

    TensorFlow's CPU scatter (what an optimizer applies sparse gradients with) adds the updates of a
    row that appears several times from several threads, in any order: the sum's last bits then
    change from run to run, and from rank to rank. Adding the duplicates first with a deterministic
    segment sum leaves each row once, and the scatter nothing to order.

    Args:
        grads: a list of gradients: tensors, `tf.IndexedSlices` or None.

    Returns:
        A list like `grads`, each `tf.IndexedSlices` with unique indices (in first-seen order).

    Example:

    >>> with_unique_rows([tf.IndexedSlices(tf.ones([3, 2]), tf.constant([4, 1, 4]))])[0].indices
    <tf.Tensor: ... numpy=array([4, 1], dtype=int32)>
    """
    out = []
    for g in grads:
        if isinstance(g, tf.IndexedSlices):
            unique, position = tf.unique(g.indices)
            values = tf.math.unsorted_segment_sum(g.values, position, tf.shape(unique)[0])
            g = tf.IndexedSlices(values, unique, g.dense_shape)
        out.append(g)
    return out


def _adding_unique_rows(original):
    def add(self, variable, value):
        if isinstance(value, tf.IndexedSlices) and step_rows.current() is not None:
            value = with_unique_rows([value])[0]
        return original(self, variable, value)

    return add


PATCHES = [
    keras_patches.Patch("keras.src.backend.tensorflow.optimizer.TFOptimizer", name, _adding_unique_rows,
                        "sparse rows are added into a variable once each, in a fixed order",
                        parameters=("self", "variable", "value"))
    for name in ("assign_add", "assign_sub")
]
