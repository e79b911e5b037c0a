"""Downstream bearer auth for HTTP: static tokens or JWTs, through mcp's `TokenVerifier` seam.

mcp's auth middleware answers a missing or bad token with 401 and `WWW-Authenticate`, and serves
the protected-resource metadata; we only decide whether a token is good and who it belongs to.
"""

from __future__ import annotations

import hmac
import json
import logging
from pathlib import Path
from typing import Any

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings

from mcp_interceptors.gateway.config import AuthConfig, ConfigError, GatewayConfig, authority
from mcp_interceptors.protocol.invoke import Principal

logger = logging.getLogger(__name__)

#: Claims passed on to interceptors as `principal.claims` (send only what policy needs).
_FORWARDED_CLAIMS = frozenset({"iss", "aud", "sub", "azp", "client_id", "groups", "roles"})

#: Keys that sign: PyJWT cannot verify with one (`AttributeError` on each request), and none belongs here.
_PRIVATE_KEYS = (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)


class StaticTokenVerifier:
    """Accepts any of a fixed set of tokens (compared in constant time)."""

    def __init__(self, tokens: list[str], scopes: list[str]) -> None:
        self._tokens = [token.encode() for token in tokens]
        self._scopes = scopes

    async def verify_token(self, token: str) -> AccessToken | None:
        candidate = token.encode()
        for index, known in enumerate(self._tokens):
            if hmac.compare_digest(candidate, known):
                name = f"static-token-{index + 1}"  # each token stands for a user of its own
                return AccessToken(token=token, client_id=name, scopes=list(self._scopes), subject=name)
        return None


class JwtVerifier:
    """Verifies JWTs against a PEM public key or a JWKS file, with issuer/audience checks."""

    def __init__(self, config: AuthConfig, file: str = "<config>", base_dir: str | None = None) -> None:
        """Key files are relative to `base_dir` (the config file's folder), as every path in a config is."""
        jwt_config = config.jwt
        assert jwt_config is not None
        self._issuer = jwt_config.issuer
        self._audience = jwt_config.audience
        self._algorithms = list(jwt_config.algorithms)
        self._jwks = jwt_config.public_key_file is None
        name = jwt_config.jwks_file if self._jwks else jwt_config.public_key_file
        assert name is not None
        self._path = _resolve(name, base_dir)
        self._field = "auth.jwt.jwks_file" if self._jwks else "auth.jwt.public_key_file"
        try:
            self._stamp: tuple[int, ...] | None = _stamp(self._path)
            self._keys = self._load()
        except (OSError, ValueError, UnsupportedAlgorithm, jwt.PyJWTError) as exc:
            fix = "check the key file (a relative path is relative to the config file's folder)"
            raise ConfigError(file, self._field, f"cannot load the verification key: {exc}", fix) from None

    def _load(self) -> list[tuple[str | None, Any]]:
        """`(kid, key)` of every key in the file (a JWKS may list several without a `kid`), parsed now: a file
        that holds no public key, or a private one, is refused here rather than failing every token."""
        text = self._path.read_text(encoding="utf-8")
        keys: list[tuple[str | None, Any]]
        try:
            if not self._jwks:
                keys = [(None, jwt.PyJWK.from_json(text).key if text.lstrip().startswith("{") else _public_key(text))]
            else:
                keys = [(key.key_id, key.key) for key in jwt.PyJWKSet.from_dict(_jwks_document(text)).keys]
        except (TypeError, KeyError, AttributeError) as exc:  # PyJWT's own, on a JWK of the wrong shape
            raise ValueError(f"a key of the file cannot be read ({type(exc).__name__}: {exc})") from None
        for key_id, key in keys:
            if isinstance(key, _PRIVATE_KEYS):
                which = "the key" if key_id is None else f"key {key_id!r}"
                raise ValueError(f"{which} is a private key: give only the public key (the gateway verifies tokens)")
        return keys

    def _candidates(self, kid: Any) -> list[Any]:
        """The keys that may have signed a token: those its `kid` names; else those without a `kid` (every
        one is tried); else the only key there is."""
        named = [key for key_id, key in self._keys if kid is not None and key_id == kid]
        if named:
            return named
        unnamed = [key for key_id, key in self._keys if key_id is None]
        if unnamed:
            return unnamed
        return [self._keys[0][1]] if len(self._keys) == 1 else []

    def _refresh(self) -> None:
        """Keys rotate in place: the key file is reread once it changes (one `stat` per token). A changed
        file that cannot be read (gone, half written, no keys) fails closed: no token passes until it can."""
        try:
            stamp: tuple[int, ...] | None = _stamp(self._path)
        except OSError:
            stamp = None  # gone
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._keys = self._load()
        except (OSError, ValueError, UnsupportedAlgorithm, jwt.PyJWTError) as exc:
            logger.error("%s %s cannot be read, so every token is refused: %s", self._field, self._path, exc)
            self._keys = []
            return
        logger.info("%s %s reloaded: %d key(s)", self._field, self._path, len(self._keys))

    async def verify_token(self, token: str) -> AccessToken | None:
        self._refresh()
        try:
            candidates = self._candidates(jwt.get_unverified_header(token).get("kid"))
        except jwt.PyJWTError:
            return None
        claims = None
        for key in candidates:
            try:
                claims = jwt.decode(
                    token,
                    key=key,
                    algorithms=self._algorithms,
                    audience=self._audience,
                    issuer=self._issuer,
                    options={"require": ["exp"], "verify_aud": self._audience is not None},
                )
                break
            except (jwt.PyJWTError, TypeError, ValueError):
                # TypeError/ValueError: the header's `alg` is allowed but not of the key's type (an ES256 or
                # EdDSA token against an RSA key of a JWKS): PyJWT cannot prepare the key. Refused, not a 500.
                continue
        if claims is None:
            return None
        scope = claims.get("scope") or claims.get("scp") or ""
        if not isinstance(scope, (str, list)):
            logger.warning("JWT refused: its `scope` is neither a string nor a list")
            return None
        scopes = scope.split() if isinstance(scope, str) else [str(s) for s in scope]
        subject = _name(claims.get("sub"))
        client_id = _name(claims.get("client_id")) or _name(claims.get("azp"))
        if subject is None and client_id is None:
            # Every such caller would be one principal, sharing rate limits and session state.
            logger.warning("JWT refused: it names no principal (no non-empty `sub`, `client_id` or `azp` claim)")
            return None
        return AccessToken(
            token=token,
            client_id=client_id or str(subject),
            scopes=scopes,
            expires_at=int(claims["exp"]) if "exp" in claims else None,
            subject=str(subject) if subject is not None else None,
            claims={
                k: v for k, v in claims.items() if k in ("iss", "aud", "sub", "azp", "client_id", "groups", "roles")
            },
        )


