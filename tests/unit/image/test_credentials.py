"""Credentials are found in the files `docker login` and `podman login` write: inline entries under URL
keys, podman's auth file before docker's, repository keys the most specific. (Credential helpers,
which are programs: tests/integration/image/test_credential_helpers.py.)"""

from __future__ import annotations

from tests.support.docker_config import auth
from tests.support.docker_config import write_json
from vdk.plugin.ml_training.image.credentials import find_credentials


def test_inline_docker_config_with_url_keys(tmp_path):
    write_json(
        tmp_path / "docker-config" / "config.json",
        {
            "auths": {
                "https://index.docker.io/v1/": {"auth": auth("hubuser", "hubpass")},
                "registry.example.com": {"auth": auth("ada", "s3cret")},
                "http://127.0.0.1:5000": {"username": "local", "password": "pw"},
            }
        },
    )
    found = find_credentials("registry.example.com").credentials
    assert (found.username, found.password) == ("ada", "s3cret")
    assert "config.json" in found.source and "s3cret" not in repr(found)
    assert find_credentials("docker.io").credentials.username == "hubuser"
    assert find_credentials("registry-1.docker.io").credentials.username == "hubuser"
    assert find_credentials("127.0.0.1:5000").credentials.password == "pw"
    assert find_credentials("other.example.com").credentials is None


def test_podman_auth_file_comes_first_and_repository_keys_are_most_specific(tmp_path, monkeypatch):
    write_json(
        tmp_path / "docker-config" / "config.json", {"auths": {"registry.example.com": {"auth": auth("docker", "d")}}}
    )
    podman_file = tmp_path / "xdg-runtime" / "containers" / "auth.json"
    write_json(
        podman_file,
        {
            "auths": {
                "registry.example.com": {"auth": auth("podman", "p")},
                "registry.example.com/team-a": {"auth": auth("team-a-robot", "t")},
            }
        },
    )
    assert find_credentials("registry.example.com", "ml/job").credentials.username == "podman"
    assert find_credentials("registry.example.com", "team-a/job").credentials.username == "team-a-robot"
    explicit = tmp_path / "explicit.json"
    write_json(explicit, {"auths": {"registry.example.com": {"auth": auth("explicit", "e")}}})
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(explicit))
    assert find_credentials("registry.example.com").credentials.username == "explicit"
