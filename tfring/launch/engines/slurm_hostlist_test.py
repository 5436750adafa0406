import pytest

from tfring.launch.engines.slurm_hostlist import expand_hostlist, expand_tasks_per_node


@pytest.mark.parametrize("text,names", [
    ("node1", ["node1"]),
    ("node[01-04,07],cpu3", ["node01", "node02", "node03", "node04", "node07", "cpu3"]),
    ("gpu[8-11]", ["gpu8", "gpu9", "gpu10", "gpu11"]),  # no padding when the first bound has none
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("a[1,3],b,c[5-6].example.org", ["a1", "a3", "b", "c5.example.org", "c6.example.org"]),
    ("10.0.0.[1-2]", ["10.0.0.1", "10.0.0.2"]),
])
def test_expand_hostlist(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("text,needle", [
    ("node[1-2", "unbalanced"), ("node1-2]", "unbalanced"), ("a,,b", "empty entry"),
    ("n[4-2]", "runs backwards"), ("n[a-b]", "not a number"), ("n[[1]]", "unbalanced"),
])
def test_bad_hostlists_name_the_variable_and_the_text(text, needle):
    with pytest.raises(ValueError, match=f"SLURM_STEP_NODELIST: .*{needle}"):
        expand_hostlist(text, "SLURM_STEP_NODELIST")


def test_tasks_per_node():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("4") == [4]
    with pytest.raises(ValueError, match="SLURM_TASKS_PER_NODE: expected"):
        expand_tasks_per_node("2(3)", "SLURM_TASKS_PER_NODE")
