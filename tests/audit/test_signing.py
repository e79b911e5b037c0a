"""Key files (mode 0600, atomic creation, refusal of readable files), key ids and rotation endorsements."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import orjson
import pytest

from mcp_interceptors.audit import KeyFileError, PublicKey, load_key, load_or_create_key, read_public_keys, rotate_key
from mcp_interceptors.audit.signing import b64decode, b64encode, is_endorsed_by


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_key_file_is_created_with_mode_0600_in_a_0700_directory(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "audit-key"
    key = load_or_create_key(path)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["audit-key"]  # no temp file left behind
    assert load_or_create_key(path).key_id == key.key_id


def test_key_id_is_truncated_sha256_of_the_raw_public_key(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path / "audit-key")
    raw = b64decode(key.public.public_key)
    assert len(raw) == 32
    assert key.key_id == hashlib.sha256(raw).hexdigest()[:16]


def test_creation_race_keeps_the_first_key(tmp_path: Path) -> None:
    path = tmp_path / "audit-key"
    first = load_or_create_key(path)
    # A second process that saw no file generates its own key, but link() refuses to replace the first.
    from mcp_interceptors.audit.signing import _write_key_file, generate_key

    with pytest.raises(FileExistsError):
        _write_key_file(path, generate_key(), replace=False)
    assert load_key(path).key_id == first.key_id


def test_readable_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit-key"
    load_or_create_key(path)
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_key(path)


def test_missing_and_malformed_key_files(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="does not exist"):
        load_key(tmp_path / "nope")
    bad = tmp_path / "bad"
    bad.write_text("{}")
    os.chmod(bad, 0o600)
    with pytest.raises(KeyFileError, match="malformed"):
        load_key(bad)


@pytest.mark.parametrize("text", ["eHg", "", "A" * 44])
def test_a_public_key_that_is_not_32_bytes_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="an Ed25519 public key is 32 bytes"):
        PublicKey.from_b64(text)


def test_signature_verifies_only_for_its_digest(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path / "audit-key")
    digest = hashlib.sha256(b"record").digest()
    signature = key.sign(digest)
    assert key.public.verify(signature, digest)
    assert not key.public.verify(signature, hashlib.sha256(b"other").digest())
    assert not key.public.verify("not-base64!", digest)


def test_signatures_are_the_rfc_8032_bytes_openssl_makes(tmp_path: Path) -> None:
    """The writer signs through libsodium; trails written before (OpenSSL) and verifiers using OpenSSL
    must see the same deterministic Ed25519 signature for the same key and digest."""
    key = load_or_create_key(tmp_path / "audit-key")
    for digest in (bytes(32), hashlib.sha256(b"record").digest(), os.urandom(32)):
        assert b64decode(key.sign(digest)) == key.private_key.sign(digest)


def test_verify_accepts_what_openssl_signs_and_refuses_what_it_refuses(tmp_path: Path) -> None:
    """Records are checked through libsodium: a signature OpenSSL made verifies, and an altered signature,
    digest or key, or a signature of the wrong length or encoding, does not."""
    key = load_or_create_key(tmp_path / "audit-key")
    other = load_or_create_key(tmp_path / "other").public
    digest = hashlib.sha256(b"record").digest()
    signature = b64encode(key.private_key.sign(digest))  # OpenSSL's
    assert key.public.verify(signature, digest)
    flipped = bytearray(b64decode(signature))
    flipped[5] ^= 1
    assert not key.public.verify(b64encode(bytes(flipped)), digest)
    assert not key.public.verify(signature, hashlib.sha256(b"other").digest())
    assert not other.verify(signature, digest)
    assert not key.public.verify(b64encode(b64decode(signature)[:63]), digest)
    assert not key.public.verify(b64encode(b64decode(signature) + b"\0"), digest)
    assert not key.public.verify("not base64!", digest)


def test_rotation_endorses_the_new_key_and_keeps_the_old_public_key(tmp_path: Path) -> None:
    path = tmp_path / "audit-key"
    old = load_or_create_key(path)
    new = rotate_key(path)
    assert new.key_id != old.key_id
    assert _mode(path) == 0o600
    assert new.endorsement is not None and new.endorsement["key_id"] == old.key_id
    assert is_endorsed_by(new.endorsement, new.public, old.public)
    assert not is_endorsed_by(new.endorsement, new.public, load_or_create_key(tmp_path / "other").public)
    reloaded = load_key(path)
    assert reloaded.key_id == new.key_id
    assert set(reloaded.trusted()) == {old.key_id, new.key_id}
    stored = orjson.loads(path.read_bytes())
    assert "private_key" not in stored["retired"][0]


def test_read_public_keys_from_a_key_file_and_from_json_lines(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path / "audit-key")
    assert read_public_keys(tmp_path / "audit-key") == key.trusted()
    lines = tmp_path / "anchors.jsonl"
    lines.write_bytes(orjson.dumps({"key_id": key.key_id, "public_key": key.public.public_key}) + b"\n")
    assert read_public_keys(lines) == {key.key_id: PublicKey.from_b64(key.public.public_key)}


@pytest.mark.parametrize(
    "content",
    [b"not json\n", b'{"public_key": 5}\n', b'["a"]\n', b'{"key_id": "k"}\n', b'{"public_key": "c2hvcnQ"}\n'],
)
def test_a_trust_file_that_holds_no_public_keys_is_a_key_file_error(tmp_path: Path, content: bytes) -> None:
    """`audit verify --trust FILE` reports such a file (exit 2) instead of failing with a traceback."""
    path = tmp_path / "anchors.jsonl"
    path.write_bytes(content)
    with pytest.raises(KeyFileError, match=r"line 1 is not a public key"):
        read_public_keys(path)


def test_key_functions_take_a_str_path(tmp_path: Path) -> None:
    key = load_or_create_key(str(tmp_path / "audit-key"))
    assert load_key(str(tmp_path / "audit-key")).key_id == key.key_id
    assert read_public_keys(str(tmp_path / "audit-key")) == key.trusted()
    assert rotate_key(str(tmp_path / "audit-key")).key_id != key.key_id


def test_a_key_path_that_is_a_directory_is_a_key_file_error(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match=r"audit key file .* cannot be read: Is a directory"):
        load_or_create_key(tmp_path)
