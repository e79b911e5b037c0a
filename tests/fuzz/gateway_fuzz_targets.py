"""Fuzz targets for every place bytes from outside enter the gateway, shared by the short hypothesis tests of
the normal suite (`test_gateway_fuzz.py`) and the long campaigns of `bench/fuzz_gateway.py`.

Each target takes one input and raises AssertionError when an invariant breaks:

- `peer`: byte chunks read by a `JsonRpcPeer`: every line written back is a JSON-RPC answer, a ping after
  them is answered once, `run` never raises;
- `stdio`: lines written to a real stdio gateway: it answers a ping after them and writes only JSON lines;
- `upstream`: the line a fake upstream answers a call with: the call gets exactly one answer, a result
  object or an error with an integer code;
- `interceptor`: the answer a remote interceptor server gives an `interceptor/invoke`: the call gets one
  answer, and is forwarded only on a passing verdict (fail closed);
- `http`: method, path, headers and body of a raw request to a real HTTP gateway: never a 5xx, and the
  gateway serves a valid request after it;
- `config`: the text of `gateway.yaml`: `load_config` gives a config or a `ConfigError`, nothing else;
- `jwt`, `jwks`: a bearer token, a JWKS file: `verify_token` gives a token or None; a key file loads or
  raises `ConfigError`;
- `audit`: edits of a real SQLite audit store: `audit verify` reports (OK, FAILED naming a record, or an
  error line), never a traceback; an edited record is found.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import queue
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

import anyio
import yaml

FUZZ_DIR = Path(__file__).resolve().parent
ROOT = FUZZ_DIR.parents[1]
PEERS = str(FUZZ_DIR / "fuzz_peers.py")
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz-client", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
#: Credentials the gateway's `secrets` guard redacts: none may reach the upstream's log.
SECRET_CORPUS = (
    "AKIAQYLPMN5HHHFPZAM2",
    "ghp_" + "R8yJ3mVq2LxN5tK7wZ1bC4dF6gH9jA0sE2uP",
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
)
ANSWER_TIMEOUT_S = 30.0
#: How long a crashed upstream may take to be back: the gateway's restart backoff doubles while it crash-loops
#: (0.2 s up to 10 s), and a call waits only its upstream's timeout for the restart.
RECOVERY_S = 30.0
#: The errors an injected fault gives the calls it takes down: the upstream closed (-32000), timed out (-32001).
FAULT_CODES = (-32000, -32001)
_ids = itertools.count(1)
# Only ids the harness drew count for "answered twice": fuzzed lines may repeat an id of their own (hypothesis
# replays an example's data), and two requests sent with one id rightly get two answers.
_issued: set[str] = set()


def next_id(prefix: str) -> str:
    request_id = f"{prefix}-{os.getpid()}-{next(_ids)}"
    _issued.add(request_id)
    return request_id


def gateway_config(
    folder: Path,
    *,
    audit: bool = True,
    upstream_timeout_ms: int = 3000,
    receipts: bool = False,
    http: dict[str, Any] | None = None,
) -> Path:
    """A gateway with the fuzz upstream (tools `echo`, `answer`, `crash`, `hang`, `progress`), the fuzz
    interceptor server and the `secrets` guard, writing a signed audit trail to `folder`; `http` adds to its
    `http:` settings."""
    python = sys.executable
    log = str(folder / "upstream.log")
    config: dict[str, Any] = {
        "upstreams": {
            "fz": {
                "command": python,
                "args": [PEERS, "upstream"],
                "era": "legacy",
                "timeout_ms": upstream_timeout_ms,
                "env": {"FUZZ_LOG": log},
            }
        },
        "interceptors": {
            "guards": [{"name": "secrets"}],
            "servers": [
                {"name": "fuzzhost", "command": python, "args": [PEERS, "host"], "era": "legacy", "timeout_ms": 2000}
            ],
        },
        "http": {"max_sessions": 64, **(http or {})},
    }
    if audit:
        config["audit"] = {
            "enabled": True,
            "store": str(folder / "audit.db"),
            "key_file": str(folder / "audit-key"),
            "receipts": receipts,
        }
    path = folder / "gateway.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class StdioGateway:
    """A real stdio gateway (the CLI as a child) driven synchronously: a thread reads its answers."""

    def __init__(self, folder: Path, **config: Any) -> None:
        self.folder = folder
        self.config = gateway_config(folder, **config)
        self.stderr = open(folder / "gateway.stderr", "wb")  # noqa: SIM115
        argv = [sys.executable, "-m", "mcp_interceptors", "gateway", "--config", str(self.config)]
        self.popen = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, start_new_session=True
        )
        self.answers: Counter[Any] = Counter()
        self.not_json: list[bytes] = []
        self._waiting: dict[Any, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        self.handshake()

    def handshake(self) -> None:
        """The handshake era's `initialize`, then `tools/list` (a call names only a tool it was shown)."""
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}
        started = self.request("initialize", params, timeout=90)
        assert "result" in started, started
        self.send_bytes(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        listed = self.request("tools/list")
        assert "result" in listed, listed

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                self.not_json.append(line[:200])
                continue
            if not isinstance(message, dict) or "method" in message:
                continue  # a request or notification of the gateway's own
            key = message.get("id")
            key = key if isinstance(key, str | int) else None
            with self._lock:
                self.answers[key] += 1
                waiter = self._waiting.get(key)
            if waiter is not None:
                waiter.put(message)

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def stderr_tail(self, lines: int = 30) -> str:
        text = (self.folder / "gateway.stderr").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def send_bytes(self, data: bytes) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(data)
        self.popen.stdin.flush()

    def request(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = ANSWER_TIMEOUT_S
    ) -> dict[str, Any]:
        """Send a request and wait for its one answer."""
        request_id = next_id("q")
        body = dict(params or {})
        waiter: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            self._waiting[request_id] = waiter
        self.send_bytes(
            json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}).encode() + b"\n"
        )
        try:
            return waiter.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no answer to {method} within {timeout} s (alive: {self.alive})\n{self.stderr_tail()}"
            ) from None
        finally:
            with self._lock:
                del self._waiting[request_id]

    def call(self, tool: str, arguments: dict[str, Any], timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments}, timeout)

    def assert_serving(self) -> None:
        answer = self.request("ping")
        assert answer.get("result") == {}, answer
        assert self.alive, self.stderr_tail()
        assert not self.not_json, f"non-JSON lines on stdout: {self.not_json[:3]}"

    def answered_twice(self) -> list[Any]:
        with self._lock:
            return [key for key, count in self.answers.items() if key in _issued and count > 1]

    def close(self) -> None:
        try:
            if self.popen.stdin is not None:
                self.popen.stdin.close()
            self.popen.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            self.popen.kill()
            self.popen.wait()
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self.stderr.close()


