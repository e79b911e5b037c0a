"""Downstream auth: JWT key files are found relative to the config file, a bad one is named, and a token's
principal says whether it is a user or a client."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import OKPAlgorithm, RSAAlgorithm
from mcp import MCPError

from mcp_interceptors import Chain
from mcp_interceptors.gateway.auth import StaticTokenVerifier, build_auth, check_auth, principal_for
from mcp_interceptors.gateway.config import ConfigError, load_config, parse_config
from mcp_interceptors.gateway.gateway import Gateway
from mcp_interceptors.protocol.invoke import Principal

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _write_config(folder: Path, key_field: str, key_file: str) -> Path:
    config = folder / "gateway.yaml"
    config.write_text(
        f"upstreams:\n  a: {{command: python, args: [server.py]}}\n"
        f"auth:\n  jwt: {{{key_field}: {key_file}, audience: gw}}\n",
        encoding="utf-8",
    )
    return config


async def test_a_relative_jwt_key_file_is_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "public.pem").write_bytes(public)
    config = load_config(_write_config(tmp_path, "public_key_file", "keys/public.pem"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the gateway started from another folder
    _, verifier = build_auth(config, "127.0.0.1", 8080)
    assert verifier is not None
    token = jwt.encode({"sub": "alice", "aud": "gw", "exp": int(time.time()) + 60}, key, algorithm="EdDSA")
    access = await verifier.verify_token(token)
    assert access is not None and access.subject == "alice"


@pytest.mark.parametrize("key_field", ["public_key_file", "jwks_file"])
def test_a_missing_jwt_key_file_names_the_config_file_and_the_field(tmp_path: Path, key_field: str) -> None:
    file = _write_config(tmp_path, key_field, "missing.pem")
    with pytest.raises(ConfigError) as error:
        check_auth(load_config(file), str(file))
    assert (error.value.file, error.value.path) == (str(file), f"auth.jwt.{key_field}")
    assert str(tmp_path / "missing.pem") in error.value.problem


async def test_a_jwt_issuer_that_is_not_a_url_is_checked_but_not_advertised(tmp_path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "public.pem").write_bytes(public)
    config_file = tmp_path / "gateway.yaml"
    config_file.write_text(
        "upstreams:\n  a: {command: python, args: [server.py]}\n"
        "auth:\n  jwt: {public_key_file: public.pem, audience: gw, issuer: my-idp}\n",
        encoding="utf-8",
    )
    settings, verifier = build_auth(load_config(config_file), "127.0.0.1", 8080)
    assert settings is not None and verifier is not None
    assert str(settings.issuer_url) == "http://127.0.0.1:8080/mcp"  # the resource stands in for the metadata
    claims = {"sub": "alice", "aud": "gw", "exp": int(time.time()) + 60}
    good = jwt.encode({**claims, "iss": "my-idp"}, key, algorithm="EdDSA")
    other = jwt.encode({**claims, "iss": "someone-else"}, key, algorithm="EdDSA")
    assert (await verifier.verify_token(good)) is not None
    assert (await verifier.verify_token(other)) is None


async def test_a_client_named_like_a_user_is_not_that_user(tmp_path: Path) -> None:
    """A client-credentials token (no `sub`) of a client whose id equals a user's `sub` is a `service`
    principal: it neither passes for the user in policy nor shares the user's rate limits or 2026-07-28
    session (keyed `type:id`)."""
    key = ed25519.Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "public.pem").write_bytes(public)
    config_file = tmp_path / "gateway.yaml"
    config_file.write_text(
        "upstreams:\n  a: {command: python, args: [server.py]}\n"
        "auth:\n  jwt: {public_key_file: public.pem, audience: gw}\n",
        encoding="utf-8",
    )
    config = load_config(config_file)
    _, verifier = build_auth(config, "127.0.0.1", 8080)
    assert verifier is not None
    claims = {"aud": "gw", "exp": int(time.time()) + 60}
    user = await verifier.verify_token(jwt.encode({**claims, "sub": "alice"}, key, algorithm="EdDSA"))
    client = await verifier.verify_token(jwt.encode({**claims, "client_id": "alice"}, key, algorithm="EdDSA"))
    assert user is not None and client is not None
    alice, service = principal_for(user), principal_for(client)
    assert (alice.type, alice.id) == ("user", "alice")
    assert (service.type, service.id) == ("service", "alice")
    gateway = Gateway(config, Chain(role="server"))
    assert gateway.sessions.for_request("2026-07-28", None, alice, None) is not gateway.sessions.for_request(
        "2026-07-28", None, service, None
    )
    assert gateway.sessions.for_request("2026-07-28", None, alice, None) is gateway.sessions.for_request(
        "2026-07-28", None, alice, None
    )


async def test_each_static_token_is_a_user_of_its_own() -> None:
    verifier = StaticTokenVerifier(["first-secret", "second-secret"], [])
    tokens = [await verifier.verify_token(secret) for secret in ("first-secret", "second-secret")]
    principals = [principal_for(token) for token in tokens if token is not None]
    assert [(p.type, p.id) for p in principals] == [("user", "static-token-1"), ("user", "static-token-2")]


async def test_a_rotated_jwks_file_is_reread_and_a_broken_one_fails_closed(tmp_path: Path) -> None:
    """Keys rotate in place: a key taken out of the JWKS file stops verifying and a new one starts, without
    a restart; a file that cannot be read (half written, gone) lets no token through."""
    old, new = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()

    def jwks(*keys: tuple[str, ed25519.Ed25519PrivateKey]) -> str:
        entries = [{**json.loads(OKPAlgorithm.to_jwk(key.public_key())), "kid": kid} for kid, key in keys]
        return json.dumps({"keys": entries})

    key_file = tmp_path / "jwks.json"
    key_file.write_text(jwks(("old", old)), encoding="utf-8")
    config_file = tmp_path / "gateway.yaml"
    config_file.write_text(
        "upstreams:\n  a: {command: python, args: [server.py]}\nauth:\n  jwt: {jwks_file: jwks.json, audience: gw}\n",
        encoding="utf-8",
    )
    _, verifier = build_auth(load_config(config_file), "127.0.0.1", 8080)
    assert verifier is not None
    claims = {"sub": "alice", "aud": "gw", "exp": int(time.time()) + 60}
    by_old = jwt.encode(claims, old, algorithm="EdDSA", headers={"kid": "old"})
    by_new = jwt.encode(claims, new, algorithm="EdDSA", headers={"kid": "new"})

    async def accepted() -> list[bool]:
        return [await verifier.verify_token(token) is not None for token in (by_old, by_new)]

    assert await accepted() == [True, False]
    rotated = tmp_path / "jwks.json.tmp"
    rotated.write_text(jwks(("new", new)), encoding="utf-8")
    rotated.replace(key_file)  # written elsewhere, then renamed over the old file
    assert await accepted() == [False, True]
    key_file.write_text('{"keys": [', encoding="utf-8")
    assert await accepted() == [False, False]
    key_file.unlink()
    assert await accepted() == [False, False]


def test_a_handshake_session_serves_only_the_principal_that_opened_it() -> None:
    """Whatever names a session (a header, a query), another principal's request for it is refused."""
    config = parse_config({"upstreams": {"a": {"command": "python", "args": ["server.py"]}}})
    gateway = Gateway(config, Chain(role="server"))
    alice = Principal(type="user", id="alice", claims={"scopes": ["read"]})
    opened = gateway.sessions.for_request("legacy", "s-1", alice, None)
    again = Principal(type="user", id="alice", claims={"scopes": ["write"]})  # a refreshed token, same user
    assert gateway.sessions.for_request("legacy", "s-1", again, None) is opened
    assert opened.context(None).principal == again  # judged by its latest claims, not the first token's
    for other in (Principal(type="service", id="alice"), Principal(type="user", id="bob"), None):
        with pytest.raises(MCPError) as refused:
            gateway.sessions.for_request("legacy", "s-1", other, None)
        assert (refused.value.code, refused.value.message) == (-32600, "Session not found")


