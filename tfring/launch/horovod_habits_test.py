"""horovodrun's flags and HOROVOD_* variables, as `tfring run` reads them (no job started)."""

from tfring.launch import horovod_habits
from tfring.launch import hosts


def test_variables_with_a_tfring_meaning_are_translated_and_the_rest_named():
    exports, notes = horovod_habits.translate({
        "HOROVOD_FUSION_THRESHOLD": "67108864", "HOROVOD_TIMELINE": "/tmp/t.json", "HOROVOD_CYCLE_TIME": "5",
        "HOROVOD_GPU_OPERATIONS": "NCCL", "TFRING_TIMEOUT": "9", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "60",
        "PATH": "/bin"})
    assert exports == {"TFRING_FUSION_THRESHOLD": "67108864", "TFRING_TIMELINE": "/tmp/t.json"}
    assert len(notes) == 2
    assert "HOROVOD_FUSION_THRESHOLD=67108864 is taken as TFRING_FUSION_THRESHOLD" in notes[0]
    assert "TFRING_TIMEOUT" not in notes[0]  # the user's own TFRING_TIMEOUT wins, silently
    assert "HOROVOD_CYCLE_TIME (tfring has no background cycle" in notes[1] and "HOROVOD_GPU_OPERATIONS" in notes[1]
    assert horovod_habits.translate({"PATH": "/bin"}) == ({}, [])
    # 0 is Horovod's "off": tfring keeps its own default rather than a timeout of 0 s.
    assert horovod_habits.translate({"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "0"})[0] == {}


def test_each_rank_gets_horovodruns_identity_variables():
    # Two hosts of 2 and 1 slots: local rank 1 runs on one host only.
    slots = [hosts.Slot("a", 0, 0, 2), hosts.Slot("a", 1, 1, 2), hosts.Slot("b", 2, 0, 1)]
    got = [horovod_habits.identity(s, slots) for s in slots]
    assert [(g["HOROVOD_RANK"], g["HOROVOD_SIZE"], g["HOROVOD_LOCAL_RANK"], g["HOROVOD_LOCAL_SIZE"])
            for g in got] == [("0", "3", "0", "2"), ("1", "3", "1", "2"), ("2", "3", "0", "1")]
    assert [(g["HOROVOD_CROSS_RANK"], g["HOROVOD_CROSS_SIZE"]) for g in got] == [("0", "2"), ("0", "1"), ("1", "2")]
