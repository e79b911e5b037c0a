"""Ed25519 audit keys: key files (mode 0600, written atomically), key ids, rotation endorsements, checks.

The writer signs with a `SigningKey`; verify checks with `PublicKey`s. A rotated key file carries an
endorsement of the new key signed by the old one, plus the public halves of every retired key.
Signing and checking go through libsodium (PyNaCl): Ed25519 signatures are deterministic (RFC 8032), so
they are the bytes OpenSSL would make, for ~19 instead of ~32 µs of CPU each (the writer makes one per
record), and a check costs ~53 instead of ~105 µs (`audit verify` makes one per record). Key files and
rotation use `cryptography`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Final

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from nacl.bindings import crypto_sign, crypto_sign_BYTES, crypto_sign_seed_keypair

from mcp_interceptors.audit.records import AuditError, format_time
from mcp_interceptors.canonical import canonical_json
from mcp_interceptors.signatures import ed25519_verifies

DEFAULT_KEY_PATH: Final = Path("~/.mcp-interceptors/audit-key")
_KEY_FILE_VERSION: Final = 1


class KeyFileError(AuditError):
    """A key file is missing, malformed or readable by other users."""


def b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_id_for(public_raw: bytes) -> str:
    """The first 16 hex digits of SHA-256 over the raw 32-byte public key."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


@dataclass(frozen=True)
class PublicKey:
    """A verification key: its id and its raw public key (base64url)."""

    key_id: str
    public_key: str

    @classmethod
    def from_b64(cls, public_key: str) -> PublicKey:
        """The key from its base64url text; a `ValueError` unless that is 32 bytes (an Ed25519 key)."""
        raw = b64decode(public_key)
        if len(raw) != 32:
            raise ValueError(f"an Ed25519 public key is 32 bytes, got {len(raw)}")
        return cls(key_id=key_id_for(raw), public_key=public_key)

    def verify(self, signature: str, digest: bytes) -> bool:
        """Whether `signature` (base64url) is this key's over `digest` (`signatures.ed25519_verifies`)."""
        try:
            raw_signature = b64decode(signature)
        except ValueError:
            return False
        return ed25519_verifies(raw_signature, digest, self._raw)

    @cached_property
    def _raw(self) -> bytes:
        return b64decode(self.public_key)


@dataclass(frozen=True)
class SigningKey:
    """The gateway's current private key, its endorsement by the previous key and the retired keys."""

    private_key: Ed25519PrivateKey = field(repr=False)
    created_at: str
    endorsement: Mapping[str, Any] | None = None
    retired: tuple[PublicKey, ...] = ()

    @cached_property
    def public(self) -> PublicKey:
        raw = self.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return PublicKey(key_id=key_id_for(raw), public_key=b64encode(raw))

    @property
    def key_id(self) -> str:
        return self.public.key_id

    @cached_property
    def _sodium_secret(self) -> bytes:
        """The private key in libsodium's form: its 32-byte seed followed by the public key."""
        seed = self.private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        _, secret = crypto_sign_seed_keypair(seed)
        return secret

    def sign(self, digest: bytes) -> str:
        """Ed25519 over the raw 32-byte SHA-256 digest, base64url."""
        return b64encode(crypto_sign(digest, self._sodium_secret)[:crypto_sign_BYTES])

    def trusted(self) -> dict[str, PublicKey]:
        """The keys a verifier holding this key file trusts: this one and every retired one."""
        keys = {key.key_id: key for key in self.retired}
        keys[self.key_id] = self.public
        return keys


def generate_key(now: datetime | None = None) -> SigningKey:
    return SigningKey(private_key=Ed25519PrivateKey.generate(), created_at=format_time(now or datetime.now(UTC)))


# -- endorsements -----------------------------------------------------------------------------------


def endorsement_message(*, old_key_id: str, new_key_id: str, new_public_key: str, rotated_at: str) -> bytes:
    """What the old key signs at rotation: RFC 8785 bytes naming the new key."""
    statement = {
        "purpose": "mcp-interceptors audit key rotation",
        "old_key_id": old_key_id,
        "new_key_id": new_key_id,
        "new_public_key": new_public_key,
        "rotated_at": rotated_at,
    }
    return hashlib.sha256(canonical_json(statement)).digest()


def endorse(old: SigningKey, new: PublicKey, rotated_at: str) -> dict[str, Any]:
    message = endorsement_message(
        old_key_id=old.key_id, new_key_id=new.key_id, new_public_key=new.public_key, rotated_at=rotated_at
    )
    return {
        "key_id": old.key_id,
        "public_key": old.public.public_key,
        "rotated_at": rotated_at,
        "signature": old.sign(message),
    }