@pytest.mark.parametrize(
    "named",
    [{}, {"sub": ""}, {"client_id": ""}, {"azp": ""}, {"client_id": ["x"]}, {"sub": "", "azp": 5}],
    ids=["none", "empty-sub", "empty-client_id", "empty-azp", "list-client_id", "empty-sub-numeric-azp"],
)
async def test_a_jwt_that_names_no_principal_is_refused(
    tmp_path: Path, named: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    """Such tokens were all one principal, `service:jwt`: their callers shared rate limits and session state."""
    key = ed25519.Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "public.pem").write_bytes(public)
    config_file = tmp_path / "gateway.yaml"
    config_file.write_text(
        "upstreams:\n  a: {command: python, args: [server.py]}\n"
        "auth:\n  jwt: {public_key_file: public.pem, audience: gw}\n",
        encoding="utf-8",
    )
    _, verifier = build_auth(load_config(config_file), "127.0.0.1", 8080)
    assert verifier is not None
    claims = {"aud": "gw", "exp": int(time.time()) + 60, "scope": "read"}
    token = jwt.encode({**claims, **named}, key, algorithm="EdDSA", headers={"typ": "JWT"})
    assert await verifier.verify_token(token) is None
    assert "JWT refused: it names no principal" in caplog.text
    azp_only = await verifier.verify_token(jwt.encode({**claims, "azp": "svc"}, key, algorithm="EdDSA"))
    assert azp_only is not None and principal_for(azp_only) == Principal(
        type="service", id="svc", claims={"aud": "gw", "azp": "svc", "scopes": ["read"]}
    )


