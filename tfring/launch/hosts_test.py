"""Host lists (-H, --hostfile) and the placement of ranks on hosts."""

import pytest

from tfring.launch import hosts
from tfring.launch.hosts import Host


def test_plan_slots_fills_hosts_in_order():
    slots = hosts.plan_slots(5, [Host("a", 2), Host("b", 4)])
    assert [(s.host, s.rank, s.local_rank, s.local_size) for s in slots] == [
        ("a", 0, 0, 2), ("a", 1, 1, 2), ("b", 2, 0, 3), ("b", 3, 1, 3), ("b", 4, 2, 3)]
    assert [s.host for s in hosts.plan_slots(None, [Host("a", 2), Host("b", 1)])] == ["a", "a", "b"]
    assert [s.host for s in hosts.plan_slots(2, [Host("a", 1), Host("b", 1), Host("c", 4)])] == ["a", "b"]
    with pytest.raises(ValueError, match=r"-np 5 does not fit the 4 slots of the hosts given \(a:2, b:2\)"):
        hosts.plan_slots(5, [Host("a", 2), Host("b", 2)])
    with pytest.raises(ValueError, match="at least 1"):
        hosts.plan_slots(0)


def test_host_list():
    assert hosts.parse_host_list("node1:4,node2, user@node3:2") == [
        Host("node1", 4), Host("node2", 1), Host("user@node3", 2)]
    for text, message in [("a:2,a:1", "'a' is listed twice"), ("a:0", "at least 1"), ("a:x", "whole number"),
                          ("a,,b", "'' is not a host name"), ("a b:2", "is not a host name"),
                          ("a:2:3", "whole number")]:
        with pytest.raises(ValueError, match=message):
            hosts.parse_host_list(text)


def test_hostfile(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# the cluster\nnode1 slots=4\n\nnode2:2   # fast one\nnode3\nnode4 slots=2 max_slots=8\n")
    assert hosts.read_hostfile(str(path)) == [Host("node1", 4), Host("node2", 2), Host("node3", 1), Host("node4", 2)]
    for text, message in [("a slots=2\na:1\n", "'a' is listed twice"), ("a cpus=2\n", r"hosts:1: expected 'host slots=N'"),
                          ("# nothing\n", "names no host"), ("a slots=-1\n", "at least 1"),
                          ("a\nb slots=two\n", r"hosts:2: the slots of 'b' must be a whole number")]:
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            hosts.read_hostfile(str(path))
    with pytest.raises(ValueError, match="cannot read"):
        hosts.read_hostfile(str(tmp_path / "missing"))


def test_is_local():
    assert hosts.is_local("localhost") and hosts.is_local("127.0.0.1")
    assert not hosts.is_local("no-such-host.invalid") and not hosts.is_local("192.0.2.1")
