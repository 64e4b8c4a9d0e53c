"""Where pip would look for packages, read without pip or uv running (image/package_index.py): pip's
configuration files in order, [install] over [global], PIP_* variables over both, handed to uv as its
own variables (uv reads neither) unless uv has its own settings; PIP_CONFIG_FILE=/dev/null means no
files. (A real uv install through pip.conf: tests/integration/image/test_package_index_uv.py.)"""

from __future__ import annotations

import os

from vdk.plugin.ml_training.dependencies.package_index import fingerprint
from vdk.plugin.ml_training.dependencies.package_index import pip_settings
from vdk.plugin.ml_training.dependencies.package_index import uv_config_files
from vdk.plugin.ml_training.dependencies.package_index import uv_environment


def pip_conf(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_pip_reads_files_in_order_install_over_global_and_the_environment_over_both(tmp_path):
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    pip_conf(
        tmp_path / "home" / ".pip" / "pip.conf",
        "[global]\nindex-url = https://old.example.com/simple\nfind-links = /wheels/a\n",
    )
    pip_conf(
        tmp_path / "xdg" / "pip" / "pip.conf",
        "[global]\nindex-url = https://mirror.example.com/simple\nextra-index-url = https://x.example.com/simple\n"
        "[install]\nfind-links =\n    /wheels/b\n    /wheels/c\n",
    )
    assert pip_settings(env) == {
        "index-url": ["https://mirror.example.com/simple"],  # the later file
        "extra-index-url": ["https://x.example.com/simple"],
        "find-links": ["/wheels/b", "/wheels/c"],  # [install] over [global]
    }
    extra = pip_conf(tmp_path / "extra.conf", "[global]\nextra-index-url = https://y.example.com/simple\n")
    env.update(PIP_CONFIG_FILE=str(extra), PIP_FIND_LINKS="/opt/wheels /more/wheels")
    assert pip_settings(env)["extra-index-url"] == ["https://y.example.com/simple"]
    assert uv_environment(env) == {
        "UV_DEFAULT_INDEX": "https://mirror.example.com/simple",
        "UV_INDEX": "https://y.example.com/simple",
        "UV_FIND_LINKS": "/opt/wheels,/more/wheels",  # uv: comma-separated
    }
    # uv's own settings win; PIP_CONFIG_FILE=/dev/null means no files at all (as for pip).
    assert "UV_FIND_LINKS" not in uv_environment({**env, "UV_FIND_LINKS": "/uv/wheels"})
    assert pip_settings({**env, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": ""}) == {}


def test_uv_s_configuration_files_are_the_system_s_the_user_s_and_the_nearest_project_s(tmp_path):
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "etc")}
    job = tmp_path / "projects" / "team" / "job"
    job.mkdir(parents=True)
    assert uv_config_files(env, job) == []
    system = pip_conf(tmp_path / "etc" / "uv" / "uv.toml", "[pip]\nindex-url = 'https://a.example.com/simple'\n")
    user = pip_conf(tmp_path / "home" / ".config" / "uv" / "uv.toml", "[[index]]\nurl = 'https://b.example.com'\n")
    above = pip_conf(tmp_path / "projects" / "uv.toml", "[[index]]\nurl = 'https://c.example.com/simple'\n")
    pip_conf(tmp_path / "projects" / "team" / "pyproject.toml", "[project]\nname = 'team'\n")  # no [tool.uv]: passed
    assert uv_config_files(env, job) == [system, user, above]
    nearer = pip_conf(tmp_path / "projects" / "team" / "pyproject.toml", "[project]\n[[tool.uv.index]]\nurl = 'x'\n")
    assert uv_config_files(env, job) == [system, user, nearer]
    assert uv_config_files({**env, "UV_CONFIG_FILE": str(above)}, job) == [above]  # in place of every other
    assert uv_config_files({**env, "UV_CONFIG_FILE": "../../uv.toml"}, job) == [job / "../../uv.toml"]
    assert uv_config_files({**env, "UV_NO_CONFIG": "1"}, job) == []
    assert uv_config_files({**env, "UV_NO_CONFIG": "0"}, job) == [system, user, nearer]


def test_the_fingerprint_changes_with_every_index_setting_that_reaches_uv_and_hides_credentials(tmp_path):
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "etc")}
    job = tmp_path / "job"
    job.mkdir()
    seen = {fingerprint(env, job)}
    assert fingerprint(env, job) in seen  # the same settings, the same fingerprint
    for name, value in (
        ("UV_DEFAULT_INDEX", "https://user:s3cret-token@mirror.example.com/simple"),
        ("UV_INDEX", "https://extra.example.com/simple"),
        ("UV_INDEX_URL", "https://legacy.example.com/simple"),
        ("UV_EXTRA_INDEX_URL", "https://legacy-extra.example.com/simple"),
        ("UV_FIND_LINKS", "/opt/wheels"),
        ("UV_NO_INDEX", "1"),
    ):
        env[name] = value
        seen.add(fingerprint(env, job))
    pyproject = pip_conf(job / "pyproject.toml", "[project]\nname = 'job'\n")
    seen.add(fingerprint(env, job))  # a pyproject.toml without [tool.uv] is no setting of uv's
    pyproject.write_text("[project]\nname = 'job'\n[tool.uv]\nindex-url = 'https://p.example.com/simple'\n")
    seen.add(fingerprint(env, job))
    pyproject.write_text("[project]\nname = 'renamed'\n[tool.uv]\nindex-url = 'https://p.example.com/simple'\n")
    seen.add(fingerprint(env, job))  # only the [tool.uv] tables count
    pip_conf(tmp_path / "home" / ".config" / "uv" / "uv.toml", "[[index]]\nurl = 'https://u.example.com'\n")
    seen.add(fingerprint(env, job))
    pip_conf(job / "uv.toml", "[[index]]\nurl = 'https://j.example.com'\n")  # before pyproject.toml in its directory
    seen.add(fingerprint(env, job))
    assert len(seen) == 1 + 6 + 1 + 1 + 1
    final = fingerprint(env, job)
    assert len(final) == 64 and set(final) <= set("0123456789abcdef")
    assert "s3cret" not in final and "mirror" not in final


