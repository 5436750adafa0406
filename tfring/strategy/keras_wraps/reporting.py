"""Reporting happens once per job: rank 0 prints progress and writes logs; the other ranks stay quiet.

Every rank runs the same script, so without help each one would print its own progress bar (seen
twice under mpirun or srun, which show every rank's output) and every TensorBoard, CSVLogger or
RemoteMonitor callback would write or send the same global numbers once per rank (two event files
per run folder, every CSV row twice). Horovod users write `verbose=1 if hvd.rank() == 0 else 0` and
add such callbacks on rank 0 only; tfring does it for them.

For a model of a RingStrategy with more than one rank (`model_calls` calls `quiet` before `fit`,
`evaluate` and `predict`), ranks other than 0 run with `verbose=0` and without the callbacks listed in
`REPORTING_CALLBACKS`. Every other callback runs on every rank (the logs they see are global, so
EarlyStopping, ReduceLROnPlateau or TerminateOnNaN decide the same on every rank); ModelCheckpoint
and BackupAndRestore run everywhere and write once (see `checkpointing`).

`verbose=0` is Keras' public switch for this call alone. `keras.config.disable_interactive_logging()`
would not do instead: it is state of the thread, not of the call, and it does not silence Keras'
messages but sends them to `absl.logging` (shown wherever a script sets absl to INFO); the reporting
callbacks would still need removing.
"""


def reporting_callbacks():
    """The Keras callback classes that only report, and so run on rank 0 only.

    Returns:
        A tuple of classes: TensorBoard, CSVLogger, RemoteMonitor, ProgbarLogger.

    Example:

    >>> keras.callbacks.CSVLogger in reporting_callbacks()
    True
    """
    import keras

    return (keras.callbacks.TensorBoard, keras.callbacks.CSVLogger, keras.callbacks.RemoteMonitor,
            keras.callbacks.ProgbarLogger)


def quiet(strategy, arguments):
    """On ranks other than 0, sets `verbose=0` and leaves the reporting callbacks out of a call.

    Args:
        strategy: the model's multi-rank `RingStrategy`.
        arguments: the call's bound arguments (`inspect.BoundArguments.arguments`) of `fit`,
            `evaluate` or `predict`, changed in place.

    Example:

    >>> quiet(strategy, bound.arguments)   # in model_calls' wrap, before Keras runs
    """
    if strategy.rank == 0:
        return
    arguments["verbose"] = 0
    callbacks = arguments.get("callbacks")
    if isinstance(callbacks, (list, tuple)):
        arguments["callbacks"] = [c for c in callbacks if not isinstance(c, reporting_callbacks())]