def assert_recovers(echo: Callable[[], dict[str, Any]]) -> None:
    """After a crash the upstream is back: `echo` gets its result within `RECOVERY_S`, and only a fault's
    error before that."""
    deadline = time.monotonic() + RECOVERY_S
    while "result" not in (answer := echo()):
        assert answer["error"]["code"] in FAULT_CODES and time.monotonic() < deadline, answer
        time.sleep(0.1)


def is_answer(message: Any) -> bool:
    """A JSON-RPC answer: a result object, or an error with an integer code and a string message."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return False
    if "result" in message:
        return isinstance(message["result"], dict) and "error" not in message
    error = message.get("error")
    return isinstance(error, dict) and type(error.get("code")) is int and isinstance(error.get("message"), str)


RECEIPT = "io.github.mcp-interceptors/receipt"


def assert_settled(store: Path, answer: dict[str, Any]) -> None:
    """A call answered with a result (not `isError`) has its records in `store`, named by its receipt."""
    result = answer.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        return
    receipt = (result.get("_meta") or {}).get(RECEIPT)
    assert receipt is not None, f"a settled call without its receipt: {answer}"
    ids = [record["id"] for record in receipt["records"]]
    with closing(sqlite3.connect(store)) as db:
        marks = ",".join("?" * len(ids))
        stored = {row[0] for row in db.execute(f"SELECT id FROM audit_records WHERE id IN ({marks})", ids)}
    assert ids and stored == set(ids), (ids, answer)


def open_calls(store: Path) -> list[str]:
    """Calls with a request record and no record closing them (as `audit verify` counts them)."""
    with closing(sqlite3.connect(store)) as db:
        rows = db.execute(
            "SELECT call_id FROM audit_records WHERE kind = 'decision' AND call_id IS NOT NULL GROUP BY call_id "
            "HAVING SUM(phase = 'response' OR json_extract(record, '$.body.decision') != 'allow') = 0"
        )
        return [row[0] for row in rows]


def assert_calls_close(store: Path, within_s: float = ANSWER_TIMEOUT_S) -> None:
    """Every call begun is closed in the trail within `within_s` (the gateway is another process: poll)."""
    deadline = time.monotonic() + within_s
    while (still := open_calls(store)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not still, f"calls still open after {within_s:.0f} s: {still}"


def assert_no_secret_reached(folder: Path) -> None:
    """No credential of the corpus is in the upstream's log (every line it read)."""
    log = (folder / "upstream.log").read_text(errors="replace")
    for secret in SECRET_CORPUS:
        assert secret not in log, f"{secret} reached the upstream"