def is_endorsed_by(endorsement: Mapping[str, Any], new: PublicKey, old: PublicKey) -> bool:
    """True when `endorsement` is `old`'s valid signature naming `new`."""
    if endorsement.get("key_id") != old.key_id or endorsement.get("public_key") != old.public_key:
        return False
    rotated_at = endorsement.get("rotated_at")
    signature = endorsement.get("signature")
    if not isinstance(rotated_at, str) or not isinstance(signature, str):
        return False
    message = endorsement_message(
        old_key_id=old.key_id, new_key_id=new.key_id, new_public_key=new.public_key, rotated_at=rotated_at
    )
    return old.verify(signature, message)


# -- key files ---------------------------------------------------------------------------------------


def load_key(path: str | os.PathLike[str]) -> SigningKey:
    """Read a key file; refuse one that other users can read."""
    path = Path(path).expanduser()
    try:
        mode = path.stat().st_mode
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise KeyFileError(
            f"audit key file {path} does not exist (the gateway creates it when it first starts with audit enabled)"
        ) from exc
    except OSError as exc:  # a directory, no permission: a precise error instead of a traceback
        raise KeyFileError(f"audit key file {path} cannot be read: {exc.strerror or exc}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"audit key file {path} has mode {stat.S_IMODE(mode):04o}; run `chmod 600 {path}`")
    try:
        data = orjson.loads(raw)
        private = Ed25519PrivateKey.from_private_bytes(b64decode(data["private_key"]))
        retired = tuple(PublicKey.from_b64(item["public_key"]) for item in data.get("retired", []))
        return SigningKey(
            private_key=private,
            created_at=str(data["created_at"]),
            endorsement=data.get("endorsement"),
            retired=retired,
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise KeyFileError(f"audit key file {path} is malformed: {exc}") from exc


def load_or_create_key(path: str | os.PathLike[str] = DEFAULT_KEY_PATH) -> SigningKey:
    """Load the key at `path`, creating it (mode 0600, atomically) on first run."""
    path = Path(path).expanduser()
    if not path.exists():
        key = generate_key()
        # link() fails if another process created the file first; then we use theirs.
        with contextlib.suppress(FileExistsError):
            _write_key_file(path, key, replace=False)
    return load_key(path)


def rotate_key(path: str | os.PathLike[str] = DEFAULT_KEY_PATH, now: datetime | None = None) -> SigningKey:
    """Replace the key at `path` with a new one endorsed by it; the old public key is kept as retired."""
    path = Path(path).expanduser()
    old = load_key(path)
    rotated_at = format_time(now or datetime.now(UTC))
    fresh = generate_key(now)
    new = SigningKey(
        private_key=fresh.private_key,
        created_at=fresh.created_at,
        endorsement=endorse(old, fresh.public, rotated_at),
        retired=(*old.retired, old.public),
    )
    _write_key_file(path, new, replace=True)
    return new


def _key_file_bytes(key: SigningKey) -> bytes:
    raw = key.private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    document = {
        "v": _KEY_FILE_VERSION,
        "key_id": key.key_id,
        "public_key": key.public.public_key,
        "private_key": b64encode(raw),
        "created_at": key.created_at,
        "endorsement": key.endorsement,
        "retired": [{"key_id": item.key_id, "public_key": item.public_key} for item in key.retired],
    }
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


def _write_key_file(path: Path, key: SigningKey, *, replace: bool) -> None:
    """Write to a 0600 temp file, fsync, then link (create) or rename (replace) it into place."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(_key_file_bytes(key))
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_public_keys(path: str | os.PathLike[str]) -> dict[str, PublicKey]:
    """Trust anchors from a file: a key file (its current and retired keys) or JSON lines of public keys."""
    path = Path(path).expanduser()
    raw = path.read_bytes()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict) and "private_key" in data:
        return load_key(path).trusted()
    lines = [raw] if isinstance(data, dict) else [line for line in raw.splitlines() if line.strip()]
    keys: dict[str, PublicKey] = {}
    for number, line in enumerate(lines, 1):
        try:
            entry = orjson.loads(line)
            key = PublicKey.from_b64(entry["public_key"])
            Ed25519PublicKey.from_public_bytes(b64decode(key.public_key))
        except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
            raise KeyFileError(
                f"{path}: line {number} is not a public key; a trust file is a key file or JSON lines "
                'of {"public_key": ...} (see `audit keys --export`)'
            ) from None
        keys[key.key_id] = key
    return keys
