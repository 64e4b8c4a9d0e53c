"""Credentials as they appear in text (secret_patterns.py): found, cleaned from URLs, and redacted from every
error message of the plugin."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.secret_patterns import is_secret_option
from vdk.plugin.ml_training.secret_patterns import names_a_secret
from vdk.plugin.ml_training.secret_patterns import public_url
from vdk.plugin.ml_training.secret_patterns import redact
from vdk.plugin.ml_training.secret_patterns import token_kind
from vdk.plugin.ml_training.secret_patterns import url_credentials

GITHUB = "ghp_" + "a1B2c3D4e5" * 4
GITLAB = "glpat-" + "x1y2z3" * 4


@pytest.mark.parametrize(
    "remote, public",
    [
        (f"https://ci:{GITHUB}@github.com/org/jobs.git", "https://github.com/org/jobs.git"),
        (f"https://{GITHUB}@github.com/org/jobs.git", "https://github.com/org/jobs.git"),
        (f"https://gitlab.example.com/ml/jobs.git?access_token={GITLAB}", "https://gitlab.example.com/ml/jobs.git"),
        ("https://gitlab.example.com/ml/jobs.git#token=abc", "https://gitlab.example.com/ml/jobs.git"),
        (f"oauth2:{GITLAB}@gitlab.example.com:ml/jobs.git", "gitlab.example.com:ml/jobs.git"),
        (f"{GITHUB}@github.com:org/jobs.git", "github.com:org/jobs.git"),
        ("git@github.com:org/jobs.git", "git@github.com:org/jobs.git"),  # a user, no secret: kept
        ("ssh://git@github.com/org/jobs.git", "ssh://github.com/org/jobs.git"),
        ("/srv/git/jobs.git", "/srv/git/jobs.git"),
    ],
)
def test_a_remote_is_published_without_its_credentials(remote, public):
    assert public_url(remote) == public


def test_credentials_are_found_by_their_format_and_in_urls():
    assert token_kind(f"--token {GITHUB}") == "a GitHub token"
    assert token_kind("-----BEGIN EC PRIVATE KEY-----") == "a private key"
    assert token_kind("learning rate 3e-4, sk-learn") is None
    assert url_credentials("https://bob:hunter2@registry.example.com/ml") == "a password in a URL (user:password@)"
    assert url_credentials("https://host/x?access_token=abc&page=2").startswith("a credential in a URL's query")
    for innocent in ("git@github.com:org/x.git", "ada@example.com at 12:30", "127.0.0.1:5000/ml@sha256:ab12"):
        assert url_credentials(innocent) is None, innocent


def test_no_error_message_shows_a_credential_whatever_put_it_there(tmp_path):
    error = MLTrainingError(
        f"cannot push to https://bob:hunter2@registry.example.com/ml with {GITHUB}",
        f"check https://git.example.com/x.git?private_token={GITLAB}&ref=main",
    )
    assert "hunter2" not in str(error) and GITHUB not in str(error) and GITLAB not in str(error)
    assert error.problem == "cannot push to https://bob:***@registry.example.com/ml with ***"
    assert error.fix == "check https://git.example.com/x.git?private_token=***&ref=main"
    config = JobConfigError(
        tmp_path / "config.ini", f"'{GITHUB}' is not a number", "write a number", "ml-training", "x"
    )
    assert GITHUB not in config.message


@pytest.mark.parametrize(
    "text, shown",
    [
        ("--password=hunter2 --lr 3e-4", "--password=*** --lr 3e-4"),
        ("train.py --hf-token abc123 --epochs 3", "train.py --hf-token *** --epochs 3"),
        ("-token=q and --db_password s3", "-token=*** and --db_password ***"),
        ("--password-file /run/secrets/p", "--password-file ***"),  # when in doubt, hidden
        (
            "--max-tokens 512 --tokenizer bert --secret --verbose",
            "--max-tokens 512 --tokenizer bert --secret --verbose",
        ),
    ],
)
def test_the_values_of_options_named_like_credentials_are_never_shown(text, shown):
    assert redact(text) == shown


@pytest.mark.parametrize("option", ["--hf-token", "--api_key", "-password", "--aws-secret-access-key", "--credentials"])
def test_options_and_variables_named_like_credentials_are_known_by_one_list_of_words(option):
    assert is_secret_option(option) and redact(f"{option}=abc123") == f"{option}=***"
    variable = option.lstrip("-").replace("-", "_").upper()
    assert names_a_secret(variable)


@pytest.mark.parametrize("option", ["--max-tokens", "--tokenizer", "--keyboard", "--secretary-name-x"])
def test_options_that_only_contain_such_a_word_are_not_credentials(option):
    assert not is_secret_option(option) and redact(f"{option}=512") == f"{option}=512"


def test_text_shown_on_a_terminal_has_its_control_characters_escaped(capsys):
    from vdk.plugin.ml_training.errors import MLTrainingError
    from vdk.plugin.ml_training.ops.reporting import StderrReporter
    from vdk.plugin.ml_training.secret_patterns import printable

    assert printable("lr=\x1b]0;owned\x07 a\tb\nc\r\x9b\u202ez") == "lr=\\x1b]0;owned\\x07 a\tb\nc\\r\\x9b\\u202ez"
    assert printable("plain text, naïve — ünïcode") == "plain text, naïve — ünïcode"
    error = MLTrainingError("pod said \x1b[2J", "fix \x1b[31mred")
    assert error.problem == "pod said \\x1b[2J" and error.fix == "fix \\x1b[31mred"
    StderrReporter().note("note: the server said \x1b]0;owned\x07")  # a use case's note, as a notebook shows it
    assert capsys.readouterr().err == "note: the server said \\x1b]0;owned\\x07\n"