# --- targets through a real gateway ---------------------------------------------------------------------------


def stdio(gateway: StdioGateway, lines: list[bytes]) -> None:
    gateway.send_bytes(b"".join(line.replace(b"\n", b" ") + b"\n" for line in lines))
    gateway.assert_serving()


def upstream(gateway: StdioGateway, line: str) -> None:
    answer = gateway.call("answer", {"line": line})
    assert is_answer(answer), answer
    gateway.assert_serving()
    assert answer["id"] not in gateway.answered_twice(), answer


def verdict_allows(verdict: Any) -> bool:
    """Whether an `interceptor/invoke` result may let a call through: a validation verdict that passes."""
    if not isinstance(verdict, dict) or not isinstance(verdict.get("valid"), bool):
        return False
    return verdict["valid"] or verdict.get("severity") in ("info", "warn")


def interceptor(gateway: StdioGateway, answer_line: str, verdict: Any) -> None:
    """`answer_line` is the host's raw answer; `verdict` the result it carries (None: it carries none that
    answers the invocation, so the host's following `valid: true` decides)."""
    try:
        json.dumps(verdict, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except ValueError:  # UnicodeEncodeError too
        # Infinity, NaN or a lone surrogate: no JSON a reader takes, so the line may answer nothing and the
        # host's following `valid: true` decide
        verdict = None
    answer = gateway.call("echo", {"text": "through", "verdict": answer_line})
    assert is_answer(answer), answer
    forwarded = "result" in answer and not answer["result"].get("isError")
    if verdict is not None and forwarded:
        assert verdict_allows(verdict), f"forwarded on verdict {verdict!r}: {answer}"
    gateway.assert_serving()


def verdict_line(verdict: Any, kind: str = "result") -> str:
    body = json.dumps(verdict, allow_nan=True)
    return '{"jsonrpc": "2.0", "id": $ID, "' + kind + '": ' + body + "}"


# --- the HTTP front ------------------------------------------------------------------------------------------


class HttpGateway:
    """A real Streamable HTTP gateway (the CLI as a child on a loopback port)."""

    def __init__(
        self,
        folder: Path,
        *,
        audit: bool = False,
        upstream_timeout_ms: int = 3000,
        receipts: bool = False,
        http: dict[str, Any] | None = None,
    ) -> None:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.folder = folder
        config = gateway_config(
            folder, audit=audit, upstream_timeout_ms=upstream_timeout_ms, receipts=receipts, http=http
        )
        self.stderr = open(folder / "http.stderr", "wb")  # noqa: SIM115
        argv = [
            sys.executable,
            "-m",
            "mcp_interceptors",
            "gateway",
            "--config",
            str(config),
            "--http",
            f"127.0.0.1:{self.port}",
        ]
        self.popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr, start_new_session=True
        )
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        import httpx2

        self.client = httpx2.Client(timeout=ANSWER_TIMEOUT_S)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.ping()
                return
            except (httpx2.HTTPError, AssertionError):
                if time.monotonic() > deadline or self.popen.poll() is not None:
                    self.close()
                    raise AssertionError(f"the HTTP gateway did not start\n{self.stderr_tail()}") from None
                time.sleep(0.1)

    def stderr_tail(self, lines: int = 30) -> str:
        return "\n".join((self.folder / "http.stderr").read_text(errors="replace").splitlines()[-lines:])

    def headers(self) -> dict[str, str]:
        return {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
        }

    def ping(self) -> None:
        """A 2026-07-28 `server/discover` (that era has no `ping`) must be answered."""
        body = {"jsonrpc": "2.0", "id": next_id("p"), "method": "server/discover", "params": {"_meta": META}}
        reply = self.client.post(self.url, json=body, headers={**self.headers(), "Mcp-Method": "server/discover"})
        assert reply.status_code == 200, (reply.status_code, reply.text[:300])

    def send(self, method: str, path: str, headers: dict[str, str], body: bytes) -> int:
        """One request on a socket of its own, written raw (a client library would refuse odd headers);
        the answer's status, or 0 when the server closed the connection without one."""
        import socket

        head = [f"{method} {path} HTTP/1.1"]
        given = {name.lower() for name in headers}
        if "host" not in given:
            head.append(f"Host: 127.0.0.1:{self.port}")
        if "content-length" not in given and "transfer-encoding" not in given:
            head.append(f"Content-Length: {len(body)}")
        head += [f"{name}: {value}" for name, value in headers.items()] + ["Connection: close", "", ""]
        with socket.create_connection(("127.0.0.1", self.port), timeout=ANSWER_TIMEOUT_S) as sock:
            sock.sendall("\r\n".join(head).encode("latin-1", "replace") + body)
            sock.shutdown(socket.SHUT_WR)
            reply = b""
            while b"\r\n" not in reply:
                chunk = sock.recv(4096)
                if not chunk:
                    return 0
                reply += chunk
        return int(reply.split(b" ", 2)[1])

    def close(self) -> None:
        self.client.close()
        self.popen.terminate()
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self.stderr.close()


