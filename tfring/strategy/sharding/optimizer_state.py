"""Optimizer-state sharding, stages 1 and 2: each rank keeps the optimizer's state of the variables it
owns (and, in stage 2, receives only their reduced gradients).

Under `RingStrategy(shard_optimizer_state=True)` (and `tfring.horovod`'s
`DistributedOptimizer(..., shard_optimizer_state=True)`, through `shard_over`) every trainable
variable has one owner rank (`partition.owners`: whole variables, balanced by bytes, the same on
every rank). A rank's optimizer creates its slots (SGD's momentum, Adam's two moments, ...) only
for the variables it owns; for the others it creates an empty placeholder of the same name and
dtype, so every rank's optimizer has the same variables in the same order. A step then runs:

1. the gradients are all-reduced as without sharding (the optimizer's door, `gradients.door`); with
   `shard_gradients=True` (stage 2) each is reduced to its owner alone instead
   (`gradients.reduction.reduce_to_owners`), and `apply_owned(..., whole=False)` clips to a
   `global_clipnorm` over every rank's part;
2. the user's optimizer updates the variables this rank owns, as it would unsharded;
3. every rank's model takes each owner's new values, in rounds of allgathers of up to `PIECE_BYTES`.

Each variable's update is the one the unsharded optimizer makes from the same reduced gradient, so
the weights equal the unsharded run's bit for bit. The state per rank is about 1/N of the whole
(plus at most the largest variable's share). Stage 1 moves the gradients' bytes and the
parameters' bytes, 1.5 times plain data parallelism; stage 2's reduce-scatter in place of the
allreduce brings it to about 1x (on 3 ranks or more its additions come in another order than the
allreduce's, so the weights may differ from the unsharded run's in the last bits). The new values
go in rounds so that the values in flight stay small: one allgather of every variable measured 393
MB more peak memory per rank than no sharding for a 100 M-parameter model
(benchmarks/optimizer_sharding.py); and as allgathers, not a broadcast per owner, so that both
directions of every link carry them at once.

Saving writes the whole state: `save_own_variables` (what `model.save`, `.keras` files,
`ModelCheckpoint` and `BackupAndRestore` call) takes each slot from its owner, so the file loads
into an unsharded model and into a sharded job of any size; loading keeps the slots a rank owns.

`global_clipnorm` clips every gradient before the owned update, over all of them (each rank holds
every reduced gradient); a `LossScaleOptimizer` checks the whole reduced gradients and its inner
optimizer updates the owned variables. Not supported yet, each refused with an error naming it:
`use_ema`, `gradient_accumulation_steps`, `global_clipnorm` with a `loss_scale_factor`, and
`tf.train.Checkpoint` of the optimizer (it would write each rank's part).
"""

import contextlib
import types

import tensorflow as tf

from tfring.strategy import keras_patches
from tfring.strategy import strategy_base
from tfring.strategy.sharding import partition

_ATTRIBUTE = "_tfring_shards"
_OVER = "_tfring_shard_over"  # (rank, size) outside a RingStrategy: tfring.horovod's optimizers
PIECE_BYTES = 8 << 20  # most bytes of updated values gathered together (share_updates)


class Shards:
    """How one optimizer's state is sharded.

    Args:
        variables: the optimizer's trainable variables, in its order.
        rank: this rank.
        size: the number of ranks.

    Example:

    >>> shards = Shards(model.trainable_variables, rank=0, size=2)
    >>> shards.owns(0)
    True
    """

    def __init__(self, variables, rank, size):
        self.rank = rank
        self.size = size
        self.shapes = [tuple(v.shape) for v in variables]
        self.owners = partition.owners([_bytes(v) for v in variables], size)
        self.slot_of = {}  # id(slot variable) -> the index of the variable it belongs to

    def owns(self, index):
        """True when this rank owns variable `index`.

        Args:
            index: a variable's position in the optimizer's list.

        Returns:
            bool.
        """
        return self.owners[index] == self.rank


def _bytes(variable):
    return _elements(variable) * tf.as_dtype(variable.dtype).size


