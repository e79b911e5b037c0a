"""A gateway that cannot start says why before anything starts: every config and bind check runs before any
upstream or interceptor server is started (each server here touches a marker file as it starts), and a stdio
server whose command is missing is named with its command.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from e2e_support import INTERCEPTOR_SERVER, UPSTREAM, ConfigWriter, gateway_env
from helpers import cli_argv, free_tcp_port, run_cli, running, until

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

#: Touches argv[1], then runs the script argv[2] as its `__main__`: a server that leaves a trace when started.
MARKED = (
    "import pathlib, runpy, sys; pathlib.Path(sys.argv[1]).touch(); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def marked(marker: Path, script: str = UPSTREAM) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-c", MARKED, str(marker), script]}


def config_with(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """An upstream and an interceptor server that each touch their marker file when started."""
    config: dict[str, Any] = {
        "upstreams": {"e2e": marked(tmp_path / "upstream.started")},
        "interceptors": {
            "servers": [{"name": "remote", **marked(tmp_path / "server.started", INTERCEPTOR_SERVER)}],
        },
    }
    config.update(extra)
    return config


def started(tmp_path: Path) -> list[str]:
    return sorted(path.name for path in tmp_path.glob("*.started"))


async def refusal(config: Path, *options: str) -> tuple[int, str]:
    done = await run_cli("gateway", "--config", str(config), *options, env=gateway_env())
    lines = done.stderr.decode().strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


async def test_the_marked_servers_do_start_when_nothing_is_wrong(write_config: ConfigWriter, tmp_path: Path) -> None:
    """The control: the markers below stay absent because of the refusal, not because they never appear."""
    config = write_config(config_with(tmp_path))
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=gateway_env(), label="HTTP gateway"):
        with anyio.fail_after(30):
            await until(lambda: started(tmp_path) == ["server.started", "upstream.started"])


async def test_a_wildcard_bind_without_auth_is_refused_before_any_server_starts(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    config = write_config(config_with(tmp_path))
    code, line = await refusal(config, "--http", f"0.0.0.0:{free_tcp_port()}")
    assert (code, started(tmp_path)) == (1, [])
    assert line.startswith("mcp-interceptors gateway: error: refusing to serve 0.0.0.0:")
    assert line.endswith("without authentication; configure `auth` (tokens or jwt) or pass --insecure-no-auth")


async def test_a_port_in_use_is_refused_before_any_server_starts(write_config: ConfigWriter, tmp_path: Path) -> None:
    config = write_config(config_with(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, line = await refusal(config, "--http", f"127.0.0.1:{port}")
    assert (code, started(tmp_path)) == (1, [])
    assert line == f"mcp-interceptors gateway: error: cannot listen on 127.0.0.1:{port}: Address already in use"


async def test_a_taken_metrics_port_is_refused_before_any_server_starts(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(config_with(tmp_path, metrics={"listen": f"127.0.0.1:{port}"}))
        code, line = await refusal(config)
    assert (code, started(tmp_path)) == (1, [])
    assert line.endswith(f"metrics.listen in {config}: cannot listen on 127.0.0.1:{port}: Address already in use")


async def test_a_bad_jwt_key_file_is_refused_before_any_server_starts(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    (tmp_path / "key.pem").write_text("not a key\n")
    jwt = {"public_key_file": "key.pem", "issuer": "https://issuer.example", "audience": "gateway"}
    config = write_config(config_with(tmp_path, auth={"jwt": jwt}))
    code, line = await refusal(config, "--http", f"127.0.0.1:{free_tcp_port()}")
    assert (code, started(tmp_path)) == (1, [])
    assert line.startswith(f"mcp-interceptors gateway: error: {config}: auth.jwt.public_key_file: ")
    assert "no PEM public key" in line


@pytest.mark.parametrize("store", ["folder", "garbage"])
async def test_an_audit_store_it_cannot_open_is_refused_before_any_server_starts(
    write_config: ConfigWriter, tmp_path: Path, store: str
) -> None:
    path = tmp_path / "audit.db"
    if store == "folder":
        path.mkdir()
    else:
        path.write_text("not a database\n" * 100)
    config = write_config(config_with(tmp_path, audit={"enabled": True, "store": str(path)}))
    code, line = await refusal(config, "--http", f"127.0.0.1:{free_tcp_port()}")
    assert (code, started(tmp_path)) == (1, [])
    expected = (
        f"{config}: audit.store: {str(path)!r} is a folder, not a database file"
        if store == "folder"
        else f"cannot open the audit database {path}: file is not a database"
    )
    assert line.startswith(f"mcp-interceptors gateway: error: {expected}")


async def test_an_unknown_guard_is_refused_before_any_server_starts(write_config: ConfigWriter, tmp_path: Path) -> None:
    config = config_with(tmp_path)
    config["interceptors"]["guards"] = [{"name": "secretz"}]
    code, line = await refusal(write_config(config), "--http", f"127.0.0.1:{free_tcp_port()}")
    assert (code, started(tmp_path)) == (1, [])
    assert "interceptors.guards[0].name: unknown guard 'secretz'" in line


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_missing_upstream_command_is_named_before_any_server_starts(
    write_config: ConfigWriter, tmp_path: Path, transport: str
) -> None:
    config = config_with(tmp_path)
    config["upstreams"]["fs"] = {"command": "npx-not-installed-here", "args": ["-y", "server-filesystem"]}
    path = write_config(config)
    options = ("--http", f"127.0.0.1:{free_tcp_port()}") if transport == "http" else ()
    code, line = await refusal(path, *options)
    assert (code, started(tmp_path)) == (1, [])
    assert line == (
        f"mcp-interceptors gateway: error: {path}: upstreams.fs.command: upstream 'fs': command "
        "'npx-not-installed-here' not found on PATH (fix: install it, or give its full path)"
    )


async def test_a_missing_interceptor_server_command_and_folder_are_named(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    config = config_with(tmp_path)
    config["interceptors"]["servers"].append({"name": "gone", "command": str(tmp_path / "bin" / "guard")})
    code, line = await refusal(write_config(config))
    assert (code, started(tmp_path)) == (1, [])
    assert line.endswith(
        f"interceptors.servers[1].command: interceptor server 'gone': command '{tmp_path / 'bin' / 'guard'}' "
        "not found (fix: install it, or give its full path)"
    )
    config["interceptors"]["servers"][1] = {**marked(tmp_path / "x.started"), "name": "gone", "cwd": "nowhere"}
    code, line = await refusal(write_config(config))
    assert (code, started(tmp_path)) == (1, [])
    assert f"interceptors.servers[1].cwd: interceptor server 'gone': command {sys.executable!r} cannot run in " in line
    assert line.endswith("no such folder (fix: create the folder)")


async def test_check_names_a_missing_command_the_same_way(write_config: ConfigWriter, tmp_path: Path) -> None:
    config = write_config({"upstreams": {"fs": {"command": "npx-not-installed-here"}}})
    done = await run_cli("gateway", "--check", str(config), env=gateway_env())
    assert done.returncode == 0  # a config may be checked on another machine than the one that runs it
    assert done.stderr.decode().splitlines() == [
        "warning: upstream 'fs': command 'npx-not-installed-here' not found on PATH (upstreams.fs.command)"
    ]
