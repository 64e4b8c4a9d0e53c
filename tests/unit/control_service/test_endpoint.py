"""Where the Control Service is and who asks (control_service/endpoint.py), read as the Control Service CLI reads
them: -u, else its variable, else what `vdk set-default -u` wrote; an API token needs its authorization URL."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.control_service import endpoint
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import teams


def test_the_url_comes_from_the_option_else_the_variable_else_the_defaults_file(monkeypatch, tmp_path):
    monkeypatch.setenv(teams.DEFAULTS_FOLDER_ENV, str(tmp_path))
    monkeypatch.delenv(endpoint.URL_VARIABLE, raising=False)
    assert endpoint.find_endpoint() is None
    path = teams.defaults_path()
    path.parent.mkdir(parents=True)
    path.write_text(f"[{teams.DEFAULTS_SECTION}]\nteam-name = ml\n{endpoint.DEFAULT_URL_OPTION} = http://saved/\n")
    saved = endpoint.find_endpoint()
    assert saved.url == "http://saved" and "vdk set-default -u" in saved.origin
    monkeypatch.setenv(endpoint.URL_VARIABLE, "https://env.example.com/")
    assert endpoint.find_endpoint() == endpoint.Endpoint("https://env.example.com", endpoint.URL_VARIABLE)
    assert endpoint.find_endpoint(" http://given ").url == "http://given"


def test_an_api_token_without_its_authorization_url_is_an_error_and_no_credentials_are_none(monkeypatch):
    monkeypatch.setattr(endpoint, "_control_cli_token", lambda: None)
    monkeypatch.delenv(endpoint.TOKEN_VARIABLE, raising=False)
    assert endpoint.access_token() is None
    monkeypatch.setenv(endpoint.TOKEN_VARIABLE, "refresh-token")
    monkeypatch.delenv(endpoint.TOKEN_URL_VARIABLE, raising=False)
    with pytest.raises(MLTrainingError, match=endpoint.TOKEN_URL_VARIABLE) as raised:
        endpoint.access_token()
    assert "refresh-token" not in raised.value.message


def test_ssl_verification_follows_the_cli_variable(monkeypatch):
    monkeypatch.setenv(endpoint.VERIFY_SSL_VARIABLE, "False")
    assert not endpoint.Endpoint("https://x", "-u").verify_ssl
    monkeypatch.delenv(endpoint.VERIFY_SSL_VARIABLE)
    assert endpoint.Endpoint("https://x", "-u").verify_ssl
