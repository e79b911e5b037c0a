"""What every part of the config shares: `ConfigError`, the strict base model, and address helpers."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from mcp_interceptors.protocol.errors import InterceptorsError

#: The ranges of the config's durations, sizes and counts: finite, and wide enough for any deployment.
MAX_DURATION_MS = 86_400_000  # a day
MAX_BYTES = 1 << 30  # 1 GiB
MAX_COUNT = 1_000_000

#: A timeout or deadline in milliseconds: more than 0, at most a day.
Milliseconds = Annotated[float, Field(gt=0, le=MAX_DURATION_MS, allow_inf_nan=False)]
#: A size limit in bytes: 1 B to 1 GiB.
Bytes = Annotated[int, Field(gt=0, le=MAX_BYTES)]
#: A limit on how many of something: 1 to a million.
Count = Annotated[int, Field(gt=0, le=MAX_COUNT)]

#: A name of an upstream, interceptor server or host: letters, digits, '.', '_', '-'.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class ConfigError(InterceptorsError, ValueError):
    """A configuration problem: `file`, `path` (dotted field path) and the fix are in the message."""

    def __init__(self, file: str, path: str, problem: str, fix: str) -> None:
        super().__init__(f"{file}: {path or '<root>'}: {problem} (fix: {fix})", data={"file": file, "path": path})
        self.file, self.path, self.problem, self.fix = file, path, problem, fix


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only: `localhost`, or an address in 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def authority(host: str, port: int) -> str:
    """`host:port` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (an IPv6 host in brackets) as (host, port); raises `ValueError` naming the shape."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT, e.g. 127.0.0.1:9464")
    return host.strip("[]"), int(port)


class Model(BaseModel):
    """Unknown keys are refused (a typo fails closed), and a loaded config is read-only."""

    model_config = ConfigDict(extra="forbid", frozen=True)


#: Shorter values are not written back by `redact_values`: they would garble the text around them.
_MIN_REDACTED_LENGTH = 4


def redact_values(text: str, substituted: Mapping[str, str]) -> str:
    """Write each substituted value (of at least 4 characters) in `text` back as its `${VAR}`, longest first."""
    for value in sorted(substituted, key=len, reverse=True):
        if len(value) >= _MIN_REDACTED_LENGTH:
            text = text.replace(value, f"${{{substituted[value]}}}")
    return text
