"""The one way tfring wraps Keras functions.

Keras 3 has no hook for what a multi-process strategy needs in a few places (rank 0 alone
writing a save, loss scaling by the rows each rank holds, reporting on rank 0), so tfring wraps
those functions. Each wrap is declared as a `Patch` in a `PATCHES` list beside the code that
needs it (bucket_tuning, checkpointing, gradient_accumulation, early_reduction, loss_reductions,
on_batch, reporting, scope_check, step_rows) and applied by `apply()`, which:

- wraps each function once (applying twice is a no-op, so every `RingStrategy()` may call it;
  distinct wraps of one function, like fit's scope check and reporting, stack);
- fails, naming the function and the Keras version, when Keras lacks it, instead of silently
  training without the wrap (`KerasChangedError`).

Several targets are Keras internals (`keras.src…`, underscore names), the likeliest to move in a
Keras upgrade: `keras_patches_test.py` gathers every module's `PATCHES` and checks each target
against the installed Keras, so an upgrade that renames one fails there, naming it.
"""

import dataclasses
import functools
import importlib

_MARK = "_tfring_patched"


class KerasChangedError(RuntimeError):
    """This Keras lacks a function tfring wraps (renamed or removed by an upgrade)."""


@dataclasses.dataclass(frozen=True)
class Patch:
    """One Keras function tfring wraps.

    Args:
        owner: the dotted path of the module or class holding it, e.g. `"keras.Model"` or
            `"keras.src.utils.file_utils"`.
        name: the attribute, e.g. `"save"`.
        wrap: `original -> replacement`; the replacement must call `original` where tfring has
            nothing to change (another strategy, one rank).
        why: one line: what the wrap is for.

    Example:

    >>> Patch("keras.Model", "save", _rank0_writes, "under RingStrategy only rank 0 writes")
    """

    owner: str
    name: str
    wrap: object
    why: str

    @property
    def target(self):
        """The patched name as users would write it, e.g. `keras.Model.save`."""
        return f"{self.owner}.{self.name}"

    @property
    def key(self):
        """Names this wrap, so that it is applied once even where several wraps stack (fit)."""
        return f"{self.wrap.__module__}.{self.wrap.__qualname__}@{self.target}"


def resolve(patch):
    """Finds `patch`'s target in the installed Keras.

    Args:
        patch: a `Patch`.

    Returns:
        `(owner, function)`: the module or class holding the target, and its current value.

    Raises:
        KerasChangedError: the module, class or function does not exist in this Keras.

    Example:

    >>> owner, save = resolve(Patch("keras.Model", "save", _rank0_writes, "rank 0 writes"))
    """
    path = patch.owner.split(".")
    try:
        owner = importlib.import_module(path[0])
        for part in path[1:]:
            owner = getattr(owner, part) if hasattr(owner, part) else importlib.import_module(
                f"{owner.__name__}.{part}")
        return owner, getattr(owner, patch.name)
    except (ImportError, AttributeError):
        import keras

        raise KerasChangedError(
            f"tfring wraps {patch.target} ({patch.why}), which Keras {keras.__version__} does not have: "
            f"use a Keras version tfring was tested with (requirements/ names them)") from None


def apply(patches):
    """Wraps each function in `patches` once. Idempotent.

    Args:
        patches: a list of `Patch`.

    Raises:
        KerasChangedError: a target is missing from the installed Keras (nothing is wrapped then).

    Example:

    >>> apply(PATCHES)   # in the module that declares PATCHES, from its install()
    """
    found = [(patch, *resolve(patch)) for patch in patches]  # all or nothing
    for patch, owner, current in found:
        applied = getattr(current, _MARK, frozenset())
        if patch.key in applied:
            continue
        replacement = patch.wrap(current)
        functools.update_wrapper(replacement, current)
        setattr(replacement, _MARK, applied | {patch.key})
        setattr(owner, patch.name, replacement)


def is_patched(function):
    """True when `function` is one of tfring's wraps.

    Args:
        function: any callable.

    Returns:
        bool.

    Example:

    >>> is_patched(keras.Model.save)   # after RingStrategy()
    True
    """
    return bool(getattr(function, _MARK, None))
