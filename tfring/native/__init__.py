"""The native library: tfring's C++ core and TensorFlow kernels, compiled into one shared object.

`build` compiles it against the TensorFlow of this environment; `library` loads it once per
process (rebuilding it first when it is stale). This is the bottom of tfring's Python layers:
it imports nothing else from tfring, and TensorFlow only when the library is loaded.
"""
