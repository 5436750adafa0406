"""The README's porting guide, run as written: its script under `tfring run -np 2`."""

import os
import re

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

README = os.path.join(os.path.dirname(__file__), os.pardir, "README.md")


def _porting_script():
    text = open(README).read()
    match = re.search(r"<!-- porting-guide-script -->\n```python\n(.*?)```", text, re.S)
    assert match, "the README lost its porting-guide script"
    return match.group(1)


@pytest.mark.multiprocess
def test_the_porting_guide_script_runs_as_written(tmp_path):
    script = "import os\nos.chdir(os.environ['WORKDIR'])\n" + _porting_script()
    proc = run_job(2, script, env={"WORKDIR": str(tmp_path), "PYTHONWARNINGS": "ignore"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = [line for line in rank_lines(proc.stdout, 0) if line.startswith("validation:")]
    assert len(result) == 1 and "'accuracy'" in result[0], proc.stdout[-2000:]
    assert not [line for line in rank_lines(proc.stdout, 1) if line.startswith("validation:")]
    for name in ("model.keras", "ckpt/best.keras", "train_log.csv"):
        assert (tmp_path / name).exists(), name
    rows = (tmp_path / "train_log.csv").read_text().strip().splitlines()
    assert rows[0].startswith("epoch") and 2 <= len(rows) - 1 <= 5, rows  # one row per epoch, written once


def test_the_configuration_table_is_the_schema():
    # The README's table is written from tfring.config's one schema: every setting, its variable,
    # argument, meaning and default, in order; the launcher's secret variables follow.
    from tfring.config import settings_table

    text = open(README).read()
    table = text[text.index("| variable | `init()` argument |"):].split("\n\n")[0].splitlines()[2:]
    rows = [line.strip("| ").split(" | ") for line in table]
    expected = [["—" if env == "—" else f"`{env}`", f"`{arg}`", meaning, default]
                for env, arg, meaning, default in settings_table()]
    assert rows[:len(expected)] == expected
    assert [row[0] for row in rows[len(expected):]] == ["`TFRING_SECRET`", "`TFRING_SECRET_FILE`",
                                                     "`TFRING_RENDEZVOUS_FILE`"]
