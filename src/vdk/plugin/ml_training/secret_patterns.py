"""Credentials as they appear in text: the token formats their issuers document, PEM private keys, and the
`user:password@` or `?access_token=` of URLs. Written once, used by every path: config.ini's values and the
training arguments are refused with them (job/literal_secrets.py), git remotes are cleaned with them before
they reach an image, a run or its record (source/audit.py), and every error message of the plugin is
redacted with them (errors.py). Beside them, what else a message must not show as it is: control characters
(`printable`). Standard library only."""

from __future__ import annotations

import re
from urllib.parse import urlsplit
from urllib.parse import urlunsplit

# A PEM private key's header (`-----BEGIN RSA PRIVATE KEY-----`): in text, and in files' bytes (source/content_scan.py).
PEM_PRIVATE_KEY = r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
# The words that name a credential: in options (`--hf-token`, `--api_key`, as whole words: not `--max-tokens`,
# `--tokenizer`) and in variable names (`HF_TOKEN`).
SECRET_WORDS = r"token(?!iz)|secret|password|passwd|api[-_]?key|access[-_]?key|private[-_]?key|credentials?"
_SECRET_OPTION_NAME = rf"--?(?:[a-z0-9]+[-_])*(?:{SECRET_WORDS})(?:[-_][a-z0-9]+)*"
_SECRET_OPTION = re.compile(rf"^{_SECRET_OPTION_NAME}$", re.I)
_SECRET_NAME = re.compile(SECRET_WORDS, re.I)

TOKEN_FORMATS = {
    "a Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    "a GitHub token": re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})\b"),
    "a GitLab token": re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"),
    "an AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "an OpenAI-style API key": re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"),
    "a Slack token": re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"),
    "a Google API key": re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
    "an npm token": re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"),
    "a PyPI token": re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    "a JSON Web Token": re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    "a private key": re.compile(PEM_PRIVATE_KEY),
}
# A word of text that may be a URL (what stops it: spaces, quotes, brackets, commas).
_WORD = re.compile(r"[^\s'\"<>()\[\]{},;]+")
# The names of query parameters that carry credentials (GitLab's and GitHub's access tokens, Azure's SAS
# signatures, `?password=`...).
_CREDENTIAL_PARAMETER = re.compile(r"token|secret|passw|sig|auth|credential|key", re.I)
REDACTED = "***"
# The value of an option named like a credential (`--password=VALUE`, `--hf-token VALUE`), as whole words: not
# `--max-tokens 512`. Redacted in messages whatever it looks like (refused only when it looks like a credential).
_SECRET_OPTION_VALUE = re.compile(rf"(?<![\w-])({_SECRET_OPTION_NAME})(=|[ \t]+)(?![-'\"\s])([^\s'\"]+)", re.I)


def is_secret_option(option: str) -> bool:
    """Whether a command-line option is named like a credential (`--hf-token`, `--api_key`; not `--max-tokens`)."""
    return bool(_SECRET_OPTION.match(option))


def names_a_secret(name: str) -> bool:
    """Whether a variable's name says it holds a credential (`HF_TOKEN`, `DB_PASSWORD`, `AWS_SECRET_ACCESS_KEY`)."""
    return bool(_SECRET_NAME.search(name))


# What a terminal would act on instead of showing: C0 controls but newline and tab (ESC starts escape sequences
# that move the cursor, retitle the window, rewrite the screen; CR overwrites a line), DEL, C1 controls (U+009B is
# an escape sequence's introducer by itself) and the bidirectional overrides that reorder what is shown.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` as it may be shown on a terminal: every control character that text from a user or a cluster may
    carry (a trial's parameter, a pod's message) shown escaped (`\\x1b`, `\\u202e`); newlines and tabs kept."""
    if not text or not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def token_kind(text: str) -> str | None:
    """What kind of credential `text` holds, by the documented formats ("a GitHub token"), or None."""
    for kind, pattern in TOKEN_FORMATS.items():
        if pattern.search(text):
            return kind
    return None


def url_credentials(text: str) -> str | None:
    """What credential a URL in `text` carries (`user:password@`, an `access_token=` parameter), or None."""
    for match in _WORD.finditer(text):
        _, password, parameters = _credentials_in(match.group())
        if password:
            return "a password in a URL (user:password@)"
        if parameters:
            return "a credential in a URL's query (such as ?access_token=)"
    return None


def public_url(url: str) -> str:
    """A remote URL as it may be published: without user or password (`https://user:token@host/...`,
    `https://token@host/...`, `user:token@host:path`), query or fragment (`?access_token=...`)."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme and parts.netloc:
        netloc = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    # scp-like: [user@]host:path; a user with a password, or a user that is itself a token, goes
    user, at, rest = url.partition("@")
    if at and (":" in user or token_kind(user) or len(user) > 20):
        url = rest
    return url.split("?", 1)[0].split("#", 1)[0]


def redact(text: str) -> str:
    """`text` with every credential it shows replaced by ***: tokens of the documented formats, the values of
    options named like credentials, the password of `user:password@` URLs, and credential parameters of URLs'
    queries. Linear in the length of `text`."""
    if not text:
        return text
    for pattern in TOKEN_FORMATS.values():
        text = pattern.sub(REDACTED, text)
    text = _SECRET_OPTION_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    if "@" not in text and "=" not in text:
        return text
    return _WORD.sub(lambda match: _credentials_in(match.group())[0], text)


def _credentials_in(word: str) -> tuple[str, str, list[str]]:
    """(`word` redacted, its URL password, its credential query parameters) for one word of text:
    `scheme://user:password@host/...`, scp-like `user:password@host:path`, `...?access_token=VALUE&...`."""
    password = ""
    if "@" in word:
        scheme = word.find("://")
        start = scheme + 3 if scheme >= 0 else 0
        slash = word.find("/", start)
        authority = word[start : slash if slash >= 0 else len(word)]
        userinfo, at, host = authority.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if at and colon and user and password and host[:1].isalnum():
            word = f"{word[:start]}{user}:{REDACTED}@{host}{word[start + len(authority) :]}"
        else:
            password = ""
    parameters: list[str] = []
    if "=" in word and ("?" in word or "&" in word):
        head, mark, query = word.partition("?") if "?" in word else ("", "", word)
        pieces = []
        for piece in query.split("&"):
            name, equals, value = piece.partition("=")
            if equals and value and _CREDENTIAL_PARAMETER.search(name):
                parameters.append(name)
                piece = f"{name}={REDACTED}"
            pieces.append(piece)
        word = head + mark + "&".join(pieces)
    return word, password, parameters
