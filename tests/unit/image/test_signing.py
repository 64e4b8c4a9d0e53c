"""Signing as cosign v3 does, checked by paths of its own: the DSSE PAE byte for byte, the bundle's fields, the
signature verified with `cryptography` directly; the keys cosign and openssl write, and their errors."""

import base64
import hashlib
import json

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.cosign_keys import cosign_key_pair
from vdk.plugin.ml_training.image import signing
from vdk.plugin.ml_training.image.signing import SigningError

STATEMENT = b'{"_type":"https://in-toto.io/Statement/v1","predicateType":"x","predicate":{},"subject":[]}'


def pem(private, password: bytes | None = None) -> bytes:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def test_the_pae_is_dsse_v1s_encoding():
    assert signing.pae("application/vnd.in-toto+json", b"hello world") == (
        b"DSSEv1 28 application/vnd.in-toto+json 11 hello world"
    )
    assert signing.pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"  # lengths in bytes


def test_a_bundle_verifies_over_the_pae_with_the_public_key_and_is_the_same_when_signed_again():
    private = ec.generate_private_key(ec.SECP256R1())
    key = signing.load_private_key(pem(private), "a test key")
    bundle = key.sign(STATEMENT)
    document = json.loads(bundle)
    assert document["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    der = private.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert document["verificationMaterial"] == {
        "publicKey": {"hint": base64.b64encode(hashlib.sha256(der).digest()).decode()}
    }
    envelope = document["dsseEnvelope"]
    assert (
        base64.b64decode(envelope["payload"]) == STATEMENT and envelope["payloadType"] == "application/vnd.in-toto+json"
    )
    (entry,) = envelope["signatures"]
    assert entry["keyid"] == ""
    signed = b"DSSEv1 28 application/vnd.in-toto+json %d %s" % (len(STATEMENT), STATEMENT)
    private.public_key().verify(base64.b64decode(entry["sig"]), signed, ec.ECDSA(hashes.SHA256()))
    with pytest.raises(InvalidSignature):
        private.public_key().verify(base64.b64decode(entry["sig"]), signed + b" ", ec.ECDSA(hashes.SHA256()))
    assert key.sign(STATEMENT) == bundle  # RFC 6979: nothing new to upload when nothing changed
    assert signing.verify(bundle, private.public_key()) == STATEMENT


def test_a_tampered_payload_or_another_key_is_refused():
    private = ec.generate_private_key(ec.SECP256R1())
    bundle = json.loads(signing.load_private_key(pem(private), "k").sign(STATEMENT))
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(STATEMENT.replace(b'"x"', b'"y"')).decode()
    with pytest.raises(SigningError, match="does not verify"):
        signing.verify(json.dumps(bundle).encode(), private.public_key())
    good = signing.load_private_key(pem(private), "k").sign(STATEMENT)
    with pytest.raises(SigningError, match="does not verify"):
        signing.verify(good, ec.generate_private_key(ec.SECP256R1()).public_key())
    with pytest.raises(SigningError, match="not a Sigstore bundle"):
        signing.verify(b"{}", private.public_key())


def test_keys_from_the_variable_a_file_or_its_text_plain_encrypted_or_cosigns(tmp_path):
    private = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "plain.pem").write_bytes(pem(private))
    (tmp_path / "locked.pem").write_bytes(pem(private, b"s3cret"))
    assert signing.configured_key({}) is None
    by_file = signing.configured_key({"VDK_ML_TRAINING_SIGNING_KEY": str(tmp_path / "plain.pem")})
    by_text = signing.configured_key({"VDK_ML_TRAINING_SIGNING_KEY": pem(private).decode()})
    locked = signing.configured_key(
        {"VDK_ML_TRAINING_SIGNING_KEY": str(tmp_path / "locked.pem"), "COSIGN_PASSWORD": "s3cret"}
    )
    assert by_file.hint == by_text.hint == locked.hint == signing.key_hint(private.public_key())
    assert by_file.source == f"the file {tmp_path / 'plain.pem'} ($VDK_ML_TRAINING_SIGNING_KEY)"
    assert by_text.source == "the text of $VDK_ML_TRAINING_SIGNING_KEY"
    cosign_key, cosign_pub, cosign_private = cosign_key_pair(tmp_path / "cosign", "hello")
    key = signing.configured_key({"VDK_ML_TRAINING_SIGNING_KEY": str(cosign_key), "COSIGN_PASSWORD": "hello"})
    assert key.public_pem == cosign_pub.read_bytes()
    assert signing.verify(key.sign(STATEMENT), signing.load_public_key(cosign_pub)) == STATEMENT


def test_every_key_problem_says_where_the_key_was_and_never_shows_it(tmp_path):
    cosign_key, _, _ = cosign_key_pair(tmp_path, "hello")
    text = cosign_key.read_text()
    cases = {
        "is not set": {"VDK_ML_TRAINING_SIGNING_KEY": str(cosign_key)},
        "does not open the cosign key": {"VDK_ML_TRAINING_SIGNING_KEY": str(cosign_key), "COSIGN_PASSWORD": "no"},
        "cannot be read": {"VDK_ML_TRAINING_SIGNING_KEY": str(tmp_path / "missing.key")},
        "is not a PEM private key": {"VDK_ML_TRAINING_SIGNING_KEY": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END"},
    }
    for said, environ in cases.items():
        with pytest.raises(SigningError) as raised:
            signing.configured_key(environ)
        assert said in str(raised.value) and text[60:100] not in str(raised.value) and "hello" not in str(raised.value)
    rsa_free = ec.generate_private_key(ec.SECP384R1())
    with pytest.raises(SigningError, match="not an ECDSA P-256 key"):
        signing.load_private_key(pem(rsa_free), "a P-384 key")
    with pytest.raises(SigningError, match="is not a PEM public key"):
        (tmp_path / "bad.pub").write_text("nope")
        signing.load_public_key(tmp_path / "bad.pub")
