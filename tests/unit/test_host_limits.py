"""This machine's process limits as a container may have them (host_limits.py)."""

from vdk.plugin.ml_training.host_limits import HostLimits
from vdk.plugin.ml_training.host_limits import host_limits


def test_this_machine_s_limits_are_read():
    limits = host_limits()
    assert limits.open_files is None or 0 < limits.open_files <= 1 << 20
    assert limits.processes is None or limits.processes > 0


def test_the_ulimit_options_name_each_limit_there_is():
    assert HostLimits(20000, None, can_raise=False).ulimit_options() == ["--ulimit", "nofile=20000:20000"]
    assert HostLimits(None, None, can_raise=False).ulimit_options() == []
