"""Fuzz targets of the gateway's inputs, briefly (the short form of `bench/fuzz_gateway.py`'s campaigns; the
targets and their invariants are in `gateway_fuzz_targets.py`). One real gateway per front serves a module."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import gateway_fuzz_targets as targets
import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.e2e
FAST = settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])


def encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


#: Text a client, an upstream or an interceptor server may send: any code point, and JSON's own punctuation.
odd_text = st.text(
    st.characters(codec=None) | st.sampled_from(list('{}[]":,\\ \t0123456789eE+-.nultrf$ID')), max_size=60
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=False) | odd_text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(odd_text, children, max_size=5),
    max_leaves=25,
)
request_ids = st.one_of(st.integers(), odd_text, st.none(), st.floats(), st.lists(st.integers(), max_size=2))
methods = (
    st.sampled_from(
        [
            "ping",
            "tools/call",
            "tools/list",
            "initialize",
            "notifications/cancelled",
            "notifications/progress",
            "interceptors/list",
            "interceptor/invoke",
            "interceptor/executeChain",
            "resources/read",
            "x/unknown",
        ]
    )
    | odd_text
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": request_ids,
        "method": methods,
        "params": json_values
        | st.fixed_dictionaries(
            {}, optional={"name": odd_text, "arguments": json_values, "requestId": request_ids, "_meta": json_values}
        ),
        "result": json_values,
        "error": json_values,
    },
)
lines = st.lists(
    st.builds(lambda m: json.dumps(m).encode(), messages) | st.binary(max_size=80) | odd_text.map(encoded),
    min_size=1,
    max_size=6,
)


@pytest.fixture(scope="module")
def stdio_gateway() -> Iterator[targets.StdioGateway]:
    with tempfile.TemporaryDirectory() as folder:
        gateway = targets.StdioGateway(Path(folder))
        try:
            yield gateway
        finally:
            gateway.close()


@pytest.fixture(scope="module")
def http_gateway() -> Iterator[targets.HttpGateway]:
    with tempfile.TemporaryDirectory() as folder:
        gateway = targets.HttpGateway(Path(folder))
        try:
            yield gateway
        finally:
            gateway.close()


@FAST
@given(st.lists(st.lists(st.binary(max_size=300) | lines.map(b"\n".join), max_size=4).map(b"".join), max_size=6))
def test_the_jsonrpc_peer_answers_every_request_it_reads_and_survives_any_bytes(chunks: list[bytes]) -> None:
    targets.peer(chunks)


def test_the_peer_target_holds_on_a_line_past_its_limit_and_a_failing_handler() -> None:
    targets.peer([b'{"jsonrpc": "2.0", "id": 1, "method": "fail"}\n', b"x" * 5000])
    targets.peer([b'{"jsonrpc": "2.0", "id": 1, "method": "fail"}\n{"id": 1, "method": "ping"}\n'])


@FAST
@given(lines)
def test_the_stdio_gateway_keeps_serving_after_any_lines(
    stdio_gateway: targets.StdioGateway, fuzzed: list[bytes]
) -> None:
    targets.stdio(stdio_gateway, fuzzed)


answer_lines = st.one_of(
    json_values.map(lambda value: targets.verdict_line(value, "result")),
    json_values.map(lambda value: targets.verdict_line(value, "error")),
    messages.map(json.dumps),
    odd_text,
)


@FAST
@given(answer_lines)
def test_any_upstream_answer_gives_the_call_exactly_one_answer(stdio_gateway: targets.StdioGateway, line: str) -> None:
    targets.upstream(stdio_gateway, line)


verdicts = json_values | st.fixed_dictionaries(
    {"valid": st.booleans() | json_values},
    optional={
        "interceptor": st.sampled_from(["verdict", "other"]),
        "type": st.sampled_from(["validation", "mutation", "x"]),
        "phase": st.sampled_from(["request", "response"]),
        "severity": st.sampled_from(["info", "warn", "error", "fatal"]) | json_values,
        "messages": json_values,
        "info": json_values,
    },
)


@FAST
@given(st.one_of(verdicts.map(lambda v: (targets.verdict_line(v), v)), odd_text.map(lambda t: (t, None))))
def test_an_interceptor_servers_answer_never_lets_a_call_through_unless_it_passes(
    stdio_gateway: targets.StdioGateway, case: tuple[str, Any]
) -> None:
    targets.interceptor(stdio_gateway, *case)


def test_a_failing_or_malformed_verdict_blocks_the_call(stdio_gateway: targets.StdioGateway) -> None:
    for verdict in ({"valid": False}, {"valid": "true"}, [], {"valid": True, "type": "mutation"}):
        answer = stdio_gateway.call("echo", {"text": "x", "verdict": targets.verdict_line(verdict)})
        assert answer["error"]["data"]["interceptor"] == "verdict", (verdict, answer)
    answer = stdio_gateway.call(
        "echo", {"text": "x", "verdict": targets.verdict_line({"code": 1, "message": "no"}, "error")}
    )
    assert answer["error"]["data"]["status"] == "validation_failed"


header_names = st.sampled_from(
    [
        "Content-Type",
        "Accept",
        "Mcp-Session-Id",
        "MCP-Protocol-Version",
        "Host",
        "Origin",
        "Authorization",
        "Content-Length",
        "Last-Event-ID",
        "Transfer-Encoding",
    ]
)
header_values = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40) | st.sampled_from(
    [
        "application/json",
        "text/event-stream",
        "application/json, text/event-stream",
        "2026-07-28",
        "2025-11-25",
        "127.0.0.1",
        "localhost:1",
        "http://evil.example",
        "Bearer x",
        "0",
        "-1",
        "99999999",
        "chunked",
    ]
)
http_bodies = st.one_of(
    st.binary(max_size=200),
    lines.map(b"\n".join),
    messages.map(
        lambda m: json.dumps(
            {**m, "params": {**(m.get("params") if isinstance(m.get("params"), dict) else {}), "_meta": targets.META}}
        ).encode()
    ),
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["POST", "GET", "DELETE", "PUT", "OPTIONS", "HEAD"]),
    st.sampled_from(["/mcp", "/mcp/", "/sse", "/messages/", "/", "/mcp?x=1", "/.well-known/oauth-protected-resource"]),
    st.dictionaries(header_names, header_values, max_size=5),
    http_bodies,
)
def test_the_http_front_never_fails_with_a_5xx_and_keeps_serving(
    http_gateway: targets.HttpGateway, method: str, path: str, headers: dict[str, str], body: bytes
) -> None:
    if method in ("GET",) and path in ("/sse",):
        return  # an event stream: it stays open by design
    base = {} if "Content-Type" in headers else {**http_gateway.headers(), "Mcp-Method": method_of(body)}
    targets.http(http_gateway, method, path, {**base, **headers}, body)


def method_of(body: bytes) -> str:
    try:
        method = json.loads(body).get("method")
    except (ValueError, AttributeError):
        return "ping"
    return method if isinstance(method, str) and method.isascii() and method.isprintable() else "ping"


config_keys = st.sampled_from(
    [
        "upstreams",
        "interceptors",
        "chain",
        "http",
        "auth",
        "audit",
        "scrub",
        "metrics",
        "name",
        "guards",
        "servers",
        "command",
        "args",
        "url",
        "deadline_ms",
        "timeout_ms",
        "session_idle_s",
        "max_sessions",
        "enabled",
        "x",
    ]
)
config_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats()
    | odd_text
    | st.sampled_from(["${TOKEN}", "${MISSING}", "${HOME:-x}", ".inf", "-.nan", "0x10", "1e400", "~"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(config_keys | odd_text, children, max_size=4),
    max_leaves=20,
)


def _dump(value: Any) -> str:
    import yaml

    return yaml.safe_dump(value, allow_unicode=True)


@FAST
@given(st.one_of(config_values.map(_dump), odd_text, st.builds(lambda a, b: a + b, config_values.map(_dump), odd_text)))
def test_the_config_loader_gives_a_config_or_a_config_error(text: str) -> None:
    targets.config(text)


@pytest.fixture(scope="module")
def jwt_keys() -> Iterator[targets.JwtKeys]:
    with tempfile.TemporaryDirectory() as folder:
        yield targets.JwtKeys(Path(folder))


claims = st.dictionaries(
    st.sampled_from(["sub", "iss", "aud", "exp", "nbf", "iat", "scope", "scp", "client_id", "azp", "groups"]),
    json_values | st.sampled_from(["https://issuer.test", "gw", 4102444800, 1.5e300]),
    max_size=8,
)


@FAST
@given(
    st.one_of(
        odd_text,
        st.lists(odd_text, min_size=3, max_size=3).map(".".join),
        st.tuples(claims, st.dictionaries(st.sampled_from(["alg", "kid", "typ", "crit"]), json_values, max_size=2)),
    )
)
def test_a_bearer_token_is_verified_or_refused_never_an_error(jwt_keys: targets.JwtKeys, token: Any) -> None:
    if isinstance(token, tuple):
        claim_set = {"iss": "https://issuer.test", "aud": "gw", "exp": 4102444800, "sub": "u", **token[0]}
        try:
            token = jwt_keys.signed(claim_set, {k: v for k, v in token[1].items() if k != "alg"})
        except (TypeError, ValueError, jwt.PyJWTError):
            return  # PyJWT would not sign it: nothing a client could send
    targets.jwt_token(jwt_keys, token)


def test_a_signed_token_with_an_infinite_or_odd_expiry_is_refused(jwt_keys: targets.JwtKeys) -> None:
    import anyio

    for exp in (float("inf"), float("nan"), "soon", [1], None):
        token = jwt_keys.signed({"iss": "https://issuer.test", "aud": "gw", "sub": "u", "exp": exp})
        assert anyio.run(jwt_keys.verifier.verify_token, token) is None, exp


jwk = st.fixed_dictionaries(
    {"kty": st.sampled_from(["RSA", "EC", "OKP", "oct", "x"]) | odd_text},
    optional={
        k: json_values | st.sampled_from(["AQAB", "P-256", "Ed25519", "AA", ""])
        for k in ["kid", "n", "e", "crv", "x", "y", "d", "k", "alg", "use"]
    },
)


@FAST
@given(
    st.one_of(odd_text, json_values.map(json.dumps), st.lists(jwk, max_size=3).map(lambda ks: json.dumps({"keys": ks})))
)
def test_a_jwks_file_loads_or_is_a_config_error(text: str) -> None:
    targets.jwks(text)


@pytest.fixture(scope="module")
def audit_store(stdio_gateway: targets.StdioGateway) -> Iterator[Path]:
    """A copy of the stdio gateway's audit trail after a few calls (the SQLite backup API: a consistent copy)."""
    for index in range(4):
        stdio_gateway.call("echo", {"text": f"record {index}"})
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "audit.db"
        with (
            closing(sqlite3.connect(stdio_gateway.folder / "audit.db")) as source,
            closing(sqlite3.connect(copy)) as target,
        ):
            source.backup(target)
        assert targets.audit_verify(copy)[0] == 0
        yield copy


