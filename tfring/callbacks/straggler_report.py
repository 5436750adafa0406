"""Who the job waits for: how long each rank waited for the others, per epoch, printed by rank 0."""

import keras

from tfring import runtime
from tfring.ops import objects


def _waited():
    return sum(kind["waited_seconds"] for kind in runtime.traffic().values())


class StragglerReport(keras.callbacks.Callback):
    """At the end of each epoch, rank 0 prints how long each rank waited for the other ranks.

    A collective starts when every rank has submitted it, so the ranks that got there first wait
    (measured by tfring's engine at the start of every collective: `tfring.traffic()`). The rank
    that waited least is the one the others waited for: a slow input pipeline, a busier host, a
    callback only it runs. The figures of every epoch are also kept in `history`, on every rank.
    Give it to `fit` on every rank (it gathers every rank's figure), not only on rank 0 as
    Horovod scripts do with some callbacks: there the other ranks would wait for it.

    Args:
        threshold: a fraction; the report names the rank the others waited for when the largest
            wait exceeds the smallest by more than this fraction of the epoch's time. Default 0.05.

    Example:

    >>> model.fit(ds, epochs=10, callbacks=[tfring.callbacks.StragglerReport()])
    tfring: epoch 1 (12.3 s): waited for the other ranks: rank 0 3.1 s, rank 1 0.1 s; they waited for rank 1
    """

    def __init__(self, threshold=0.05):
        super().__init__()
        self.threshold = float(threshold)
        self.history = []

    def on_epoch_begin(self, epoch, logs=None):
        import time

        self._start = (time.monotonic(), _waited())

    def on_epoch_end(self, epoch, logs=None):
        import time

        began, waited_before = self._start
        seconds = time.monotonic() - began
        waits = objects.allgather_object(_waited() - waited_before)  # every rank runs the callback
        self.history.append({"epoch": epoch + 1, "seconds": seconds, "waited_seconds": waits})
        if runtime.rank() == 0:
            print(self._line(epoch + 1, seconds, waits), flush=True)

    def _line(self, epoch, seconds, waits):
        ranks = ", ".join(f"rank {r} {w:.2f} s" for r, w in enumerate(waits))
        line = f"tfring: epoch {epoch} ({seconds:.1f} s): waited for the other ranks: {ranks}"
        slowest = min(range(len(waits)), key=waits.__getitem__)
        if len(waits) > 1 and max(waits) - waits[slowest] > self.threshold * seconds:
            line += f"; they waited for rank {slowest}"
        return line
