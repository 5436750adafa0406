"""`tfring.elastic.CommitCallback`: commits a `State` during `fit`, and resumes `fit` mid-epoch exactly."""

import keras


class CommitCallback(keras.callbacks.Callback):
    """Commits `state` at each epoch's end, or also every `save_freq` batches, during `model.fit`.

    The callback keeps `state.epoch` (epochs finished) and `state.batch` (batches of the current
    epoch finished). Give `fit` `initial_epoch=state.epoch`: after a restart it starts that epoch
    again, and the callback skips the `state.batch` batches the commit already holds (it draws them
    from the input without training on them), so the job computes exactly the steps of the
    uninterrupted run, provided the input gives each epoch's batches in the same order at every
    start (no shuffle, or a shuffle seeded per epoch; `fit`'s shuffle of NumPy arrays is not).

    Args:
        state: a `tfring.elastic.State` with `epoch` and `batch` values, e.g.
            `State(model, epoch=0, batch=0)`.
        save_freq: `"epoch"`, or a number of batches between two commits (there is also one at
            each epoch's end).

    Raises:
        ValueError: `state` lacks `epoch` or `batch`, or `save_freq` is neither `"epoch"` nor a
            positive number; in `fit`, a number of batches with `steps_per_execution` above 1.

    Example:

    >>> state = tfring.elastic.State(model, epoch=0, batch=0)
    >>> @tfring.elastic.run
    ... def train(state):
    ...     model.fit(dataset, initial_epoch=state.epoch, epochs=10,
    ...               callbacks=[tfring.elastic.CommitCallback(state, save_freq=100)])
    >>> train(state)
    """

    def __init__(self, state, save_freq="epoch"):
        super().__init__()
        missing = [name for name in ("epoch", "batch") if not hasattr(state, name)]
        if missing:
            raise ValueError(f"tfring.elastic.CommitCallback needs a state with {' and '.join(missing)} values: "
                             "tfring.elastic.State(model, epoch=0, batch=0)")
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"tfring.elastic.CommitCallback: save_freq must be 'epoch' or a number of batches >= 1, "
                             f"got {save_freq!r}")
        self.state, self.save_freq = state, save_freq
        self._to_skip = 0

    def on_train_begin(self, logs=None):
        if self.save_freq != "epoch" and getattr(self.model, "steps_per_execution", 1) != 1:
            raise ValueError("tfring.elastic.CommitCallback commits mid-epoch (save_freq a number of batches) with "
                             f"steps_per_execution=1 only; this model runs {self.model.steps_per_execution} steps "
                             "per call: commit every epoch, or compile with steps_per_execution=1")
        self._to_skip = self.state.batch
        if self._to_skip:
            self._skip_committed_batches()

    def _skip_committed_batches(self):
        """Makes the model's next `state.batch` training steps only draw their batch."""
        train = self.model.train_function

        def skipping(iterator):
            if self._to_skip == 0:
                return train(iterator)
            self._to_skip -= 1
            next(iterator)  # (the batch the committed step trained on)
            if self._to_skip == 0:
                self.model.train_function = train
            return {}

        self.model.train_function = skipping

    def on_train_batch_end(self, batch, logs=None):
        if self._to_skip or batch + 1 <= self.state.batch:
            return  # (a skipped batch: the commit holds it already)
        self.state.batch = batch + 1
        if self.save_freq != "epoch" and self.state.batch % self.save_freq == 0:
            self.state.commit()

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch, self.state.batch = epoch + 1, 0
        self.state.commit()
