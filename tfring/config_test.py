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