edits = st.lists(
    st.one_of(
        st.tuples(st.just("byte"), st.tuples(st.integers(0, 1 << 20), st.integers(0, 255))),
        st.tuples(
            st.just("cell"),
            st.tuples(
                st.integers(0, 100),
                st.integers(0, 30),
                json_values.map(json.dumps) | st.binary(max_size=20) | st.integers(),
            ),
        ),
    ),
    min_size=1,
    max_size=4,
)


@FAST
@given(edits)
def test_audit_verify_reports_a_corrupted_store_never_a_traceback(audit_store: Path, changes: list[Any]) -> None:
    targets.audit(audit_store, changes)


def test_audit_verify_on_a_corrupted_store_names_the_problem_through_the_cli(audit_store: Path, tmp_path: Path) -> None:
    edited, garbled = tmp_path / "edited.db", tmp_path / "garbled.db"
    edited.write_bytes(audit_store.read_bytes())
    with closing(sqlite3.connect(edited)) as db, db:
        db.execute(
            "UPDATE audit_records SET record = replace(record, '\"allow\"', '\"deny\"') "
            "WHERE pos = (SELECT min(pos) FROM audit_records WHERE record LIKE '%\"allow\"%')"
        )
    garbled.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4096)
    for store, code, says in ((edited, 1, "first bad record: "), (garbled, 2, "error")):
        argv = [sys.executable, "-m", "mcp_interceptors", "audit", "verify", "--store", str(store)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == code and "Traceback" not in done.stderr, (done.stdout, done.stderr)
        assert says in done.stdout + done.stderr


def test_a_config_with_a_control_character_is_a_config_error_naming_it(tmp_path: Path) -> None:
    from mcp_interceptors.gateway.config import ConfigError, load_config

    path = tmp_path / "gateway.yaml"
    path.write_text("upstreams:\n  a: {command: x\x1f}\n")
    with pytest.raises(ConfigError, match=r"invalid YAML at character 28: #x001f: special characters are not allowed"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("null", "a JWKS is a JSON object whose `keys` is a list of JWK objects"),
        ('{"keys": [1]}', "a JWKS is a JSON object whose `keys` is a list of JWK objects"),
        ('{"keys": [{"kty": "RSA", "alg": [null]}]}', "a key of the file cannot be read (TypeError"),
    ],
)
def test_a_jwks_file_of_the_wrong_shape_is_a_config_error_naming_the_field(
    tmp_path: Path, text: str, says: str
) -> None:
    from mcp_interceptors.gateway.auth import JwtVerifier
    from mcp_interceptors.gateway.config import AuthConfig, ConfigError

    (tmp_path / "keys.json").write_text(text)
    auth = AuthConfig.model_validate({"jwt": {"jwks_file": str(tmp_path / "keys.json"), "issuer": "i"}})
    with pytest.raises(ConfigError, match=r"auth\.jwt\.jwks_file") as caught:
        JwtVerifier(auth)
    assert says in str(caught.value)


def test_the_campaign_script_runs_every_target() -> None:
    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "bench/fuzz_gateway.py", "--all", "--runs", "3"]
    done = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    reported = [line.split()[0] for line in done.stdout.splitlines() if "inputs in" in line]
    assert reported == ["peer", "stdio", "upstream", "interceptor", "http", "config", "jwt", "jwks", "audit"]


def test_audit_verify_names_a_store_whose_schema_bytes_are_damaged(audit_store: Path, tmp_path: Path) -> None:
    data = bytearray(audit_store.read_bytes())
    data[data.index(b"CREATE TABLE audit_records") + 7] = 0x80  # SQLite then quotes bytes that are no UTF-8
    (tmp_path / "audit.db").write_bytes(bytes(data))
    code, text = targets.audit_verify(tmp_path / "audit.db")
    assert code == 2 and text.startswith("error: cannot open the audit database "), text
