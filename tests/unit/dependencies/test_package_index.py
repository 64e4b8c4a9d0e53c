"""Where pip would look for packages, read without pip or uv running (image/package_index.py): pip's
configuration files in order, [install] over [global], PIP_* variables over both, handed to uv as its
own variables (uv reads neither) unless uv has its own settings; PIP_CONFIG_FILE=/dev/null means no
files. (A real uv install through pip.conf: tests/integration/image/test_package_index_uv.py.)"""

from __future__ import annotations

import os

from vdk.plugin.ml_training.dependencies.package_index import pip_settings
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
