"""Signed validation results: Ed25519 over the RFC 8785 form of a result body, and the keys that make them.

A host given a signing key fills the spec's `signature` field (`{algorithm, publicKey, value}`) on the
validation results it sends; an invoker given that host's public key checks it and raises
`SignatureError` (an invocation failure, routed by mode/failOpen) when it is missing or wrong. Pure apart
from the two key-file helpers; `host` and `invoker` both sit above it, `canonical` and `protocol` below.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)
from nacl.bindings import crypto_sign_BYTES, crypto_sign_open
from nacl.exceptions import BadSignatureError

from mcp_interceptors.canonical import CanonicalizationError, canonical_json
from mcp_interceptors.protocol.errors import INTERNAL_ERROR, InterceptorsError

ALGORITHM: Final = "ed25519"
#: Keys of a received result body that are not signed: the signature itself, and what the transport adds
#: around the host's result (`_meta`, and the 2026-07-28 `resultType`).
UNSIGNED_KEYS: Final = frozenset({"signature", "_meta", "resultType"})

_B64URL: Final = re.compile(r"[A-Za-z0-9_-]*")

SigningKeyLike = Ed25519PrivateKey | bytes | str
VerifyKeyLike = Ed25519PublicKey | bytes | str


class SignatureError(InterceptorsError):
    """A result's signature is missing or does not verify under the configured key (-32603).

    `data.reason` is `"signature missing"` or `"signature invalid"`; `data.detail` says why.
    """

    code = INTERNAL_ERROR

    def __init__(self, interceptor: str, reason: str, detail: str) -> None:
        super().__init__(
            f"Result of {interceptor!r} failed its signature check: {detail}",
            data={"interceptor": interceptor, "reason": reason, "detail": detail},
        )


# -- encodings and keys -------------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 4648 §5), as used for every key and signature here."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict base64url (padding optional); raises `ValueError` on anything else."""
    unpadded = text.rstrip("=")
    if _B64URL.fullmatch(unpadded) is None or len(unpadded) % 4 == 1:
        raise ValueError("not base64url (RFC 4648 §5: letters, digits, '-' and '_')")
    return base64.urlsafe_b64decode(unpadded + "=" * (-len(unpadded) % 4))


def generate_signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def signing_key_from(value: SigningKeyLike) -> Ed25519PrivateKey:
    """A private key from a key object, its 32 raw bytes, those bytes in base64url, or PKCS#8 PEM."""
    if isinstance(value, Ed25519PrivateKey):
        return value
    raw = value.encode() if isinstance(value, str) else value
    if raw.lstrip().startswith(b"-----BEGIN"):
        key = load_pem_private_key(raw, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"the PEM key is {type(key).__name__}, not an Ed25519 private key")
        return key
    if isinstance(value, str):
        raw = b64url_decode(value.strip())
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 private key is 32 raw bytes, got {len(raw)}")
    return Ed25519PrivateKey.from_private_bytes(raw)