def _extended(optimizer):
    """The strategy's `extended` when `optimizer` belongs to a multi-rank sharding RingStrategy."""
    extended = getattr(getattr(optimizer, "_distribution_strategy", None), "extended", None)
    if getattr(extended, "shards_optimizer_state", False) and extended._size > 1:
        return extended
    return None


def _over(optimizer):
    """(rank, size) when `optimizer`'s state is sharded, else None."""
    over = optimizer.__dict__.get(_OVER)
    if over is not None:
        return over
    extended = _extended(optimizer)
    return (extended._rank, extended._size) if extended is not None else None


def shard_over(optimizer, rank, size):
    """Shards `optimizer`'s state over `size` ranks outside a RingStrategy (`tfring.horovod`'s
    `DistributedOptimizer(shard_optimizer_state=True)`), before it is built.

    Args:
        optimizer: an unbuilt Keras optimizer.
        rank: this rank.
        size: the number of ranks (more than one).

    Raises:
        ValueError: the optimizer is built already, or uses a setting sharding does not support.

    Example:

    >>> shard_over(optimizer, tfring.rank(), tfring.size())
    """
    if optimizer.built:
        raise ValueError("tfring: an optimizer's state can be sharded only before it is built (before its first step)")
    object.__setattr__(optimizer, _OVER, (rank, size))  # past Keras' attribute tracking
    _refuse_unsupported(optimizer)
    keras_patches.apply(PATCHES)


def all_variables(optimizer):
    """Every variable of `optimizer`, a Keras 3 one or a TF1 / Keras 2 one (whose `variables` is a method).

    Args:
        optimizer: an optimizer.

    Returns:
        A list of variables.
    """
    found = optimizer.variables
    return list(found() if callable(found) else found)


def shared_variables(optimizer):
    """`optimizer`'s variables that every rank holds alike: all of them unless its state is sharded,
    then all but its slots (what a broadcast from one rank may overwrite).

    Args:
        optimizer: a Keras optimizer.

    Returns:
        A list of variables.

    Example:

    >>> hvd.broadcast_variables(model.variables + shared_variables(model.optimizer), root_rank=0)
    """
    shards = optimizer.__dict__.get(_ATTRIBUTE)
    variables = all_variables(optimizer)
    return variables if shards is None else [v for v in variables if id(v) not in shards.slot_of]


def sharded(optimizer):
    """True when `optimizer`'s state is sharded over the ranks.

    Args:
        optimizer: a Keras optimizer.

    Returns:
        bool.

    Example:

    >>> with tfring.RingStrategy(shard_optimizer_state=True).scope():
    ...     sharded(keras.optimizers.Adam())  # on 2 ranks or more
    True
    """
    return _over(optimizer) is not None


def _refuse_unsupported(optimizer):
    settings = {"use_ema": "an average of the weights that every rank's model would need whole",
                "gradient_accumulation_steps": "accumulators of the whole gradient"}
    if getattr(optimizer, "global_clipnorm", None):
        settings["loss_scale_factor"] = "with global_clipnorm: the norm is taken after the unscaling"
        if _extended(optimizer) is None:
            settings["global_clipnorm"] = "outside a RingStrategy"
    for name, why in settings.items():
        if getattr(optimizer, name, None):
            raise ValueError(
                f"tfring: shard_optimizer_state=True does not support the optimizer's {name} yet "
                f"({why}): leave it unset or turn sharding off")


def shards_of(optimizer):
    """`optimizer`'s `Shards`, made on first use from its trainable variables; None when unsharded.

    Args:
        optimizer: a built Keras optimizer.

    Returns:
        A `Shards` or None.

    Raises:
        ValueError: the optimizer uses a setting sharding does not support.

    Example:

    >>> shards_of(model.optimizer).owners  # on 2 ranks, after the first step
    [0, 1, 1, 0]
    """
    over = _over(optimizer)
    if over is None:
        return None
    shards = optimizer.__dict__.get(_ATTRIBUTE)
    if shards is None:
        _refuse_unsupported(optimizer)
        variables = getattr(optimizer, "_trainable_variables", None)
        if not variables:
            raise RuntimeError("tfring: a sharded optimizer made a slot before it knew its variables")
        shards = Shards(variables, *over)
        object.__setattr__(optimizer, _ATTRIBUTE, shards)  # past Keras' attribute tracking
    return shards


