"""The documentation's scripts, run as written, and its configuration table against the schema.

Each script is the ```python block right after a marker comment (`<!-- porting-guide-script -->`)
in README.md or a page of docs/; the test finds the marker wherever it lives, so a script can move
between pages without its test.
"""

import glob
import os
import re

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))


def _page_with(text):
    found = [page for page in PAGES if text in open(page, encoding="utf-8").read()]
    assert len(found) == 1, f"{text!r} should be on exactly one page of README.md and docs/, found on {found}"
    return open(found[0], encoding="utf-8").read()


def _script(marker):
    match = re.search(rf"<!-- {marker} -->\n```python\n(.*?)```", _page_with(f"<!-- {marker} -->"), re.S)
    assert match, f"the {marker} marker is not followed by a ```python block"
    return match.group(1)


@pytest.mark.multiprocess
def test_the_front_page_script_trains_on_two_ranks(warm):
    # README.md's example (also the site's home and getting-started page): the data made after the
    # strategy is the same on both ranks, the job trains, and rank 0 alone prints the accuracy.
    job = warm.run_job(2, _script("front-page-script"))
    assert job.returncode == 0, job.stderr[-3000:]
    printed = [[line for line in rank_lines(job.stdout, r) if line.startswith("accuracy:")] for r in range(2)]
    assert len(printed[0]) == 1 and not printed[1], job.stdout[-2000:]
    assert 0.7 <= float(printed[0][0].split()[1]) <= 1.0, printed[0]  # it learned (0.88-0.95 over 4 seeds alone)


@pytest.mark.multiprocess
def test_the_porting_guide_script_runs_as_written(tmp_path):
    script = "import os\nos.chdir(os.environ['WORKDIR'])\n" + _script("porting-guide-script")
    proc = run_job(2, script, env={"WORKDIR": str(tmp_path), "PYTHONWARNINGS": "ignore"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = [line for line in rank_lines(proc.stdout, 0) if line.startswith("validation:")]
    assert len(result) == 1 and "'accuracy'" in result[0], proc.stdout[-2000:]
    assert not [line for line in rank_lines(proc.stdout, 1) if line.startswith("validation:")]
    for name in ("model.keras", "ckpt/best.keras", "train_log.csv"):
        assert (tmp_path / name).exists(), name
    rows = (tmp_path / "train_log.csv").read_text().strip().splitlines()
    assert rows[0].startswith("epoch") and 2 <= len(rows) - 1 <= 5, rows  # one row per epoch, written once


@pytest.mark.multiprocess
def test_the_tape_loop_for_horovod_users_runs_as_written_and_equals_one_process(warm):
    # "Coming from Horovod": the DistributedGradientTape loop as a RingStrategy custom loop.
    script = _script("tape-loop-script") + "print('FINAL', float(loss))\n"
    global_batch = "GLOBAL_BATCH = 8 * strategy.num_replicas_in_sync"
    assert global_batch in script
    alone = warm.run_alone(script.replace(global_batch, "GLOBAL_BATCH = 16"))  # one process, N x the batch
    job = warm.run_job(2, script)
    assert alone.returncode == 0 and job.returncode == 0, (alone.stderr + job.stderr)[-3000:]
    one = float(alone.stdout.split("FINAL")[1])
    finals = [float(line.split()[1]) for r in range(2) for line in rank_lines(job.stdout, r)
              if line.startswith("FINAL")]
    assert len(finals) == 2 and finals[0] == finals[1], job.stdout[-2000:]
    assert abs(finals[0] - one) <= 1e-5 * max(1.0, abs(one)), (finals, one)


def test_the_configuration_table_is_the_schema():
    # The configuration page's table is written from tfring.config's one schema: every setting,
    # its variable, argument, meaning and default, in order; the launcher's secret variables follow.
    from tfring.config import settings_table

    text = _page_with("| variable | `init()` argument |")
    table = text[text.index("| variable | `init()` argument |"):].split("\n\n")[0].splitlines()[2:]
    rows = [line.strip("| ").split(" | ") for line in table]
    expected = [["—" if env == "—" else f"`{env}`", f"`{arg}`", meaning, default]
                for env, arg, meaning, default in settings_table()]
    assert rows[:len(expected)] == expected
    assert [row[0] for row in rows[len(expected):]] == ["`TFRING_SECRET`", "`TFRING_SECRET_FILE`",
                                                     "`TFRING_RENDEZVOUS_FILE`"]
