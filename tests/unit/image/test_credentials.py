"""Credentials are found where `docker login` / `podman login` and credential helpers keep them."""

from __future__ import annotations

import base64
import json

from vdk.plugin.ml_training.image.credentials import find_credentials


def auth(user, password):
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


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