def _built(optimizer, variables):
    """Builds `optimizer` for `variables` if it is not yet (as Keras' `apply` would)."""
    if variables is None:
        raise ValueError("tfring: a sharded optimizer must be handed one gradient per variable it was built with "
                         "(or the variables with them), to know which variables this rank owns")
    if not optimizer.built:
        from keras.src import backend

        with backend.name_scope(optimizer.name, caller=optimizer):
            optimizer.build(variables)
        optimizer.built = True


def owners_of(optimizer, variables):
    """The rank that owns each of `variables` (building the optimizer first if it is not yet).

    Args:
        optimizer: a sharded optimizer.
        variables: some of its trainable variables.

    Returns:
        A list of ranks, like `variables`.

    Example:

    >>> owners_of(model.optimizer, model.trainable_variables)   # on 2 ranks
    [0, 1, 1, 0]
    """
    _built(optimizer, variables)
    shards = shards_of(optimizer)
    return [shards.owners[optimizer._get_variable_index(v)] for v in variables]


def apply_owned(original, optimizer, grads, variables, positions, frame_for, whole=True):
    """Keras' `apply` on the variables this rank owns, then every owner's values to every rank.

    Args:
        original: Keras' `apply(optimizer, grads, variables)`.
        optimizer: the sharded optimizer.
        grads: the reduced gradients, one per variable (None where there is none).
        variables: the variables, in the order of `grads`.
        positions: the positions whose gradients were reduced at the door.
        frame_for: `frame_for(n, clipped)`, a context saying that the next `n` gradients Keras
            would all-reduce are reduced already, and whether they are clipped already (the
            door's `Frame`).
        whole: every rank holds every reduced gradient; False: only those of the variables it
            owns (sharded gradients), so a global norm adds up each rank's part.

    Returns:
        What `original` returns.

    Example:

    >>> apply_owned(original, optimizer, reduced, variables, range(len(reduced)), frame_for)  # the door's call
    """
    _built(optimizer, variables)
    shards = shards_of(optimizer)
    index = [optimizer._get_variable_index(v) for v in variables]
    mine = [k for k in range(len(variables)) if shards.owns(index[k])]
    owned = set(mine)
    clipped = bool(getattr(optimizer, "global_clipnorm", None))
    if clipped and whole:  # over every variable's gradient, as Keras clips unsharded; not again below
        grads = _clipped_globally(optimizer, grads, variables)
    elif clipped:
        grads = _clipped_over_shards(optimizer, grads, variables, owned)
    result = None
    with frame_for(len([k for k in positions if k in owned]), clipped):
        if mine:
            result = original(optimizer, [grads[k] for k in mine], [variables[k] for k in mine])
        else:  # Keras' apply of nothing would skip the count that schedules read
            optimizer.iterations.assign_add(1)
    share_updates(shards, variables, index)
    return result


def _clipped_globally(optimizer, grads, variables):
    """`grads` clipped to the optimizer's `global_clipnorm` over the gradients Keras would clip:
    those that exist, of variables not overwritten with their gradient, in order."""
    kept = [k for k, (g, v) in enumerate(zip(grads, variables))
            if g is not None and not getattr(v, "overwrite_with_gradient", False)]
    grads = list(grads)
    for k, g in zip(kept, optimizer._clip_gradients([grads[k] for k in kept])):
        grads[k] = g
    return grads