def test_pip_s_settings_reach_the_fingerprint_as_uv_gets_them(tmp_path):
    env = {"HOME": str(tmp_path / "home"), "PIP_CONFIG_FILE": os.devnull}
    job = tmp_path
    plain = fingerprint({**env, **uv_environment(env)}, job)
    with_pip = {**env, "PIP_INDEX_URL": "https://mirror.example.com/simple"}
    assert fingerprint({**with_pip, **uv_environment(with_pip)}, job) != plain


def test_a_pyproject_s_tool_uv_table_is_read_as_toml_whatever_its_values_look_like(tmp_path):
    """Lines inside a value that look like a table's header do not end [tool.uv]; an empty one still counts (uv
    stops looking further up there)."""
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "etc")}
    job = tmp_path / "job"
    job.mkdir()
    table = "[tool.uv]\nconstraint-dependencies = [\n  [ 'looks-like-a-header' ],\n]\nindex-url = '{}'\n"
    pyproject = pip_conf(job / "pyproject.toml", table.format("https://one.example.com/simple"))
    one = fingerprint(env, job)
    pyproject.write_text(table.format("https://two.example.com/simple"))
    assert fingerprint(env, job) != one  # the value after the header-like line is part of the table
    above = pip_conf(tmp_path / "uv.toml", "[[index]]\nurl = 'https://a.example.com'\n")
    pyproject.write_text("[project]\nname = 'job'\n[tool.uv]\n")
    assert uv_config_files(env, job) == [pyproject]  # an empty [tool.uv]: the nearest settings, uv.toml above unread
    pyproject.write_text("[project]\nname = 'job'\n")
    assert uv_config_files(env, job) == [above]
    pyproject.write_text("[tool.uv\nnot toml")
    assert uv_config_files(env, job) == [above]
