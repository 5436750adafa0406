"""The random state a rank takes at the strategy's start, and its digest (one process: the core's
collectives are identities, so a broadcast hands back what this rank offered)."""

import random

import numpy as np
import tensorflow as tf

from tfring.strategy import shared_seed


def test_the_digest_is_equal_for_equal_states_and_differs_otherwise():
    np.random.seed(1), random.seed(1)
    first = shared_seed.state_digest()
    np.random.seed(1), random.seed(1)
    assert shared_seed.state_digest() == first
    np.random.seed(2)
    assert shared_seed.state_digest() != first


def test_a_joining_rank_keeps_its_own_state():
    np.random.seed(7), random.seed(7), tf.random.set_seed(7)
    mine = shared_seed.state_digest()
    shared_seed.agree_on_random_state(rank=1, size=3, joining=True)
    assert shared_seed.state_digest() == mine