def _clipped_over_shards(optimizer, grads, variables, owned):
    """`grads` (each rank's own) clipped to `global_clipnorm` over every rank's: Keras' rule
    (`clip_by_global_norm`) with the squared norm added up over the ranks (one scalar allreduce)."""
    from tfring.ops import collectives

    kept = [k for k, (g, v) in enumerate(zip(grads, variables))
            if k in owned and g is not None and not getattr(v, "overwrite_with_gradient", False)]
    squares = [tf.reduce_sum(tf.square(tf.cast(tf.convert_to_tensor(grads[k]), tf.float32))) for k in kept]
    mine = tf.add_n(squares) if squares else tf.constant(0.0)
    norm = tf.sqrt(collectives.allreduce(mine, op="sum"))
    clip = optimizer.global_clipnorm
    scale = clip * tf.minimum(1.0 / norm, 1.0 / clip) + (norm - norm)  # NaN when the norm is not finite
    grads = list(grads)
    for k in kept:
        g = grads[k]
        if isinstance(g, tf.IndexedSlices):
            grads[k] = tf.IndexedSlices(g.values * tf.cast(scale, g.values.dtype), g.indices, g.dense_shape)
        else:
            grads[k] = g * tf.cast(scale, g.dtype)
    return grads


def share_updates(shards, variables, index):
    """Every rank's copy of each variable takes its owner's value: in rounds, each an allgather in
    which every owner sends its next piece of variables (up to `PIECE_BYTES` / ranks), so every
    link carries data both ways at once (a broadcast per owner would use one way at a time) and
    the values in flight stay a few pieces (one allgather of every variable would hold the whole
    model a second time).

    Args:
        shards: the optimizer's `Shards`.
        variables: the variables.
        index: each variable's index in the optimizer's list.

    Example:

    >>> share_updates(shards_of(optimizer), variables, [optimizer._get_variable_index(v) for v in variables])
    """
    pieces = [_pieces(shards, variables, index, owner) for owner in range(shards.size)]
    last = []  # the last round's assigned values: the next round reads its own after them
    for round_ in range(max(len(p) for p in pieces)):
        taken = [p[round_] if round_ < len(p) else [] for p in pieces]  # each owner's positions
        with tf.control_dependencies(last):
            last = [t for dtype in _dtypes(variables, taken) for t in _gather_round(
                shards, variables, [[k for k in ks if variables[k].dtype == dtype] for ks in taken], dtype)]


def _dtypes(variables, taken):
    """The dtypes of a round's variables, in order of first appearance (the same on every rank)."""
    seen = []
    for ks in taken:
        for k in ks:
            if variables[k].dtype not in seen:
                seen.append(variables[k].dtype)
    return seen


def _gather_round(shards, variables, taken, dtype):
    """One allgather of each owner's variables `taken[owner]` (all of `dtype`), flattened, and the
    values assigned on every other rank; returns reads of the variables assigned (in a graph the
    next round reads its values only after them, so that one round is in flight, not the model)."""
    from tfring.ops import collectives

    mine = [tf.reshape(tf.convert_to_tensor(variables[k]), [-1]) for k in taken[shards.rank]]
    sent = tf.concat(mine, 0) if mine else tf.zeros([0], tf.as_dtype(dtype))
    gathered = collectives.allgather(sent)
    sizes = [_elements(variables[k]) for ks in taken for k in ks]
    assigned = []
    for (owner, k), value in zip([(o, k) for o, ks in enumerate(taken) for k in ks], tf.split(gathered, sizes)):
        if owner != shards.rank:
            # A copy: `value` is a slice of `gathered`, and a variable assigned the slice itself
            # would keep the whole round alive, this rank's own piece included (2 ranks, 100.7 M
            # Adam: peak RSS 2203 MB without the copy, 1951-1968 with it; unsharded 2391-2400).
            variables[k].assign(tf.raw_ops.DeepCopy(x=tf.reshape(value, variables[k].shape)))
            assigned.append(tf.convert_to_tensor(variables[k]))  # (a read: ordered after the assignment)
    return assigned or [gathered]


def _elements(variable):
    return tf.TensorShape(variable.shape).num_elements()


def _pieces(shards, variables, index, owner):
    """`owner`'s variables in list order, cut into pieces of up to `PIECE_BYTES` / ranks (a bigger
    variable alone)."""
    pieces, current, held = [], [], 0
    for k, v in enumerate(variables):
        if shards.owners[index[k]] != owner:
            continue
        if current and held + _bytes(v) > PIECE_BYTES // shards.size:
            pieces.append(current)
            current, held = [], 0
        current.append(k)
        held += _bytes(v)
    return pieces + ([current] if current else [])


