"""Reading `gateway.yaml`: YAML, `${ENV}` substitution, validation, and errors naming file, field and fix."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mcp_interceptors.gateway.config.base import ConfigError, redact_values
from mcp_interceptors.gateway.config.client_configs import (
    client_upstreams,
    server_list_key,
    upstream_name,
    workspace_of,
)
from mcp_interceptors.gateway.config.document import GatewayConfig
from mcp_interceptors.gateway.config.reading import MAX_DEPTH, read_document
from mcp_interceptors.gateway.config.servers import InterceptorsConfig
from mcp_interceptors.gateway.config.settings import HttpConfig
from mcp_interceptors.gateway.routing import SEPARATOR

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_ENV = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute_env(
    value: Any, env: Mapping[str, str], file: str, path: str = "", *, used: dict[str, str] | None = None
) -> Any:
    """Replace `${VAR}` and `${VAR:-default}` (the default if VAR is unset or empty, as in the shell) in
    every string; a missing VAR without a default is a `ConfigError`.
    `$${VAR}` stands for a literal `${VAR}` (a CEL expression or pattern may need one).
    `used` collects each value taken from `env`, with its VAR (defaults are written in the file).
    The values are checked as `checked_values` does."""

    def substitute(text: str, where: str) -> str:
        def replace(match: re.Match[str]) -> str:
            escaped, name, default = match.group(1), match.group(2), match.group(3)
            if escaped:
                return match.group(0)[1:]
            if default is not None and not env.get(name):  # `:-` as in the shell: unset or empty
                return default
            if name in env:
                if used is not None:
                    used[env[name]] = name
                return env[name]
            fix = f"export {name}=... or write ${{{name}:-default}}"
            raise ConfigError(file, where, f"environment variable {name} is not set", fix)

        return _ENV.sub(replace, text)

    return _plain(value, file, path, 0, substitute)


def checked_values(value: Any, file: str, path: str = "") -> Any:
    """`value` as a tree of its own (what YAML aliases shared is copied), once every number in it is
    finite and of at most 64 bits, and it nests at most `MAX_DEPTH` levels: a `ConfigError` names the first
    that is not. JSON Schema's and pydantic's `number` both take `.inf`, which would lift a bound silently."""
    return _plain(value, file, path, 0, None)


def _plain(value: Any, file: str, path: str, depth: int, text: Callable[[str, str], str] | None) -> Any:
    if depth > MAX_DEPTH:
        raise ConfigError(
            file, path, f"nested more than {MAX_DEPTH} levels deep", "flatten it; no setting nests this deep"
        )
    if isinstance(value, str):
        return text(value, path) if text is not None else value
    if isinstance(value, dict):
        return {k: _plain(v, file, f"{path}.{k}" if path else str(k), depth + 1, text) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, file, f"{path}[{i}]", depth + 1, text) for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(
            file,
            path,
            f"{value} is not a finite number: no setting may be unbounded or undefined",
            "give a finite number within the setting's range (see `mcp-interceptors config-schema`), or leave the"
            " key out for its default",
        )
    if isinstance(value, int) and not isinstance(value, bool) and not _INT64_MIN <= value <= _INT64_MAX:
        raise ConfigError(
            file,
            path,
            f"an integer of {len(str(abs(value)))} digits is past 64 bits: no setting takes one",
            "give a number within the setting's range (see `mcp-interceptors config-schema`)",
        )
    return value


def parse_config(
    raw: Any,
    *,
    file: str = "<config>",
    env: Mapping[str, str] | None = None,
    base_dir: str | None = None,
    substitute: bool = True,
) -> GatewayConfig:
    """Validate a loaded YAML document into a `GatewayConfig`, raising `ConfigError` on the first problem.

    Stdio servers without a `cwd` run in `base_dir` (the config file's folder), so relative paths
    in a config mean the same thing wherever the gateway is started. `substitute=False` takes every
    string as written (a command line's arguments, which the shell has already expanded).
    """
    if not isinstance(raw, dict):
        raise ConfigError(file, "", "the document must be a mapping", "start with keys like `upstreams:`")
    used: dict[str, str] = {}
    if substitute:
        data = substitute_env(raw, os.environ if env is None else env, file, used=used)
    else:
        data = checked_values(raw, file)
    if base_dir is not None:
        _default_cwd(data, base_dir)
        data.setdefault("base_dir", base_dir)
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # A misspelt key first: `upstream:` for `upstreams:` also leaves `upstreams` empty, which says less.
        error = next((error for error in errors if error["type"] == "extra_forbidden"), errors[0])
        message = _INSTANCE_OF.sub("", error["msg"].removeprefix("Value error, "))
        raise ConfigError(file, _field_path(error["loc"]), redact_values(message, used), _fix_for(error)) from None
    config._substituted.update(used)
    _check_http_path(config.http, file)
    _check_prefixes(config, file)
    _check_guards(config.interceptors, file)
    return config


def _check_guards(interceptors: InterceptorsConfig, file: str) -> None:
    """A guard listed twice ran twice, its interceptors under the same names, so the
    `interceptors.overrides` and `interceptors.config` keyed by those names applied to both at once."""
    first: dict[str, int] = {}
    for index, guard in enumerate(interceptors.guards):
        earlier = first.setdefault(guard.name, index)
        if earlier != index:
            raise ConfigError(
                file,
                f"interceptors.guards[{index}].name",
                f"guard {guard.name!r} is already listed as interceptors.guards[{earlier}]: its interceptors would"
                " run twice under the same names, and overrides and config keyed by those names would apply to both",
                "list each guard once, with all its settings in one `config`",
            )


def _check_prefixes(config: GatewayConfig, file: str) -> None:
    """Two upstreams whose `<prefix>__<name>` names can be the same (one prefix, or one `a` and the other
    `a__b`): refused at load, naming both, not only once both have connected and listed a clashing name.
    An empty prefix exposes names as they are: a clash there depends on the names, so it is found at start."""
    seen: dict[str, str] = {}  # prefix -> the upstream it is of
    for name in config.upstreams:
        prefix = config.prefix_for(name)
        if not prefix:
            continue
        for other_prefix, other in seen.items():
            pairs = sorted(((prefix, name), (other_prefix, other)), key=lambda pair: len(pair[0]))
            (short, short_owner), (long, long_owner) = pairs
            if not (long + SEPARATOR).startswith(short + SEPARATOR):
                continue
            own = "" if config.upstreams[name].prefix is not None else " (its name, the default)"
            if prefix == other_prefix:
                problem = f"{prefix!r}{own} is also the prefix of upstream {other!r}"
            else:
                rest = (long + SEPARATOR)[len(short + SEPARATOR) :]
                problem = (
                    f"{prefix!r}{own} overlaps the prefix {other_prefix!r} of upstream {other!r}: a tool "
                    f"{rest + 'x'!r} of {short_owner!r} and a tool 'x' of {long_owner!r} would both be "
                    f"{long + SEPARATOR + 'x'!r}"
                )
            error = ConfigError(
                file,
                f"upstreams.{name}.prefix",
                f"{problem}, so calls could not be routed",
                f"give upstream {other!r} or {name!r} another `prefix` (neither may start with the other's "
                f"followed by {SEPARATOR!r})",
            )
            error.data["upstreams"] = [other, name]
            raise error
        seen[prefix] = name


#: pydantic's "or instance of UpstreamConfig": a class name the file's author never wrote.
_INSTANCE_OF = re.compile(r" or instance of \w+")


def _field_path(loc: tuple[int | str, ...]) -> str:
    """pydantic's `loc` written as the rest of our errors write it: `interceptors.guards[0].name`, and a
    mapping's key that is refused as `upstreams.'my notes'` (pydantic appends `[key]`)."""
    path = ""
    for index, part in enumerate(loc):
        if loc[index + 1 : index + 2] == ("[key]",):
            path += f".{part!r}" if path else repr(part)
        elif part == "[key]":
            continue
        elif isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def _check_http_path(http: HttpConfig, file: str) -> None:
    """`http.path` must not be one of the legacy SSE endpoint's paths: Streamable HTTP would answer there,
    and `/sse` (or `/messages/`) would be gone without a word."""
    path = http.path.rstrip("/") or "/"
    if http.metrics and path == "/metrics":
        raise ConfigError(
            file, "http.path", "/metrics is where `http.metrics` serves the metrics", "choose another path, e.g. /mcp"
        )
    if path == "/healthz":
        raise ConfigError(file, "http.path", "/healthz is where the gateway answers readiness checks", "choose /mcp")
    if http.sse and (path == "/sse" or path == "/messages" or path.startswith("/messages/")):
        raise ConfigError(
            file,
            "http.path",
            f"{http.path} is a path of the legacy SSE endpoint (/sse and /messages/), which it would hide",
            "choose another path, e.g. /mcp, or set `http.sse: false`",
        )


@dataclass(frozen=True)
class ConfigDocument:
    """A config file as read: its data, where it is, and whether it is a desktop client's server list."""

    raw: Any
    file: str
    base_dir: str
    client: bool


def read_config_document(path: str | Path) -> ConfigDocument:
    """Read a gateway config (YAML or JSON) or a client's `mcpServers`/`servers` file, within bounds."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read the file ({exc.strerror})", "check the path") from None
    except UnicodeDecodeError as exc:
        at_line = exc.object[: exc.start].count(b"\n") + 1
        bad = f"not UTF-8 text (byte {exc.object[exc.start]:#04x} on line {at_line})"
        raise ConfigError(file, "", bad, "save the file as UTF-8 (YAML or JSON)") from None
    raw = read_document(text, file)
    raw = {} if raw is None else raw
    base_dir = str(Path(path).resolve().parent)
    return ConfigDocument(raw, file, base_dir, server_list_key(raw) is not None)


def config_from(
    document: ConfigDocument,
    *,
    env: Mapping[str, str] | None = None,
    guards: Sequence[Mapping[str, Any]] = (),
    upstream: str | None = None,
    servers: ConfigDocument | None = None,
) -> GatewayConfig:
    """The `GatewayConfig` of a document read by `read_config_document`.

    A client's server list becomes `upstreams`, run behind `guards` (a gateway config lists its own, so
    `guards` must be empty for one). `servers`, a client's server list, adds its servers to a gateway
    config's upstreams. `upstream` keeps only the server so named: the others' settings (an environment
    variable only they need) are not read at all.
    """
    raw, file = document.raw, document.file
    if document.client:
        if servers is not None:
            raise ValueError("servers go with a gateway config")
        raw = {"upstreams": client_upstreams(raw, file, workspace_of(Path(file)), only=upstream)}
        if guards:
            raw["interceptors"] = {"guards": [dict(guard) for guard in guards]}
        return parse_config(raw, file=file, env=env, base_dir=document.base_dir)
    if guards:
        raise ValueError("a gateway config lists its own guards")
    if not isinstance(raw, dict) or (servers is None and upstream is None):
        return parse_config(raw, file=file, env=env, base_dir=document.base_dir)
    upstreams: dict[str, Any] = raw["upstreams"] if isinstance(raw.get("upstreams"), dict) else {}
    if servers is not None:
        if not servers.client:
            problem = "not a client's server list (mcpServers or servers)"
            raise ConfigError(servers.file, "", problem, "give a Claude Desktop, Cursor or VS Code config")
        named = server_list_key(servers.raw)
        only = upstream if upstream is not None and upstream in servers.raw[named] else None
        added = client_upstreams(servers.raw, servers.file, workspace_of(Path(servers.file)), only=only)
        if only is not None:
            upstreams = {}
        for name in set(added) & set(upstreams):
            fix = f"rename one of them (the gateway's is upstreams.{name} in {file})"
            raise ConfigError(servers.file, f"{named}.{name}", "the gateway config has an upstream of this name", fix)
        upstreams = {**upstreams, **added}
    if upstream is not None and upstream not in upstreams and upstream_name(upstream) not in upstreams:
        known = ", ".join(map(repr, upstreams)) or "(none)"
        raise ConfigError(file, "upstreams", f"no upstream named {upstream!r}", f"name one of: {known}")
    if upstream is not None:
        key = upstream if upstream in upstreams else upstream_name(upstream)
        upstreams = {key: upstreams[key]}
    return parse_config({**raw, "upstreams": upstreams}, file=file, env=env, base_dir=document.base_dir)


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read and validate a gateway config, or a client's server list (its servers as upstreams, unguarded)."""
    return config_from(read_config_document(path), env=env)


def _default_cwd(data: dict[str, Any], base_dir: str) -> None:
    servers: list[Any] = list((data.get("upstreams") or {}).values()) if isinstance(data.get("upstreams"), dict) else []
    interceptors = data.get("interceptors")
    if isinstance(interceptors, dict) and isinstance(interceptors.get("servers"), list):
        servers.extend(interceptors["servers"])
    for server in servers:
        if isinstance(server, dict) and "command" in server and "cwd" not in server:
            server["cwd"] = base_dir
        elif isinstance(server, dict) and isinstance(server.get("cwd"), str):  # relative to this file, as all paths
            server["cwd"] = str(Path(base_dir) / Path(server["cwd"]).expanduser())  # an absolute one stays


def _fix_for(error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return "remove the key or check its spelling against `mcp-interceptors config-schema`"
    if kind == "missing":
        return "add the key"
    if kind in ("literal_error", "enum"):
        return "use one of the allowed values"
    if error.get("loc", ())[-1:] == ("url",):
        return "give the server's http(s) URL, e.g. http://127.0.0.1:8003/mcp"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"):
        return "give a finite number within the setting's range (`mcp-interceptors config-schema` lists each one)"
    if kind == "string_too_short":
        return "give a non-empty value (is an environment variable it names set to the empty string?)"
    if kind == "string_pattern_mismatch":
        if error.get("loc", ())[-1:] == ("path",):
            return "start the path with '/', e.g. /mcp"
        if error.get("loc", ())[-1:] == ("module",):
            return "name an InterceptorHost as module:attribute, e.g. my_hosts:host"
        return "use letters, digits, '.', '_' or '-'"
    return "see `mcp-interceptors config-schema`"


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema of `gateway.yaml`."""
    schema = GatewayConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mcp-interceptors gateway configuration"
    return schema
