"""The warm jobs fixture keeps scripts apart: what one script seeds, the next does not inherit."""

import pytest

from tfring_dev.testing import rank_lines

pytestmark = pytest.mark.multiprocess

SEEDS = r'''
import random
import numpy as np
import keras
import tensorflow as tf
import tfring
from tensorflow.python.eager import context

tfring.init()
print("SEED", context.global_seed(), np.random.random() == FIRST_NUMPY, random.random() == FIRST_PYTHON)
keras.utils.set_random_seed(3)  # TensorFlow's, NumPy's and Python's global generators
'''


def test_a_scripts_random_seeds_do_not_reach_the_next_script(warm):
    import random

    import numpy as np

    np.random.seed(3)
    random.seed(3)
    script = SEEDS.replace("FIRST_NUMPY", repr(np.random.random())).replace("FIRST_PYTHON", repr(random.random()))
    for _ in range(2):  # the second runs in processes where the first seeded everything
        job = warm.run_job(2, script)
        assert job.returncode == 0, job.stderr[-3000:]
        for r in range(2):
            assert "SEED None False False" in rank_lines(job.stdout, r), job.stdout[-2000:]