def verify_key_from(value: VerifyKeyLike) -> Ed25519PublicKey:
    """A public key from a key object, its 32 raw bytes, those bytes in base64url, or SPKI PEM."""
    if isinstance(value, Ed25519PublicKey):
        return value
    if not isinstance(value, str | bytes | bytearray):
        raise ValueError(f"a public key is a key object, bytes or text, not {type(value).__name__}")
    raw = value.encode() if isinstance(value, str) else bytes(value)
    if raw.lstrip().startswith(b"-----BEGIN"):
        key = load_pem_public_key(raw)
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"the PEM key is {type(key).__name__}, not an Ed25519 public key")
        return key
    if isinstance(value, str):
        raw = b64url_decode(value.strip())
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key is 32 raw bytes, got {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def public_key_text(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The raw 32-byte public key in base64url: what `publicKey` carries and invokers are configured with."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return b64url(public.public_bytes(Encoding.Raw, PublicFormat.Raw))


def load_signing_key(path: str | Path, *, create: bool = False) -> Ed25519PrivateKey:
    """Read a host's key file (PKCS#8 PEM or base64url); with `create`, write a new one (mode 0600) first.

    A key file that the group or others can access is refused, as ssh refuses one.
    """
    path = Path(path).expanduser()
    if create and not path.exists():
        pem = generate_signing_key().private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # O_EXCL: if another process created it first, we use theirs.
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(pem)
                handle.flush()
                os.fsync(handle.fileno())
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"signing key file {path} has mode {stat.S_IMODE(mode):04o}; run `chmod 600 {path}`")
    return signing_key_from(_key_file_text(path))


def load_verify_key(path: str | Path) -> Ed25519PublicKey:
    """Read a public key file: SPKI PEM, or the base64url raw key on one line."""
    return verify_key_from(_key_file_text(Path(path).expanduser()))


def _key_file_text(path: Path) -> str:
    """A key file's content: PEM, or base64url on one line (whitespace around it ignored)."""
    try:
        return path.read_text(encoding="ascii").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a text key file (PEM or base64url)") from None


# -- results ------------------------------------------------------------------------------------------


def ed25519_verifies(signature: bytes, message: bytes, public_key: bytes) -> bool:
    """Whether `signature` is the Ed25519 signature of `message` by the raw 32-byte `public_key`.

    Through libsodium: ~50 µs against ~105 µs with OpenSSL, paid on every checked result and on every record
    `audit verify` reads. Ed25519 is deterministic, so what OpenSSL signs verifies here; libsodium also refuses
    non-canonical signatures and small-order keys, which no conforming signer makes."""
    if len(signature) != crypto_sign_BYTES:
        return False
    try:
        crypto_sign_open(signature + message, public_key)
    except (BadSignatureError, ValueError):
        return False
    return True


def signed_bytes(body: Mapping[str, Any]) -> bytes:
    """What a result signature covers: RFC 8785 bytes of the body without `signature`, `_meta`, `resultType`."""
    return canonical_json({key: value for key, value in body.items() if key not in UNSIGNED_KEYS})


def sign_result(body: Mapping[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """The body with its `signature` filled (any signature already there is replaced)."""
    value = b64url(key.sign(signed_bytes(body)))
    return {**body, "signature": {"algorithm": ALGORITHM, "publicKey": public_key_text(key), "value": value}}


def check_result_signature(body: Mapping[str, Any], key: Ed25519PublicKey, interceptor: str) -> None:
    """Raise `SignatureError` unless `body` carries a valid Ed25519 signature by `key` over `signed_bytes`."""
    signature = body.get("signature")
    if signature is None:
        raise SignatureError(interceptor, "signature missing", "the result has no signature")
    if not isinstance(signature, Mapping):
        raise SignatureError(interceptor, "signature invalid", "signature is not an object")
    algorithm, public, value = signature.get("algorithm"), signature.get("publicKey"), signature.get("value")
    if algorithm != ALGORITHM:
        raise SignatureError(interceptor, "signature invalid", f"algorithm {algorithm!r}, expected {ALGORITHM!r}")
    raw_key = key.public_bytes_raw()
    expected = b64url(raw_key)
    if public != expected:
        raise SignatureError(interceptor, "signature invalid", f"signed by key {public!r}, expected {expected!r}")
    try:
        valid = ed25519_verifies(b64url_decode(value) if isinstance(value, str) else b"", signed_bytes(body), raw_key)
    except (ValueError, CanonicalizationError):  # not base64url, or a body with no canonical form
        valid = False
    if not valid:
        raise SignatureError(interceptor, "signature invalid", "the signature does not match the result")


__all__ = [
    "ALGORITHM",
    "UNSIGNED_KEYS",
    "SignatureError",
    "SigningKeyLike",
    "VerifyKeyLike",
    "check_result_signature",
    "generate_signing_key",
    "load_signing_key",
    "load_verify_key",
    "public_key_text",
    "sign_result",
    "signed_bytes",
    "signing_key_from",
    "verify_key_from",
]
