"""Reading `gateway.yaml`: YAML, `${ENV}` substitution, validation, and errors naming file, field and fix."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mcp_interceptors.gateway.config.base import ConfigError, redact_values
from mcp_interceptors.gateway.config.document import GatewayConfig
from mcp_interceptors.gateway.config.servers import InterceptorsConfig
from mcp_interceptors.gateway.config.settings import HttpConfig
from mcp_interceptors.gateway.routing import SEPARATOR

_ENV = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute_env(
    value: Any, env: Mapping[str, str], file: str, path: str = "", *, used: dict[str, str] | None = None
) -> Any:
    """Replace `${VAR}` and `${VAR:-default}` (the default if VAR is unset or empty, as in the shell) in
    every string; a missing VAR without a default is a `ConfigError`.
    `$${VAR}` stands for a literal `${VAR}` (a CEL expression or pattern may need one).
    `used` collects each value taken from `env`, with its VAR (defaults are written in the file)."""
    if isinstance(value, str):

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
            raise ConfigError(file, path, f"environment variable {name} is not set", fix)

        return _ENV.sub(replace, value)
    if isinstance(value, dict):
        return {k: substitute_env(v, env, file, f"{path}.{k}" if path else str(k), used=used) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, env, file, f"{path}[{i}]", used=used) for i, v in enumerate(value)]
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
    data = substitute_env(raw, os.environ if env is None else env, file, used=used) if substitute else raw
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
    if http.sse and (path == "/sse" or path == "/messages" or path.startswith("/messages/")):
        raise ConfigError(
            file,
            "http.path",
            f"{http.path} is a path of the legacy SSE endpoint (/sse and /messages/), which it would hide",
            "choose another path, e.g. /mcp, or set `http.sse: false`",
        )


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> GatewayConfig:
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read the file ({exc.strerror})", "check the path") from None
    except UnicodeDecodeError as exc:
        at_line = exc.object[: exc.start].count(b"\n") + 1
        bad = f"not UTF-8 text (byte {exc.object[exc.start]:#04x} on line {at_line})"
        raise ConfigError(file, "", bad, "save the file as UTF-8 (YAML or JSON)") from None
    try:
        raw = yaml.safe_load(text)
        repeated = _repeated_key(yaml.compose(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark is not None else "unknown position"
        problem = getattr(exc, "problem", None)  # what the parser expected or found there
        what = f": {' '.join(problem.split())}" if problem else ""
        raise ConfigError(file, "", f"invalid YAML at {where}{what}", "fix the YAML syntax") from None
    if repeated is not None:
        path, line = repeated
        raise ConfigError(file, path, f"given twice (the second at line {line})", "keep only one of them")
    return parse_config(raw if raw is not None else {}, file=file, env=env, base_dir=str(Path(path).resolve().parent))


def _repeated_key(node: yaml.Node | None, path: str = "", seen: set[int] | None = None) -> tuple[str, int] | None:
    """The field path and line of the first key given twice in one mapping (YAML keeps the last silently)."""
    seen = set() if seen is None else seen
    if node is None or id(node) in seen:  # an alias of a node already walked
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            where = f"{path}.{key}" if path else str(key)
            if key is not None and key in keys:
                return where, key_node.start_mark.line + 1
            if key is not None:
                keys.add(key)
            if (found := _repeated_key(value_node, where, seen)) is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            if (found := _repeated_key(item, f"{path}[{index}]", seen)) is not None:
                return found
    return None


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
