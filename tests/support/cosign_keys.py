"""Key pairs as `cosign generate-key-pair` writes them (go-securesystemslib's `encrypted`: the PKCS#8 DER of an
ECDSA P-256 key in a NaCl secretbox under an scrypt key of the password, as JSON in a PEM of type ENCRYPTED SIGSTORE
PRIVATE KEY), and the plain PEM public half cosign verifies with."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from nacl.secret import SecretBox

N, R, P = 32768, 8, 1  # cosign's scrypt parameters


def cosign_key_pair(directory: Path, password: str) -> tuple[Path, Path, ec.EllipticCurvePrivateKey]:
    """cosign.key (encrypted with `password`) and cosign.pub in `directory`, and the private key itself."""
    private = ec.generate_private_key(ec.SECP256R1())
    der = private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    salt, nonce = os.urandom(32), os.urandom(24)
    key = Scrypt(salt, 32, N, R, P).derive(password.encode())
    sealed = SecretBox(key).encrypt(der, nonce).ciphertext
    document = {
        "kdf": {"name": "scrypt", "params": {"N": N, "r": R, "p": P}, "salt": base64.b64encode(salt).decode()},
        "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
        "ciphertext": base64.b64encode(sealed).decode(),
    }
    body = base64.b64encode(json.dumps(document).encode()).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    pem = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n" + "\n".join(lines)
    pem += "\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cosign.key").write_text(pem)
    public = private.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)  # fmt: skip
    (directory / "cosign.pub").write_bytes(public)
    return directory / "cosign.key", directory / "cosign.pub", private
