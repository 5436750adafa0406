"""`import tfring` makes tfring's Keras objects loadable: `keras.models.load_model("m.keras")` finds LARS.

Keras finds a custom class in a saved model only if the class was registered (imported) before the
load. `import tfring` must stay free of TensorFlow (the launcher imports it), so registration waits
for Keras: if Keras is already imported, tfring's serializable modules are imported at once;
otherwise a one-shot import hook imports them right after Keras finishes loading.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# The modules whose import registers tfring's serializable classes with Keras.
SERIALIZABLE_MODULES = ("tfring.optimizers.lars", "tfring.schedules.warm_up", "tfring.schedules.multi_step_decay",
                        "tfring.schedules.polynomial_decay")


def _register():
    for name in SERIALIZABLE_MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:  # never break `import keras` (e.g. Keras on a backend without TensorFlow)
            warnings.warn(f"tfring: could not register {name} with Keras: {e}")


class _AfterKeras(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of `keras` so registration runs once Keras is loaded.

    It stays in `sys.meta_path` until Keras has actually loaded: TensorFlow looks Keras up (a
    `find_spec` without an import) before it imports it.
    """

    def __init__(self):
        self._looking = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras" or self._looking:
            return None
        self._looking = True  # the lookup below must not find us again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking = False
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            self._done()
            _register()

        spec.loader.exec_module = exec_module
        return spec

    def _done(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass  # already removed


def register_when_keras_loads():
    """Registers tfring's serializable classes now (Keras loaded) or right after Keras loads.

    Example:

    >>> register_when_keras_loads()   # called by `import tfring`
    """
    if "keras" in sys.modules:
        _register()
    elif not any(isinstance(f, _AfterKeras) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterKeras())
