"""The one way tfring wraps Keras functions.

Keras 3 has no hook for what a multi-process strategy needs in a few places (rank 0 alone
writing a save, loss scaling by the rows each rank holds, reporting on rank 0), so tfring wraps
those functions. Each wrap is declared as a `Patch` in a `PATCHES` list beside the code that
needs it (keras_wraps/, gradients.door, gradients.loss_reductions, step_rows), and
`keras_wraps.install.install_all()` applies them all through `apply()`, which:

- wraps each function once (applying twice is a no-op, so every `RingStrategy()` may call it;
  distinct wraps of one function would stack; today each function has one);
- fails, naming the function and the Keras version, when Keras lacks it or its parameters no
  longer begin as the wrap expects, instead of silently training without the wrap
  (`KerasChangedError`).

Several targets are Keras internals (`keras.src…`, underscore names), the likeliest to move in a
Keras upgrade, and so are some names tfring calls without wrapping them: each module declares
those as `Internal`s in a `KERAS_INTERNALS` list beside its `PATCHES`. `keras_patches_test.py`
gathers both lists from every module of tfring and checks each name and its parameters against
the installed Keras, so an upgrade that renames one fails there, naming it. tfring needs Keras
`KERAS_FLOOR` or newer (tfring/version.py), and `make test-keras-floor` runs the Keras-facing
tests on that version.
"""

import dataclasses
import functools
import importlib
import inspect

from tfring.version import KERAS_FLOOR

_MARK = "_tfring_patched"


class KerasChangedError(RuntimeError):
    """This Keras lacks a function tfring wraps or calls, or its parameters changed (an upgrade, or
    a Keras older than `KERAS_FLOOR`)."""


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
        parameters: the names the function's parameters must begin with, in order, e.g.
            `("self", "filepath")`; None (default) when the wrap passes every argument on as it
            came (`*args, **kwargs`) and names none. Declare them when the wrap forwards arguments
            by position or reads or sets one by name: `apply()` then refuses a Keras whose function
            takes them differently, instead of passing a value to the wrong parameter.

    Example:

    >>> Patch("keras.Model", "save", _rank0_writes, "under RingStrategy only rank 0 writes",
    ...       parameters=("self", "filepath"))
    """

    owner: str
    name: str
    wrap: object
    why: str
    parameters: tuple = None

    @property
    def target(self):
        """The patched name as users would write it, e.g. `keras.Model.save`."""
        return f"{self.owner}.{self.name}"

    @property
    def key(self):
        """Names this wrap, so that it is applied once even where several wraps stack (fit)."""
        return f"{self.wrap.__module__}.{self.wrap.__qualname__}@{self.target}"


@dataclasses.dataclass(frozen=True)
class Internal:
    """A Keras name tfring calls (or overrides) but does not wrap.

    Private Keras functions and methods (`keras.src…`, underscore names) that tfring's code calls
    inside a wrap or elsewhere, and methods a tfring subclass overrides, can be renamed by any
    Keras release like the wrapped ones. Each module lists those it uses in `KERAS_INTERNALS`,
    beside its `PATCHES`, so that `keras_patches_test.py` checks them against the installed Keras.

    Args:
        owner: the dotted path of the module or class holding it, e.g. `"keras.Model"` or
            `"keras.src.losses.loss"`.
        name: the attribute, e.g. `"_flatten_metrics_in_order"`.
        parameters: the names the callable's parameters must begin with, in order (`self`
            included for a method), e.g. `("self", "grads", "trainable_variables")`; None (default)
            checks only that the name exists.
        why: one line: what tfring uses it for.

    Example:

    >>> Internal("keras.Model", "_flatten_metrics_in_order", ("self", "logs"),
    ...          "train_on_batch's logs as a list, in Keras' order")
    """

    owner: str
    name: str
    parameters: tuple = None
    why: str = ""

    @property
    def target(self):
        """The name as users would write it, e.g. `keras.Model._flatten_metrics_in_order`."""
        return f"{self.owner}.{self.name}"


def _changed(declaration, problem):
    """The error for a Keras that lacks `declaration`'s target or takes other parameters."""
    use = "wraps" if isinstance(declaration, Patch) else "calls"
    why = f" ({declaration.why})" if declaration.why else ""
    return KerasChangedError(
        f"tfring {use} {declaration.target}{why}, {problem}: install Keras {KERAS_FLOOR} or newer, below 4 "
        f"(`pip install 'keras>={KERAS_FLOOR},<4'`; requirements/ names the versions tfring is tested with)")


def _leading_parameters(function, count):
    """The names of `function`'s first `count` parameters (a wrap's: its original's), or None."""
    try:
        return tuple(inspect.signature(function).parameters)[:count]
    except (TypeError, ValueError):
        return None  # a builtin Python cannot tell the signature of


def resolve(declaration):
    """Finds a `Patch`'s or an `Internal`'s target in the installed Keras and checks its parameters.

    Args:
        declaration: a `Patch` or an `Internal`.

    Returns:
        `(owner, value)`: the module or class holding the target, and the target's current value.

    Raises:
        KerasChangedError: the module, class or name does not exist in this Keras, or the
            declaration's `parameters` are not how the callable's parameters begin.

    Example:

    >>> owner, save = resolve(Patch("keras.Model", "save", _rank0_writes, "rank 0 writes"))
    """
    path = declaration.owner.split(".")
    try:
        owner = importlib.import_module(path[0])
        for part in path[1:]:
            owner = getattr(owner, part) if hasattr(owner, part) else importlib.import_module(
                f"{owner.__name__}.{part}")
        value = getattr(owner, declaration.name)
    except (ImportError, AttributeError):
        raise _changed(declaration, f"which Keras {_keras_version()} does not have") from None
    expected = tuple(declaration.parameters or ())
    found = _leading_parameters(value, len(expected)) if expected else expected
    if found != expected:
        raise _changed(declaration, f"expecting its parameters to begin ({', '.join(expected)}), which in Keras "
                                    f"{_keras_version()} begin ({', '.join(found) if found is not None else '?'})")
    return owner, value


def _keras_version():
    import keras

    return keras.__version__


def apply(patches):
    """Wraps each function in `patches` once. Idempotent.

    Args:
        patches: a list of `Patch`.

    Raises:
        KerasChangedError: a target is missing from the installed Keras, or its parameters differ
            from the patch's `parameters` (nothing is wrapped then).

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
