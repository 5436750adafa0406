"""Helpers a Horovod or torchrun user reaches for: is_chief, print0, RankFilter, broadcast/allgather_object."""

import json

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import json, logging, sys
import tfring

tfring.print0("ONLY-ON-CHIEF", tfring.is_chief())
print("CHIEF", tfring.rank(), tfring.is_chief())
handler = logging.StreamHandler(sys.stdout)
handler.addFilter(tfring.RankFilter())
log = logging.getLogger("user")
log.addHandler(handler)
log.setLevel(logging.INFO)
log.info("INFO-LINE")
log.warning("WARN-LINE")

mine = {"rank": tfring.rank(), "files": ["a"] * tfring.rank(), "nested": {"x": [1.5, None, True]}}
print("BCAST", json.dumps(tfring.broadcast_object(mine if tfring.rank() == 1 else None, root_rank=1)))
print("GATHER", json.dumps(tfring.allgather_object(mine)))
print("EMPTY", json.dumps(tfring.allgather_object("" if tfring.rank() else [])))
for case in ("unserialisable", "too_big"):
    try:
        if case == "unserialisable":
            tfring.allgather_object(object() if tfring.rank() == 2 else 1)
        else:
            tfring.broadcast_object("x" * 100, max_bytes=50)
    except ValueError as e:
        print("ERROR", case, e)
deep = []
for _ in range(100000):
    deep = [deep]
hostile = {
    "root_disagrees": lambda: tfring.broadcast_object(tfring.rank(), root_rank=tfring.rank() % 2),
    "too_deep": lambda: tfring.allgather_object(deep if tfring.rank() == 1 else 1),
    "int_key": lambda: tfring.allgather_object({1: "a"} if tfring.rank() == 0 else {}),
    "max_bytes_disagree": lambda: tfring.allgather_object(1, max_bytes=100 + tfring.rank()),
}
for case, call in hostile.items():
    try:
        print("HOSTILE", case, "returned", json.dumps(call()))
    except ValueError as e:
        print("HOSTILE", case, "error", e)
print("ERROR-KEY", json.dumps(tfring.allgather_object({"__tfring_object_error__": "mine"})))
print("AFTER", tfring.allgather_object(tfring.rank()))  # the ranks are still in step
# Pickled (Horovod's habit): any picklable value, signed with the job secret.
print("PICKLED", tfring.broadcast_object({0: (1, b"x"), "s": {2}} if tfring.rank() == 2 else None, root_rank=2,
                                         serializer="pickle") == {0: (1, b"x"), "s": {2}},
      tfring.allgather_object((tfring.rank(), {tfring.rank()}), serializer="pickle"))
try:
    tfring.allgather_object(1, serializer="pickle" if tfring.rank() else "json")
except ValueError as e:
    print("SERIALIZERS", e)
'''


def test_helpers_on_three_ranks():
    proc = run_job(3, SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(3):
        lines = rank_lines(proc.stdout, rank)
        assert ("ONLY-ON-CHIEF True" in lines) == (rank == 0)
        assert f"CHIEF {rank} {rank == 0}" in lines
        assert ("INFO-LINE" in lines) == (rank == 0)
        assert ("WARN-LINE" if rank == 0 else f"[rank {rank}] WARN-LINE") in lines
        bcast = json.loads(next(l for l in lines if l.startswith("BCAST"))[6:])
        assert bcast == {"rank": 1, "files": ["a"], "nested": {"x": [1.5, None, True]}}
        gathered = json.loads(next(l for l in lines if l.startswith("GATHER"))[7:])
        assert [g["rank"] for g in gathered] == [0, 1, 2] and gathered[2]["files"] == ["a", "a"]
        assert json.loads(next(l for l in lines if l.startswith("EMPTY"))[6:]) == [[], "", ""]
        errors = [l for l in lines if l.startswith("ERROR")]
        assert "cannot be sent as json" in errors[0] and "(on rank 2)" in errors[0], errors
        assert "over the limit of 50 (max_bytes)" in errors[1], errors
        hostile = {l.split(" ", 2)[1]: l.split(" ", 2)[2] for l in lines if l.startswith("HOSTILE")}
        assert hostile["root_disagrees"].startswith("error") and "rank 0 passed root_rank=0 but rank 1 passed " \
            "root_rank=1" in hostile["root_disagrees"], hostile
        assert hostile["too_deep"].startswith("error") and "RecursionError" in hostile["too_deep"] and \
            "(on rank 1)" in hostile["too_deep"], hostile
        assert hostile["int_key"].startswith("error") and "a dict key is 1 (int)" in hostile["int_key"] and \
            "(on rank 0)" in hostile["int_key"], hostile
        assert hostile["max_bytes_disagree"].startswith("error") and "max_bytes=100 but rank 1 passed max_bytes=101" \
            in hostile["max_bytes_disagree"], hostile
        assert json.loads(next(l for l in lines if l.startswith("ERROR-KEY"))[10:]) == \
            [{"__tfring_object_error__": "mine"}] * 3  # a user's dict, not an error
        assert "AFTER [0, 1, 2]" in lines
        assert "PICKLED True [(0, {0}), (1, {1}), (2, {2})]" in lines
        assert any(l.startswith("SERIALIZERS") and "serializer (0: json, 1: pickle)=0 but rank 1" in l
                   for l in lines), lines
