"""The launcher pipe's messages: grow notices and memberships, however the reads cut them."""

import pytest

from tfring.launch import membership
from tfring.launch import variables


def test_messages_come_out_whole_and_in_order_whatever_the_reads_cut():
    place = {"TFRING_RANK": "1", "TFRING_SIZE": "2", "TFRING_STORE_ADDR": "10.0.0.1:4242"}
    stream = variables.GROW_NOTICE + membership.encode(place) + variables.GROW_NOTICE + membership.encode({})
    for cut in range(1, len(stream)):
        reader = membership.Reader()
        found = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert found == [variables.GROW_NOTICE, place, variables.GROW_NOTICE, {}], cut


def test_a_membership_carries_strings_and_a_body_of_any_length():
    place = {"TFRING_JOB_ID": "x" * 5000, "TFRING_RESTART": 3}
    assert membership.Reader().feed(membership.encode(place)) == [{"TFRING_JOB_ID": "x" * 5000, "TFRING_RESTART": "3"}]


def test_bytes_that_are_no_message_are_named_and_dropped():
    reader = membership.Reader()
    with pytest.raises(ValueError, match=r"unexpected byte b'Z' on the launcher's pipe"):
        reader.feed(b"Z" + membership.encode({"a": "b"}))
    assert reader.feed(variables.GROW_NOTICE) == [variables.GROW_NOTICE]  # the reader goes on


def test_a_joining_rank_reads_its_place_and_a_bad_one_is_named():
    assert membership.joining_place({}) is None
    assert membership.joining_place({membership.JOINING: "2 3 0 1"}) == (2, 3, 0, 1)
    with pytest.raises(ValueError, match=r"TFRING_JOINING='2 3' is not `rank size local_rank local_size`"):
        membership.joining_place({membership.JOINING: "2 3"})
    with pytest.raises(ValueError, match=r"is not a place in a job: rank 3 of 3"):
        membership.joining_place({membership.JOINING: "3 3 0 1"})