def http(gateway: HttpGateway, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
    status = gateway.send(method, path, headers, body)
    assert status < 500, f"{method} {path} {headers} {body[:200]!r} -> {status}\n{gateway.stderr_tail()}"
    gateway.ping()
    assert gateway.popen.poll() is None, gateway.stderr_tail()


# --- in-process targets ----------------------------------------------------------------------------------------


async def run_peer(chunks: list[bytes]) -> None:
    """Feed `chunks` to a `JsonRpcPeer` serving an echo handler, then a ping; check what it wrote."""
    from mcp_interceptors.gateway.jsonrpc.peer import JsonRpcPeer

    final = b'\n{"jsonrpc": "2.0", "id": "final-ping", "method": "ping"}\n'
    feed = [*(chunk for chunk in chunks if chunk), final]  # an empty read is the end of input
    written: list[bytes] = []

    async def read() -> bytes:
        await anyio.lowlevel.checkpoint()
        return feed.pop(0) if feed else b""

    async def write(data: bytes) -> None:
        written.append(data)

    async def on_request(request_id: Any, method: str, params: dict[str, Any] | None) -> Any:
        if method == "fail":
            raise ValueError("handler failed")
        return {"method": method}

    async def on_notify(request_id: Any, method: str, params: dict[str, Any] | None) -> None:
        return None

    peer = JsonRpcPeer(read, write, max_line_bytes=4096, max_in_flight=64)
    with anyio.fail_after(10):
        await peer.run(on_request, on_notify, drain_s=5)
    answers = [json.loads(line) for line in b"".join(written).splitlines() if line.strip()]
    for answer in answers:
        assert is_answer(answer) or (answer.get("error") and answer.get("id") is None), answer
    if peer.close_reason is None:
        finals = [a for a in answers if a.get("id") == "final-ping"]
        assert len(finals) == 1 and finals[0].get("result") == {"method": "ping"}, answers[-3:]


def peer(chunks: list[bytes]) -> None:
    anyio.run(run_peer, chunks)


def config(text: str) -> None:
    from mcp_interceptors.gateway.config import ConfigError, load_config

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gateway.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            load_config(path, env={"HOME": folder, "TOKEN": "t"})
        except ConfigError as exc:
            assert str(exc), "a ConfigError with no message"


class JwtKeys:
    """An RSA key pair and a JWKS for it, in a folder, and the verifier of the gateway over them."""

    def __init__(self, folder: Path) -> None:
        import jwt
        from cryptography.hazmat.primitives.asymmetric import rsa

        from mcp_interceptors.gateway.auth import JwtVerifier
        from mcp_interceptors.gateway.config import AuthConfig

        self.folder = folder
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key()))
        jwk["kid"] = "k1"
        (folder / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
        self.auth = AuthConfig.model_validate(
            {"jwt": {"jwks_file": str(folder / "jwks.json"), "issuer": "https://issuer.test", "audience": "gw"}}
        )
        self.verifier = JwtVerifier(self.auth)

    def signed(self, claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
        import jwt

        return jwt.encode(claims, self.private, algorithm="RS256", headers={"kid": "k1", **(header or {})})


def jwt_token(keys: JwtKeys, token: str) -> None:
    from mcp.server.auth.provider import AccessToken

    verified = anyio.run(keys.verifier.verify_token, token)
    assert verified is None or isinstance(verified, AccessToken)


def jwks(text: str) -> None:
    from mcp_interceptors.gateway.auth import JwtVerifier
    from mcp_interceptors.gateway.config import AuthConfig, ConfigError

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "keys.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        auth = AuthConfig.model_validate({"jwt": {"jwks_file": str(path), "issuer": "i"}})
        try:
            verifier = JwtVerifier(auth)
        except ConfigError:
            return
        token = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJ4In0.c2ln"
        assert anyio.run(verifier.verify_token, token) is None


def audit_verify(store: Path) -> tuple[int, str]:
    """`audit verify` of `store` as the CLI runs it: its exit code and what it printed."""
    from mcp_interceptors.audit import commands

    out, err = io.StringIO(), io.StringIO()
    code = commands.verify(str(store), out, key_path=None, err=err)
    return code, out.getvalue() + err.getvalue()


def audit(pristine: Path, edits: list[tuple[str, Any]]) -> None:
    """Apply `edits` to a copy of a real store: ("byte", (offset, value)) flips a byte of the file, and
    ("cell", (row, column, value)) rewrites one stored value; `audit verify` must then report, not raise."""
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "audit.db"
        data = bytearray(pristine.read_bytes())
        changed_cells = False
        for kind, edit in edits:
            if kind == "byte":
                offset, value = edit
                data[offset % len(data)] = value
        store.write_bytes(bytes(data))
        for kind, edit in edits:
            if kind == "cell":
                # the file may be no database any more (its schema no UTF-8 text, which Python's sqlite3
                # raises as UnicodeDecodeError), or SQLite refuse the value: no edit
                with suppress(sqlite3.Error, OverflowError, UnicodeDecodeError):
                    changed_cells = _edit_cell(store, *edit) or changed_cells
        code, text = audit_verify(store)
        assert "Traceback" not in text, text
        assert code in (0, 1, 2) and text.strip(), (code, text)
        if code != 0:
            assert text.startswith(("FAILED", "note:")) or "error" in text, text
        if changed_cells and not any(kind == "byte" for kind, _ in edits):
            assert code != 0, f"an edited record passed verification: {text}"


def _edit_cell(store: Path, row: int, column: int, value: Any) -> bool:
    """Rewrite one value of the records table (row and column taken modulo its size); True if it changed."""
    with closing(sqlite3.connect(store)) as db, db:
        table = _records_table(db)
        # `pos` only orders the rows: renumbering it in order is no edit of the trail
        columns = [info[1] for info in db.execute(f"PRAGMA table_info({table})") if info[1] != "pos"]
        rowids = [r[0] for r in db.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        if not rowids or not columns:
            return False
        name, rowid = columns[column % len(columns)], rowids[row % len(rowids)]
        (before,) = db.execute(f"SELECT {name} FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
        if before == value and type(before) is type(value):
            return False
        try:
            db.execute(f"UPDATE {table} SET {name} = ? WHERE rowid = ?", (value, rowid))
        except (sqlite3.Error, OverflowError):  # a value the column's constraints refuse: no edit
            return False
        return True


def _records_table(db: sqlite3.Connection) -> str:
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return "audit_records" if "audit_records" in names else names[0]