def _jwks_document(text: str) -> dict[str, Any]:
    """A JWKS file's JSON, of the shape PyJWT reads (it raises AttributeError on `null` or a list)."""
    document = json.loads(text)
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list) or not all(isinstance(key, dict) for key in keys):
        raise ValueError("a JWKS is a JSON object whose `keys` is a list of JWK objects")
    return {"keys": keys}


def _name(claim: object) -> str | None:
    """A claim that names a principal: a non-empty string."""
    return claim if isinstance(claim, str) and claim else None


def principal_for(token: AccessToken) -> Principal:
    """Who a verified token acts for: the user its `sub` names, else the client (a service) it was issued to.

    The type tells the two apart, so a client whose `client_id` equals a user's `sub` is not that user
    to policy rules, rate limits (`per: principal` counts `type:id`) or 2026-07-28 session state.
    """
    claims = dict(token.claims or {})
    if token.scopes:
        claims.setdefault("scopes", list(token.scopes))
    if token.subject is not None:
        return Principal(type="user", id=token.subject, claims=claims or None)
    return Principal(type="service", id=token.client_id, claims=claims or None)


def current_principal() -> Principal | None:
    """The caller of the request being served, from its own token (mcp's bearer auth on HTTP), else None."""
    token = get_access_token()
    return principal_for(token) if token is not None else None


def _stamp(path: Path) -> tuple[int, ...]:
    """What changes when a file is rewritten, or replaced by a rename."""
    info = path.stat()
    return (info.st_mtime_ns, info.st_size, info.st_ino)


def _resolve(name: str, base_dir: str | None) -> Path:
    path = Path(name).expanduser()
    return Path(base_dir) / path if base_dir is not None and not path.is_absolute() else path


def check_auth(config: GatewayConfig, file: str) -> None:
    """Load the configured JWT keys now, so `--check` and start-up name the file and field of a bad one."""
    if config.auth.jwt is not None:
        JwtVerifier(config.auth, file, config.base_dir)


def _public_key(text: str) -> Any:
    """The key of a PEM public key file (`-----BEGIN PUBLIC KEY-----`), or of an OpenSSH `ssh-...` line."""
    data = text.strip().encode()
    if data.startswith(b"ssh-"):
        return serialization.load_ssh_public_key(data)
    if b"PRIVATE KEY-----" in data:
        raise ValueError("the file holds a private key: give only the public key (the gateway verifies tokens)")
    try:
        return serialization.load_pem_public_key(data)
    except ValueError:
        raise ValueError("no PEM public key (-----BEGIN PUBLIC KEY-----) in the file") from None


def _is_http_url(value: str | None) -> bool:
    return value is not None and value.startswith(("https://", "http://")) and len(value.split("://", 1)[1]) > 0


def build_auth(config: GatewayConfig, host: str, port: int) -> tuple[AuthSettings | None, TokenVerifier | None]:
    """mcp auth settings and verifier for the configured downstream auth, or (None, None)."""
    auth = config.auth
    if not auth.enabled:
        return None, None
    resource = auth.resource_server_url or f"http://{authority(host, port)}{config.http.path}"
    verifier: TokenVerifier
    if auth.jwt is not None:
        verifier = JwtVerifier(auth, base_dir=config.base_dir)
        # `iss` may be any string (RFC 7519 StringOrURI), but only a URL can be advertised as the
        # authorization server; tokens are still checked against the configured issuer.
        issuer = auth.jwt.issuer if _is_http_url(auth.jwt.issuer) else resource
    else:
        verifier = StaticTokenVerifier(auth.tokens, auth.required_scopes)
        issuer = resource
    settings = AuthSettings(
        issuer_url=issuer,
        resource_server_url=resource,
        required_scopes=auth.required_scopes or None,
        # Static tokens name no resource, and the JWT verifier checks `aud` itself.
        validate_token_resource=False,
    )
    return settings, verifier
