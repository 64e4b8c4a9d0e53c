"""Signing what is attached to an image, as cosign v3 does: the in-toto statement in a DSSE envelope, signed with
ECDSA P-256 / SHA-256 over the envelope's PAE, in a Sigstore bundle v0.3 that names the key by its hint (no
certificate, no transparency-log entry: `cosign verify-attestation --key cosign.pub --insecure-ignore-tlog`).

The key is a secret: it is read from the file or the text of $VDK_ML_TRAINING_SIGNING_KEY (never from config.ini),
a PEM private key (`EC PRIVATE KEY` or PKCS#8 `PRIVATE KEY`) or a cosign key pair's `cosign.key` (encrypted: NaCl
secretbox under a scrypt key of $COSIGN_PASSWORD, cosign's convention). Only its public half and hint leave this
module; no message names more than where the key was read from. Signatures are deterministic (RFC 6979): the same
statement signed again gives the same bundle.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.errors import MLTrainingError

SIGNING_KEY_ENV = "VDK_ML_TRAINING_SIGNING_KEY"
PASSWORD_ENV = "COSIGN_PASSWORD"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
_ENCRYPTED_PEM_TYPES = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")


class SigningError(MLTrainingError):
    """The signing key cannot be used, or a signature does not verify."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed (lengths in bytes, decimal)."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True)
class SigningKey:
    private: Any  # cryptography's EllipticCurvePrivateKey
    source: str  # where it was read from, for messages: "the file ~/.keys/cosign.key ($VDK_ML_TRAINING_SIGNING_KEY)"

    @property
    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def hint(self) -> str:
        return key_hint(self.private.public_key())

    def sign(self, statement: bytes) -> bytes:
        """The Sigstore bundle (v0.3 JSON) of `statement` signed with this key."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        signature = self.private.sign(
            pae(IN_TOTO_PAYLOAD, statement), ec.ECDSA(hashes.SHA256(), deterministic_signing=True)
        )
        bundle = {
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {"publicKey": {"hint": self.hint}},
            "dsseEnvelope": {
                "payload": base64.b64encode(statement).decode(),
                "payloadType": IN_TOTO_PAYLOAD,
                "signatures": [{"sig": base64.b64encode(signature).decode(), "keyid": ""}],
            },
        }
        return json.dumps(bundle, sort_keys=True, separators=(",", ":")).encode()


def key_hint(public_key: Any) -> str:
    """What cosign writes as a bundle's key hint: base64 of the sha256 of the key's DER SubjectPublicKeyInfo."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def configured_key(environ: Mapping[str, str] | None = None) -> SigningKey | None:
    """The key of $VDK_ML_TRAINING_SIGNING_KEY (a file, or the PEM itself), None when it is not set."""
    environ = os.environ if environ is None else environ
    value = (environ.get(SIGNING_KEY_ENV) or "").strip()
    if not value:
        return None
    if value.startswith("-----BEGIN"):
        return load_private_key(value.encode(), f"the text of ${SIGNING_KEY_ENV}", environ.get(PASSWORD_ENV))
    path = Path(value).expanduser()
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SigningError(
            f"the signing key {path} (${SIGNING_KEY_ENV}) cannot be read: {e.strerror or e}",
            f"set ${SIGNING_KEY_ENV} to a readable key file (or unset it to attach unsigned statements)",
        ) from None
    return load_private_key(data, f"the file {path} (${SIGNING_KEY_ENV})", environ.get(PASSWORD_ENV))