def _placeholder_of(reference):
    """What Keras' `add_variable_from_reference` reads of a variable, for an empty slot of its name."""
    return types.SimpleNamespace(path=getattr(reference, "path", reference.name), name=reference.name,
                                 shape=(0,), dtype=reference.dtype)


def _owned_slots(original):
    def add_variable_from_reference(self, reference_variable, name=None, initializer="zeros"):
        shards = shards_of(self)
        if shards is None:
            return original(self, reference_variable, name, initializer)
        try:
            index = self._get_variable_index(reference_variable)
        except KeyError:  # a slot for something else than a trainable variable: every rank keeps it
            return original(self, reference_variable, name, initializer)
        # The slots differ between ranks: none takes rank 0's initial value (strategy's creator).
        extended = _extended(self)
        with strategy_base.while_traced(extended, "rank_own_variables", True) if extended else contextlib.nullcontext():
            if shards.owns(index):
                slot = original(self, reference_variable, name, initializer)
            else:
                slot = original(self, _placeholder_of(reference_variable), name, "zeros")
                slot._serialize_to_tensors = _refuse_checkpoint  # past this variable's class, for it alone
        shards.slot_of[id(slot)] = index
        return slot

    return add_variable_from_reference


def _refuse_checkpoint():
    """What `tf.train.Checkpoint` gets from a placeholder slot: an error, never a part of the state."""
    raise ValueError(
        "tfring: tf.train.Checkpoint cannot save an optimizer whose state is sharded "
        "(shard_optimizer_state=True): each rank holds only part of it. Save with model.save, "
        "ModelCheckpoint or BackupAndRestore, which gather the whole state")


def _whole_value(shards, variable):
    """`variable`'s value on every rank: a slot's from its owner (a broadcast every rank makes)."""
    from tfring.ops import collectives

    index = shards.slot_of.get(id(variable))
    if index is None:
        return variable.numpy()
    owner = shards.owners[index]
    value = tf.convert_to_tensor(variable) if owner == shards.rank else \
        tf.zeros(shards.shapes[index], tf.as_dtype(variable.dtype))
    return collectives.broadcast(value, root_rank=owner).numpy()


def _saves_whole_state(original):
    def save_own_variables(self, store):
        shards = self.__dict__.get(_ATTRIBUTE)
        if shards is None:
            return original(self, store)
        for i, variable in enumerate(self.variables):
            store[str(i)] = _whole_value(shards, variable)

    return save_own_variables


def _loads_owned_state(original):
    def load_own_variables(self, store):
        shards = self.__dict__.get(_ATTRIBUTE)
        if shards is None or len(store.keys()) != len(self.variables):
            return original(self, store)  # (Keras warns and skips a file of another optimizer)
        for i, variable in enumerate(self.variables):
            index = shards.slot_of.get(id(variable))
            if index is None or shards.owns(index):
                variable.assign(store[str(i)])

    return load_own_variables


_BASE = "keras.src.optimizers.base_optimizer.BaseOptimizer"

KERAS_INTERNALS = [
    keras_patches.Internal(_BASE, "_get_variable_index", ("self", "variable"),
                           "a variable's position in the optimizer's list, which decides its owner"),
    keras_patches.Internal("keras.src.backend", "name_scope", ("name",),
                           "the scope Keras builds an optimizer in, for the same variable names"),
]

PATCHES = [
    keras_patches.Patch(_BASE, "add_variable_from_reference", _owned_slots,
                        "with shard_optimizer_state, a rank keeps the slots of the variables it owns",
                        parameters=("self", "reference_variable", "name", "initializer")),
    keras_patches.Patch(_BASE, "save_own_variables", _saves_whole_state,
                        "with shard_optimizer_state, a save holds every slot whole, each from its owner",
                        parameters=("self", "store")),
    keras_patches.Patch(_BASE, "load_own_variables", _loads_owned_state,
                        "with shard_optimizer_state, a rank loads the slots it owns", parameters=("self", "store")),
]
