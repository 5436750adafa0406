"""`TFRING_TIMELINE`: each rank writes a Chrome-trace JSON of its collectives whose phases nest
inside them, and in which gradient buckets travel while the backward pass still runs."""

import json

import pytest

from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

FIT = r'''
import numpy as np
import keras
import tfring

strategy = tfring.RingStrategy(bucket_bytes=64 << 10)
with strategy.scope():
    # An expensive first layer (its backward runs last) and dense layers whose gradients come first.
    m = keras.Sequential([keras.Input((32, 32, 8)), keras.layers.Conv2D(32, 3, activation="relu"),
                          keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(4),
                          keras.layers.Flatten(), keras.layers.Dense(256, activation="relu"),
                          keras.layers.Dense(256, activation="relu"), keras.layers.Dense(3)])
    m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.random.default_rng(0).standard_normal((512, 32, 32, 8)).astype("float32")
m.fit(x, np.zeros(512, "int32"), batch_size=128, epochs=1, verbose=0)
'''


def _load(path):
    events = json.loads(path.read_text())
    spans = [e for e in events if e["ph"] == "X"]
    return events, spans


PHASES = ("wait for peers", "move data")
RING_PHASES = ("pack", "reduce-scatter", "allgather", "unpack", "hierarchical allreduce")


def _inside(inner, outer):
    return (inner["tid"] == outer["tid"] and outer["ts"] <= inner["ts"]
            and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"])


def test_each_rank_traces_its_collectives_and_the_buckets_overlap_the_backward_pass(tmp_path):
    proc = run_job(2, FIT, env={"TFRING_TIMELINE": str(tmp_path / "trace.json")}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        events, spans = _load(tmp_path / f"trace.rank{rank}.json")
        collectives = [s for s in spans if s["name"] not in PHASES + RING_PHASES]
        phases = [s for s in spans if s["name"] in PHASES]
        moves = [s for s in spans if s["name"] == "move data"]
        assert collectives and len(phases) >= len(collectives)
        for p in phases:  # every phase lies inside a collective of its lane
            assert any(_inside(p, c) for c in collectives), p
        ring_phases = [s for s in spans if s["name"] in RING_PHASES]
        assert {s["name"] for s in ring_phases} >= {"reduce-scatter", "allgather"}
        for p in ring_phases:  # and a ring allreduce's own phases inside its "move data"
            assert any(_inside(p, m) for m in moves), p
        buckets = [c for c in collectives if "TfringAllreduceStart" in c["name"]]
        submits = [e for e in events if e["ph"] == "i" and "TfringAllreduceStart" in e["name"]]
        per_step = len({c["name"] for c in buckets})
        assert per_step >= 3 and len(buckets) == 4 * per_step, [c["name"] for c in buckets]
        # In every step the first bucket's allreduce began before the last bucket's gradients
        # existed: it travelled while the backward pass still ran. (Whether it also finished
        # first depends on how busy the 2 cores are; gradient_buckets_test shows that it can.)
        for step in range(4):
            first = buckets[step * per_step]
            assert first["ts"] < submits[(step + 1) * per_step - 1]["ts"], (rank, step)