def load_private_key(data: bytes, source: str, password: str | None = None) -> SigningKey:
    """An ECDSA P-256 private key from PEM bytes (plain, password-protected PKCS#8, or a cosign key)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    text = data.decode("ascii", "replace")
    try:
        if any(f"-----BEGIN {kind}-----" in text for kind in _ENCRYPTED_PEM_TYPES):
            key = serialization.load_der_private_key(_open_cosign_key(text, source, password), None)
        else:
            secret = password.encode() if password and "ENCRYPTED PRIVATE KEY" in text else None
            key = serialization.load_pem_private_key(data, secret)
    except SigningError:
        raise
    except (ValueError, TypeError):
        raise SigningError(
            f"{source} is not a PEM private key this tool can read (or ${PASSWORD_ENV} does not open it)",
            "give an ECDSA P-256 key: `cosign generate-key-pair` (its cosign.key, with $COSIGN_PASSWORD), or "
            "`openssl ecparam -genkey -name prime256v1 -noout | openssl pkcs8 -topk8 -nocrypt`",
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise SigningError(
            f"{source} is not an ECDSA P-256 key, the kind cosign signs and verifies with by default",
            "generate one with `cosign generate-key-pair`, or "
            "`openssl ecparam -genkey -name prime256v1 -noout | openssl pkcs8 -topk8 -nocrypt`",
        )
    return SigningKey(key, source)


def _open_cosign_key(text: str, source: str, password: str | None) -> bytes:
    """The PKCS#8 DER inside a cosign key: scrypt of the password opens a NaCl secretbox."""
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
    from nacl.exceptions import CryptoError
    from nacl.secret import SecretBox

    if password is None:
        raise SigningError(
            f"{source} is an encrypted cosign key and ${PASSWORD_ENV} is not set",
            f"set ${PASSWORD_ENV} to the key's password (as for cosign itself)",
        )
    body = "".join(line for line in text.strip().splitlines() if line and not line.startswith("-----"))
    try:
        sealed = json.loads(base64.b64decode(body))
        params = sealed["kdf"]["params"]
        kdf = Scrypt(base64.b64decode(sealed["kdf"]["salt"]), 32, int(params["N"]), int(params["r"]), int(params["p"]))
        box_key = kdf.derive(password.encode())
        nonce = base64.b64decode(sealed["cipher"]["nonce"])
        return SecretBox(box_key).decrypt(base64.b64decode(sealed["ciphertext"]), nonce)
    except CryptoError:
        raise SigningError(
            f"${PASSWORD_ENV} does not open the cosign key {source}",
            f"set ${PASSWORD_ENV} to the password the key pair was generated with",
        ) from None
    except (ValueError, KeyError, TypeError):
        raise SigningError(
            f"{source} looks like a cosign key but cannot be read as one",
            "generate the key pair again with `cosign generate-key-pair`",
        ) from None


def load_public_key(path: str | Path) -> Any:
    """A PEM public key (cosign.pub), for verifying."""
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_pem_public_key(Path(path).expanduser().read_bytes())
    except OSError as e:
        raise SigningError(
            f"the public key {path} cannot be read: {e.strerror or e}", "give the path of cosign.pub"
        ) from None
    except ValueError:
        raise SigningError(
            f"{path} is not a PEM public key", "give the public half of the signing key (cosign.pub)"
        ) from None


def envelope(bundle: bytes) -> tuple[bytes, str, list[dict], str]:
    """(payload, payloadType, signatures, key hint) of a Sigstore bundle's DSSE envelope, unverified."""
    document = json.loads(bundle)
    dsse = document["dsseEnvelope"]
    hint = ((document.get("verificationMaterial") or {}).get("publicKey") or {}).get("hint", "")
    return base64.b64decode(dsse["payload"]), dsse["payloadType"], list(dsse.get("signatures") or []), hint


def verify(bundle: bytes, public_key: Any) -> bytes:
    """The statement of a bundle whose envelope `public_key` signed; SigningError when none of its signatures is
    that key's over exactly this payload."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        payload, payload_type, signatures, _ = envelope(bundle)
    except (ValueError, KeyError, TypeError):
        raise SigningError("the attestation is not a Sigstore bundle with a DSSE envelope", _REATTACH) from None
    for entry in signatures:
        try:
            public_key.verify(
                base64.b64decode(entry.get("sig", "")), pae(payload_type, payload), ec.ECDSA(hashes.SHA256())
            )
            return payload
        except (InvalidSignature, ValueError):
            continue
    raise SigningError("the attestation's signature does not verify with the public key given", _REATTACH)


_REATTACH = (
    "check that the public key is the half of the key it was signed with; if it is, the attestation was changed "
    "after signing: deploy again to attach a new one"
)
