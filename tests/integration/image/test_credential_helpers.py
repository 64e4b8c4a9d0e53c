"""Credentials kept by credential helpers (a docker-credential-<name> program on the PATH): credHelpers per
registry, then credsStore, then the inline entries; a helper that is not installed is noted, not fatal.
(The config files alone: tests/unit/image/test_credentials.py.)"""

from __future__ import annotations

import json
import os

from tests.support.docker_config import auth
from tests.support.docker_config import write_json
from vdk.plugin.ml_training.image.credentials import find_credentials


def fake_helper(bin_dir, name, answers):
    """A docker-credential-<name> that answers `get` from a table (and logs what it was asked)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / f"docker-credential-{name}"
    table = json.dumps(answers)
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"answers = json.loads({table!r})\n"
        "server = sys.stdin.read().strip()\n"
        f"open({str(bin_dir / (name + '.log'))!r}, 'a').write(sys.argv[1] + ' ' + server + '\\n')\n"
        "if server not in answers:\n"
        "    print('credentials not found in native keychain'); sys.exit(1)\n"
        "user, secret = answers[server]\n"
        "print(json.dumps({'ServerURL': server, 'Username': user, 'Secret': secret}))\n"
    )
    script.chmod(0o755)
    return script


def test_cred_helpers_and_creds_store(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    fake_helper(bin_dir, "corp", {"registry.example.com": ["helper-user", "helper-secret"]})
    fake_helper(bin_dir, "desktop", {"https://index.docker.io/v1/": ["store-user", "store-secret"]})
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    write_json(
        tmp_path / "docker-config" / "config.json",
        {
            "credHelpers": {"registry.example.com": "corp"},
            "credsStore": "desktop",
            "auths": {"fallback.example.com": {"auth": auth("inline", "i")}},
        },
    )
    via_helper = find_credentials("registry.example.com").credentials
    assert (via_helper.username, via_helper.password) == ("helper-user", "helper-secret")
    assert "credHelpers: corp" in via_helper.source
    via_store = find_credentials("docker.io").credentials
    assert (via_store.username, via_store.password) == ("store-user", "store-secret")
    assert "get https://index.docker.io/v1/" in (bin_dir / "desktop.log").read_text()
    # The store does not know this host: the inline entry is used.
    assert find_credentials("fallback.example.com").credentials.username == "inline"


def test_a_missing_helper_is_noted_not_fatal(tmp_path):
    write_json(tmp_path / "docker-config" / "config.json", {"credHelpers": {"registry.example.com": "nosuch"}})
    lookup = find_credentials("registry.example.com")
    assert lookup.credentials is None
    assert any("docker-credential-nosuch" in note and "not installed" in note for note in lookup.notes)
    assert str(tmp_path / "docker-config" / "config.json") in lookup.searched
