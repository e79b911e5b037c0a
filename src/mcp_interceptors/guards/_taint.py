"""What exfiltration-guard remembers: per session, each sensitive value read (with the servers it came from)
by every form it may travel in; below it `_state`, above it `exfiltration`.

The memory is bounded and never forgets a value early: a value is refused, not evicted, once the session
holds `max_values` of them (and a session, once the guard holds `max_sessions` that remember something).
What could not be remembered is kept as an `Overflow`: its kinds and the servers they came from, so the guard
can fail closed by shape (any value of such a kind sent to another server is blocked) for as long as the
forgotten value would have been remembered. 300 look-alikes read first no longer push a secret out.
"""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from mcp_interceptors.guards._state import TtlMap

__all__ = ["CASELESS_KINDS", "Flows", "Origin", "Overflow", "encoded_forms", "is_allowed_flow"]

#: Kinds whose letter case carries no meaning: `BOB@CORP.COM` is the same address as `bob@corp.com`.
CASELESS_KINDS = frozenset({"email"})
#: Requests per session whose result may still arrive (outside the gateway, see `Flows.pending`).
_MAX_PENDING = 1024
#: Forms a value has at most: raw, two URL forms, two hex cases, base64 at three alignments in two alphabets,
#: and the lower-case form of a caseless kind.
FORMS_PER_VALUE = 12
#: An overflow remembers this many servers per kind; past it the value could have come from anywhere.
_MAX_OVERFLOW_SERVERS = 32


@dataclass(frozen=True, slots=True)
class Origin:
    kind: str
    servers: frozenset[str | None]
    encoding: str
    caseless: bool = False  # the form is lower-case and is looked for in lower-cased text


def encoded_forms(value: str, encodings: Iterable[str]) -> Iterator[tuple[str, str]]:
    """`(form, encoding)` for the value and each encoding of it that could appear inside larger text.

    Base64 is produced at the three byte alignments (standard and URL-safe alphabets) and trimmed to
    the characters that depend only on the value, so the value is found inside any encoded blob.
    """
    yield value, "raw"
    data = value.encode("utf-8")
    for encoding in encodings:
        if encoding == "url":
            for quoted in {urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value, safe="")}:
                if quoted != value:
                    yield quoted, "url"
        elif encoding == "hex":
            yield data.hex(), "hex"
            yield data.hex().upper(), "hex"
        elif encoding == "base64":
            for offset in range(3):
                text = base64.b64encode(b"\0" * offset + data).decode("ascii")
                stable = text[-(-offset * 8 // 6) : (offset + len(data)) * 8 // 6]
                yield stable, "base64"
                urlsafe = stable.replace("+", "-").replace("/", "_")
                if urlsafe != stable:
                    yield urlsafe, "base64"


def is_allowed_flow(origin: Origin, target: str | None, block_unknown: bool) -> bool:
    """Back to a server the value came from is fine; where either end is unknown, `unknown_server` decides."""
    if not block_unknown and (target is None or None in origin.servers):
        return True
    return target is not None and target in origin.servers


class Overflow:
    """The kinds of the values that could not be remembered, each with the servers they came from; a kind
    is forgotten `ttl_s` after its last refused value, when that value would have expired too."""

    __slots__ = ("_kinds",)

    def __init__(self, ttl_s: float, kinds: int = 64) -> None:
        self._kinds: TtlMap[str, frozenset[str | None]] = TtlMap(max_items=kinds, ttl_s=ttl_s)

    def note(self, kind: str, server: str | None) -> None:
        servers = (self._kinds.get(kind) or frozenset()) | {server}
        self._kinds.set(kind, servers if len(servers) <= _MAX_OVERFLOW_SERVERS else frozenset({None}))

    def blocks(self, kind: str, target: str | None, block_unknown: bool) -> bool:
        """Whether a value of `kind` may not go to `target`: it may be any of the values refused, so it may go
        only where all of them came from (`unknown_server: allow` lets it go where either end is unknown)."""
        servers = self._kinds.get(kind)
        if servers is None:
            return False
        if not block_unknown and (target is None or None in servers):
            return False
        return servers != {target}

    def __bool__(self) -> bool:
        return bool(len(self._kinds))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self._kinds.items()]


@dataclass
class Flows:
    """One session's remembered values, by every form they may travel in."""

    max_values: int
    ttl_s: float
    #: Each remembered value: the servers it came from and its forms.
    values: TtlMap[str, tuple[frozenset[str | None], tuple[str, ...]]] = field(init=False)
    forms: TtlMap[str, Origin] = field(init=False)
    #: Outside the gateway a result names no tool: the server of each request, by `traceId`, until its result.
    pending: TtlMap[str, str] = field(init=False)
    overflow: Overflow = field(init=False)
    #: How many of the state store's records this index was last brought up to (`ExfiltrationGuard._sync`).
    synced: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.values = TtlMap(max_items=self.max_values, ttl_s=self.ttl_s)
        self.forms = TtlMap(max_items=self.max_values * FORMS_PER_VALUE, ttl_s=self.ttl_s)
        self.pending = TtlMap(max_items=_MAX_PENDING, ttl_s=self.ttl_s)
        self.overflow = Overflow(self.ttl_s)

    def knows(self, value: str, server: str | None) -> bool:
        """Whether `value` is remembered as read from `server`."""
        known = self.values.get(value)
        return known is not None and server in known[0]

    def holds_values(self) -> bool:
        return bool(len(self.values)) or bool(self.overflow)

    def remember(self, value: str, kind: str, server: str | None, encodings: Iterable[str], min_length: int) -> None:
        """Remember `value` (read from `server`), or, when the session holds as many values as it may, note
        its kind in the overflow: nothing already remembered is ever pushed out."""
        known = self.values.get(value)
        servers = (known[0] if known is not None else frozenset()) | {server}
        origins = [
            (form, Origin(kind, servers, encoding))
            for form, encoding in encoded_forms(value, encodings)
            if len(form) >= min_length
        ]
        if kind in CASELESS_KINDS:
            origins.append((value.lower(), Origin(kind, servers, "raw", caseless=True)))
        if not self.values.add(value, (servers, tuple(form for form, _ in origins))):
            self.overflow.note(kind, server)
            return
        for form, origin in origins:
            if not self.forms.add(form, origin):  # cannot happen while each value has its share; fail closed
                self.overflow.note(kind, server)

    def carried(self, texts: list[str], separator: str) -> list[tuple[str, Origin]]:
        """The remembered forms that occur in any of `texts`: each form is searched once, in all of them joined."""
        joined = separator.join(texts)
        lowered: str | None = None
        found = []
        for form, origin in self.forms.items():
            if origin.caseless:
                lowered = joined.lower() if lowered is None else lowered
                if form in lowered:
                    found.append((form, origin))
            elif form in joined:
                found.append((form, origin))
        return found