async def test_a_jwt_whose_alg_does_not_fit_the_key_is_refused_not_a_crash(tmp_path: Path) -> None:
    """An `alg` the gateway allows (ES256, EdDSA by default) on a token whose `kid` names an RSA key of the
    JWKS made PyJWT raise `TypeError`: the auth middleware crashed (500, connection reset) instead of a 401.
    So did a signed token whose `scope` is neither a string nor a list."""
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "jwks.json").write_text(
        json.dumps({"keys": [{**json.loads(RSAAlgorithm.to_jwk(rsa_key.public_key())), "kid": "rsa"}]}),
        encoding="utf-8",
    )
    config_file = tmp_path / "gateway.yaml"
    config_file.write_text(
        "upstreams:\n  a: {command: python, args: [server.py]}\nauth:\n  jwt: {jwks_file: jwks.json, audience: gw}\n",
        encoding="utf-8",
    )
    _, verifier = build_auth(load_config(config_file), "127.0.0.1", 8080)
    assert verifier is not None
    claims = {"sub": "alice", "aud": "gw", "exp": int(time.time()) + 60}
    ec_key = ec.generate_private_key(ec.SECP256R1())
    es256 = jwt.encode(claims, ec_key, algorithm="ES256", headers={"kid": "rsa"})
    eddsa = jwt.encode(claims, ed25519.Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": "rsa"})
    assert await verifier.verify_token(es256) is None
    assert await verifier.verify_token(eddsa) is None
    numeric_scope = jwt.encode({**claims, "scope": 5}, rsa_key, algorithm="RS256", headers={"kid": "rsa"})
    assert await verifier.verify_token(numeric_scope) is None
    good = await verifier.verify_token(jwt.encode(claims, rsa_key, algorithm="RS256", headers={"kid": "rsa"}))
    assert good is not None and good.subject == "alice"


async def test_every_key_of_a_jwks_without_kids_verifies_its_tokens(tmp_path: Path) -> None:
    """A JWKS may list keys without a `kid` (tokens then carry none): each is tried, not only the last."""
    first, second, stranger = (ed25519.Ed25519PrivateKey.generate() for _ in range(3))
    entries = [json.loads(OKPAlgorithm.to_jwk(key.public_key())) for key in (first, second)]
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": entries}), encoding="utf-8")
    config_file = tmp_path / "gateway.yaml"
    config_file.write_text(
        "upstreams:\n  a: {command: python, args: [server.py]}\nauth:\n  jwt: {jwks_file: jwks.json, audience: gw}\n",
        encoding="utf-8",
    )
    _, verifier = build_auth(load_config(config_file), "127.0.0.1", 8080)
    assert verifier is not None
    claims = {"sub": "alice", "aud": "gw", "exp": int(time.time()) + 60}
    tokens = [jwt.encode(claims, key, algorithm="EdDSA") for key in (first, second, stranger)]
    assert [await verifier.verify_token(token) is not None for token in tokens] == [True, True, False]


def _private_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.mark.parametrize("content", ["private-pem", "private-jwks", "private-jwk", "no-key"])
async def test_a_jwt_key_file_without_a_public_key_is_refused_at_load_and_at_reload(
    tmp_path: Path, content: str
) -> None:
    """A key file holding a private key passed `--check` and start-up, then every request crashed PyJWT
    (`AttributeError`: 500 and a traceback); one holding no key at all passed too, and every token was refused
    without a word. Both are refused at load naming the file and field, and at a reload fail closed."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    field, name = ("jwks_file", "keys.json") if content == "private-jwks" else ("public_key_file", "key.pem")
    match content:
        case "private-pem":
            bad = _private_pem(key)
        case "private-jwks":
            bad = json.dumps({"keys": [{**json.loads(RSAAlgorithm.to_jwk(key)), "kid": "k1"}]}).encode()
        case "private-jwk":
            bad = RSAAlgorithm.to_jwk(key).encode()
        case _:
            bad = b"not a key\n"
    file = _write_config(tmp_path, field, name)
    (tmp_path / name).write_bytes(bad)
    with pytest.raises(ConfigError) as error:
        check_auth(load_config(file), str(file))
    assert error.value.path == f"auth.jwt.{field}"
    assert ("private key" if content != "no-key" else "no PEM public key") in error.value.problem

    public = (
        json.dumps({"keys": [{**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": "k1"}]}).encode()
        if field == "jwks_file"
        else key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    (tmp_path / name).write_bytes(public)
    _, verifier = build_auth(load_config(file), "127.0.0.1", 8080)
    assert verifier is not None
    token = jwt.encode(
        {"sub": "alice", "aud": "gw", "exp": int(time.time()) + 60}, key, algorithm="RS256", headers={"kid": "k1"}
    )
    assert await verifier.verify_token(token) is not None
    (tmp_path / "new").write_bytes(bad)
    (tmp_path / "new").replace(tmp_path / name)  # rotated to a bad file: refused, not a crash
    assert await verifier.verify_token(token) is None


@pytest.mark.parametrize("auth", [{"required_scopes": ["mcp"]}, {"resource_server_url": "https://gw.example.com/mcp"}])
def test_auth_settings_without_tokens_or_jwt_are_refused_not_auth_off(auth: dict[str, object]) -> None:
    """`auth: {required_scopes: [mcp]}` passed `--check` and served every request unauthenticated on loopback."""
    raw = {"upstreams": {"a": {"command": "python", "args": ["server.py"]}}, "auth": auth}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert (error.value.file, error.value.path) == ("gateway.yaml", "auth")
    assert f"{next(iter(auth))} without `tokens` or `jwt`" in error.value.problem
    assert parse_config({**raw, "auth": {**auth, "tokens": ["t"]}}).auth.enabled


@pytest.mark.parametrize("token", ["Tk-81f2\n", " Tk-81f2", "Tk\t81f2", "Tk-81fé"])
def test_a_static_token_no_client_can_send_is_refused_at_load(token: str) -> None:
    """A header value is visible ASCII with no blank at either end: such a token (a secret file's trailing
    newline) passed `--check`, then every client got 401 with nothing logged."""
    raw = {"upstreams": {"a": {"command": "python", "args": ["server.py"]}}, "auth": {"tokens": ["ok", "${TOKEN}"]}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml", env={"TOKEN": token})
    assert (error.value.file, error.value.path) == ("gateway.yaml", "auth.tokens[1]")
    assert "no client can send this token" in error.value.problem
    assert token not in str(error.value)  # a secret stays out of the message
    assert parse_config(raw, env={"TOKEN": "s3cr3t with spaces!~"}).auth.tokens[1] == "s3cr3t with spaces!~"
