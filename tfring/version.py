"""tfring's version and the oldest Keras it runs on: written here and nowhere else (setup.py reads
this file as text)."""

__version__ = "0.4.0.dev0"

# The oldest Keras tfring works with: 3.10.0 is the first with BaseOptimizer's
# `_overwrite_variable_with_gradient`, which LARS and the gradient reduction call. setup.py,
# `KerasChangedError`'s message and `make test-keras-floor` read it here; requirements/*.txt repeat it
# (pip cannot read it) and keras_patches_test checks that they agree.
KERAS_FLOOR = "3.10.0"
