"""`wrap-client-config PATH`: rewrite a desktop client's config so each of its MCP servers runs behind the
gateway, and `--undo` to put them back.

Each server entry becomes a stdio entry that starts this gateway by absolute path (GUI clients do not
have a virtualenv on their PATH), fronting only that server, with the guards given; the client still
sees one server per entry, with the same tool names. The original entries move, verbatim, to a servers
file beside the config (`<stem>.gateway-upstreams.json`, mode 0600: their `env` and `headers` may hold
secrets), which the gateway reads as a client config. The client-only keys of an entry (`disabled`,
`autoApprove`, ...) stay on it. Running it again refreshes the guards of wrapped entries and wraps new
ones; it never wraps twice. Every change is preceded by a backup `PATH.bak-<time>`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp_interceptors.cli._commands import SERVERS_SUFFIX
from mcp_interceptors.cli._common import CommandError, GuardChoice
from mcp_interceptors.gateway.config.client_configs import SERVER_LISTS, client_only_keys


def launcher() -> list[str]:
    """This installation's `mcp-interceptors`, by absolute path: its entry-point script, else `python -m`."""
    script = Path(sys.executable).with_name("mcp-interceptors.exe" if os.name == "nt" else "mcp-interceptors")
    if script.is_file():
        return [str(script.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "mcp_interceptors"]


def servers_file_of(path: Path) -> Path:
    return path.with_name(path.stem + SERVERS_SUFFIX)


def run_wrap(args: argparse.Namespace) -> int:
    if args.stdio_command:
        raise CommandError("wrap-client-config takes no command after --", 2)
    if args.undo and (args.guard or args.gateway_config):
        raise CommandError("--undo puts the original entries back: give it without --guard or --gateway-config", 2)
    if args.guard and args.gateway_config:
        raise CommandError("give --guard or --gateway-config (which lists its own guards), not both", 2)
    if args.gateway_config:
        _check_gateway_config(Path(args.gateway_config))
    path = Path(args.path).absolute()
    config = _read_json(path, required=True)
    key = next((name for name in SERVER_LISTS if isinstance(config.get(name), dict)), None)
    if key is None:
        raise CommandError(f"{path}: no {' or '.join(SERVER_LISTS)} object: not a client config", 1)
    servers_file = servers_file_of(path)
    stored = _read_json(servers_file, required=False).get(key, {})
    if not isinstance(stored, dict):
        raise CommandError(f"{servers_file}: {key} must be an object", 1)
    if args.gateway_config:
        gateway = ["--config", str(Path(args.gateway_config).absolute()), "--servers", str(servers_file)]
    else:
        guards: list[GuardChoice] = args.guard or [("secrets", None)]
        gateway = ["--config", str(servers_file), *[a for g, c in guards for a in ("--guard", _guard_text(g, c))]]
    if args.undo:
        entries, changed = _unwrapped(config[key], stored, servers_file)
    else:
        entries, changed = _wrapped(config[key], stored, servers_file, gateway, vscode=key == "servers")
    rewritten = {**config, key: entries}
    if args.dry_run:
        print(json.dumps(rewritten, indent=2, ensure_ascii=False))
        return 0
    if not changed:
        print(f"{path}: nothing to change", file=sys.stderr)
        return 0
    backup = _backup(path)
    if stored:
        _write_json(servers_file, {key: stored}, mode=0o600)
    else:
        servers_file.unlink(missing_ok=True)
    _write_json(path, rewritten, mode=path.stat().st_mode & 0o777)
    verb = "put back" if args.undo else "routed through the gateway"
    print(f"{path}: {', '.join(changed)} {verb}; backup: {backup}", file=sys.stderr)
    return 0


def _backup(path: Path) -> Path:
    """A copy of `path` beside it, under a name no earlier backup has."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = path.with_name(f"{path.name}.bak-{stamp}")
    count = 1
    while backup.exists():
        count += 1
        backup = path.with_name(f"{path.name}.bak-{stamp}-{count}")
    shutil.copy2(path, backup)
    return backup


def _wrapped(
    entries: dict[str, Any], stored: dict[str, Any], servers_file: Path, options: list[str], *, vscode: bool
) -> tuple[dict[str, Any], list[str]]:
    """Every entry as a gateway entry with `options` (`stored` gains the originals); the names whose entry changed."""
    result: dict[str, Any] = {}
    changed: list[str] = []
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise CommandError(f"server {name!r} is not an object", 1)
        if _wrapped_by(entry) is None:
            stored[name] = {k: v for k, v in entry.items() if k != "disabled"}  # the client's switch stays its own
        elif name not in stored:
            raise CommandError(f"server {name!r} runs through the gateway, but {servers_file} has no original of it", 1)
        gateway = [*launcher(), "gateway", *options, "--upstream", name]
        wrapped: dict[str, Any] = {"type": "stdio"} if vscode else {}
        wrapped.update(command=gateway[0], args=gateway[1:], **client_only_keys(entry))
        result[name] = wrapped
        if wrapped != entry:
            changed.append(name)
    return result, changed


def _unwrapped(entries: dict[str, Any], stored: dict[str, Any], servers_file: Path) -> tuple[dict[str, Any], list[str]]:
    """Every gateway entry as its original (taken out of `stored`); the names put back."""
    result: dict[str, Any] = {}
    changed: list[str] = []
    for name, entry in entries.items():
        if not isinstance(entry, dict) or _wrapped_by(entry) is None:
            result[name] = entry
            continue
        if name not in stored:
            raise CommandError(f"server {name!r} runs through the gateway, but {servers_file} has no original of it", 1)
        result[name] = {**stored.pop(name), **client_only_keys(entry)}
        changed.append(name)
    return result, changed


def _wrapped_by(entry: dict[str, Any]) -> str | None:
    """The servers file a gateway entry reads (`gateway --config FILE --upstream NAME`), or None for others."""
    command, args = entry.get("command"), entry.get("args")
    if not isinstance(command, str) or not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return None
    argv = [command, *args]
    if "gateway" not in argv or "--upstream" not in argv or "--config" not in argv:
        return None
    program = Path(command).name.removesuffix(".exe")
    if program != "mcp-interceptors" and argv[1:3] != ["-m", "mcp_interceptors"]:
        return None
    option = argv.index("--servers" if "--servers" in argv else "--config")  # where the originals are
    return argv[option + 1] if option + 1 < len(argv) else None


def _check_gateway_config(path: Path) -> None:
    """A gateway config (not a client's), valid as far as reading it goes: a typo is found now, not by the
    client failing to start every server."""
    from mcp_interceptors.gateway.config import ConfigError, read_config_document

    try:
        document = read_config_document(path)
    except ConfigError as exc:
        raise CommandError(str(exc), 1) from None
    if document.client:
        raise CommandError(f"--gateway-config {path} is a client's server list, not a gateway config", 2)


def _guard_text(name: str, config: dict[str, Any] | None) -> str:
    return name if config is None else f"{name}={json.dumps(config, separators=(',', ':'))}"


def _read_json(path: Path, *, required: bool) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise CommandError(f"{path}: no such file", 1) from None
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"{path}: cannot read it ({exc})", 1) from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise CommandError(
            f"{path}: not JSON that can be rewritten ({exc}); comments are not kept, remove them", 1
        ) from None
    if not isinstance(data, dict):
        raise CommandError(f"{path}: the file must hold a JSON object", 1)
    return data


def _write_json(path: Path, data: dict[str, Any], *, mode: int) -> None:
    """Replace `path` at once (a client reading it meanwhile sees the old file or the new one, never half)."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2, ensure_ascii=False)
            out.write("\n")
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
