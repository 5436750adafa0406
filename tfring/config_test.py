import pytest

from tfring.config import Config


def test_defaults():
    c = Config.resolve(environ={})
    assert (c.timeout, c.rendezvous_timeout, c.transport, c.single_copy, c.fusion_threshold_bytes) == (
        60.0, 120.0, "auto", True, 64 << 20)


def test_arguments_beat_environment_beats_defaults():
    env = {"TFRING_TIMEOUT": "5", "TFRING_TRANSPORT": "tcp", "TFRING_FUSION_THRESHOLD": "0", "TFRING_SINGLE_COPY": "0"}
    c = Config.resolve(environ=env, timeout=9)
    assert c.timeout == 9.0 and c.transport == "tcp" and c.fusion_threshold_bytes == 0 and c.single_copy is False


@pytest.mark.parametrize("env,needle", [
    ({"TFRING_TIMEOUT": "soon"}, "TFRING_TIMEOUT"),
    ({"TFRING_TIMEOUT": "-1"}, "timeout"),
    ({"TFRING_TRANSPORT": "udp"}, "transport"),
    ({"TFRING_FUSION_THRESHOLD": "1.5"}, "TFRING_FUSION_THRESHOLD"),
    ({"TFRING_SINGLE_COPY": "maybe"}, "TFRING_SINGLE_COPY"),
])
def test_bad_values_name_the_variable(env, needle):
    with pytest.raises(ValueError, match=needle):
        Config.resolve(environ=env)


def test_unknown_option():
    with pytest.raises(TypeError, match="unknown tfring option"):
        Config.resolve(environ={}, timeoutt=3)


def test_every_setting_has_its_facts_in_one_place():
    from tfring.config import ENVIRONMENT
    from tfring.config import settings_table

    rows = settings_table()
    assert [r[1] for r in rows][:6] == ["timeout", "rendezvous_timeout", "transport", "single_copy",
                                         "fusion_threshold_bytes", "advertise_host"]
    assert ENVIRONMENT["TFRING_TIMEOUT"] == "timeout" and "store_request_timeout" not in ENVIRONMENT.values()


def test_the_record_for_the_core_is_complete_and_typed():
    from tfring.launch.cluster import ClusterInfo

    c = Config.resolve(environ={}, store_request_timeout=5, single_copy=False, fusion_threshold_bytes=1e3)
    job = ClusterInfo(rank=1, size=2, local_rank=1, local_size=2, store_host="10.0.0.1", store_port=4242,
                      secret="s", job_id="j")
    record = dict(line.split("=", 1) for line in c.record(job).splitlines())
    assert record == {"rank": "1", "size": "2", "local_rank": "1", "local_size": "2", "store_host": "10.0.0.1",
                      "store_port": "4242", "secret": "s", "job_id": "j", "timeout": "60.0",
                      "rendezvous_timeout": "120.0", "transport": "auto", "single_copy": "0",
                      "fusion_threshold_bytes": "1000", "advertise_host": "", "store_request_timeout": "5.0",
                      "store_auth_timeout": "10.0", "store_frame_timeout": "30.0", "mixed_ring": "1",
                      "host_id": "", "allreduce_algorithm": "auto", "timeline": "", "stall_warning": "10.0"}
    assert "bucket_bytes" not in record  # RingStrategy's, not the core's


def test_a_job_of_several_ranks_needs_the_store_port():
    from tfring.launch.cluster import ClusterInfo

    with pytest.raises(ValueError, match="a job of 2 ranks needs the port of rank 0's store"):
        Config.resolve(environ={}).record(ClusterInfo(rank=0, size=2, store_port=0))


@pytest.mark.parametrize("option,value,needle", [
    ("store_frame_timeout", 0, "store_frame_timeout must be a number of seconds > 0, got 0"),
    ("fusion_threshold_bytes", 1.5, "fusion_threshold_bytes must be a whole number of bytes >= 0, got 1.5"),
    ("single_copy", "yes", "single_copy must be 0 or 1, got 'yes'"),
    ("advertise_host", "a b", "advertise_host must be text without spaces"),
    ("allreduce_algorithm", "tree", "allreduce_algorithm must be 'auto', 'ring' or 'hierarchical', got 'tree'"),
    ("timeout", True, "timeout must be a number of seconds > 0, got True"),
    ("timeout", float("inf"), "timeout must be a number of seconds > 0, got inf"),
])
def test_bad_arguments_name_the_setting(option, value, needle):
    with pytest.raises(ValueError, match=needle):
        Config.resolve(environ={}, **{option: value})


def test_host_id_reaches_the_record_from_its_variable():
    from tfring.launch.cluster import ClusterInfo

    job = ClusterInfo(rank=0, size=1)
    record = dict(line.split("=", 1) for line in Config.resolve(environ={}).record(job).splitlines())
    assert record["host_id"] == ""  # detect
    c = Config.resolve(environ={"TFRING_HOST_ID": "rack4-node7"})
    record = dict(line.split("=", 1) for line in c.record(job).splitlines())
    assert c.host_id == "rack4-node7" and record["host_id"] == "rack4-node7"
    assert Config.resolve(environ={"TFRING_HOST_ID": "rack4-node7"}, host_id="node8").host_id == "node8"


@pytest.mark.parametrize("environ,arguments,needle", [
    ({"TFRING_HOST_ID": "rack 4"}, {}, r"TFRING_HOST_ID \(host_id\) must be text without spaces, got 'rack 4'"),
    ({"TFRING_HOST_ID": "rack4\t"}, {}, r"TFRING_HOST_ID \(host_id\) must be text without spaces"),
    ({}, {"host_id": "a b"}, "host_id must be text without spaces, got 'a b'"),
    ({}, {"host_id": "a\nb"}, "host_id must be text without spaces"),
])
def test_host_id_refuses_whitespace(environ, arguments, needle):
    # The identity travels in the core's space-separated rendezvous record.
    with pytest.raises(ValueError, match=needle):
        Config.resolve(environ=environ, **arguments)


def test_the_launcher_sets_settings_by_their_declared_names():
    from tfring.config import ENVIRONMENT
    from tfring.launch import cluster

    assert ENVIRONMENT[cluster.ADVERTISE_HOST] == "advertise_host"
    assert ENVIRONMENT[cluster.HOST_ID] == "host_id"
    assert ENVIRONMENT[cluster.TIMEOUT] == "timeout"


def test_the_stall_warning_may_be_off_but_not_negative():
    assert Config.resolve(environ={"TFRING_STALL_WARNING": "0"}).stall_warning == 0.0
    assert Config.resolve(environ={}, stall_warning=2.5).stall_warning == 2.5
    with pytest.raises(ValueError, match=r"stall_warning must be a number of seconds >= 0 \(0: off\), got -1"):
        Config.resolve(environ={}, stall_warning=-1)


def test_bucket_bytes_is_a_size_or_auto():
    assert Config.resolve(environ={"TFRING_BUCKET_BYTES": "auto"}).bucket_bytes == "auto"
    assert Config.resolve(environ={"TFRING_BUCKET_BYTES": "1048576"}).bucket_bytes == 1 << 20
    assert Config.resolve(environ={}, bucket_bytes="auto").bucket_bytes == "auto"
    with pytest.raises(ValueError, match=r"TFRING_BUCKET_BYTES.*a whole number of bytes >= 0, or 'auto'"):
        Config.resolve(environ={"TFRING_BUCKET_BYTES": "fast"})
    with pytest.raises(ValueError, match=r"bucket_bytes must be a whole number of bytes >= 0, or 'auto', got 'best'"):
        Config.resolve(environ={}, bucket_bytes="best")
