"""Fuzz targets for the guards' walkers and scanners, shared by the hypothesis tests in the normal suite
(`test_guard_fuzz.py`) and the long campaigns of `bench/fuzz_guards.py` (atheris or hypothesis).

Each target takes one input and raises AssertionError when an invariant breaks:
- `walk`: the one walker (`_walk`) visits every string once, rebuilds an equal payload from identity
  replacements, and never raises, whatever the nesting or the values;
- `scan`: `find_in_payload`/`redact_payload` never raise, and a redacted payload holds none of the values
  the denying form found (whatever readings found them);
- `guards`: the built-in scanning guards through their real invocation path (a chain) end in a decision,
  never an exception; a payload too deep for the chain fails closed naming the nesting;
- `hidden`: a credential disguised by a random stack of the encodings the guards undo is still found.
"""

from __future__ import annotations

import base64
import html
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from mcp_interceptors import Chain, guards
from mcp_interceptors.guards._detectors import PiiScanner, SecretScanner
from mcp_interceptors.guards._scanning import TextScanner, find_in_payload, redact_payload
from mcp_interceptors.guards._walk import PathMark, replace_strings, string_values, text_block_runs, walk_strings

SECRETS = TextScanner(SecretScanner(), min_length=12)
PII = TextScanner(PiiScanner(), min_length=6, integers=True)
PLACEHOLDER = "[REDACTED:{kind}]"
#: The guards a gateway would chain on content, in redacting and denying forms.
GUARD_CHAIN = [
    ("secrets", {}),
    ("pii", {}),
    ("exfiltration-guard", {}),
    ("prompt-injection", {}),
    ("size-limit", {}),
    ("schema-guard", {}),
]
_STATUSES = {"success", "validation_failed", "mutation_failed", "invocation_failed", "timeout"}


def nested(value: Any, depth: int, *, key: str = "k") -> Any:
    """`value` under `depth` levels of alternating objects and arrays."""
    for level in range(depth):
        value = {key: value} if level % 2 else [value]
    return value


def walk(payload: Any) -> None:
    for include_keys in (False, True):
        walked = list(walk_strings(payload, include_keys=include_keys, include_integers=True))
        assert string_values(payload, include_keys=include_keys, include_integers=True) == [v for _, v in walked]
    same, count = replace_strings(payload, lambda path, text: text, include_integers=True)
    assert count == 0 and same is payload
    marked, _ = replace_strings(payload, lambda path, text: text + "!")
    assert string_values(marked) == [text + "!" for text in string_values(payload)]
    text_block_runs(payload)


def scan(payload: Any) -> None:
    for scanner in (SECRETS, PII):
        hits = list(find_in_payload(payload, scanner, include_keys=True))
        redacted, counts, paths = redact_payload(payload, scanner, PLACEHOLDER)
        assert (redacted is payload) == (not counts), (counts, paths)
        # Nothing found is left. (A redaction may leave text that reads as a new, shorter finding once its
        # neighbour is a placeholder: `f00::f` glued to an address is no address until the address is gone.)
        found = {(hit.kind, hit.value) for hit in hits}
        left = [(hit.path, hit.kind) for hit in find_in_payload(redacted, scanner) if (hit.kind, hit.value) in found]
        assert not left, ("left after redaction", left, redacted)
        # What the denying form finds is redacted, but in mapping keys (never renamed).
        assert counts or all(hit.path and hit.path[-1] is PathMark.KEY for hit in hits), hits


def _chain() -> Chain:
    chain = Chain(role="server")
    for name, config in GUARD_CHAIN:
        chain.add_local(guards.load(name, config))
    return chain


_CHAINS: list[Chain] = []


async def run_guards(payload: Any, phase: str = "request") -> str:
    """The chain's status for `payload` (a request's params, or a result), checking it decided cleanly."""
    if not _CHAINS:
        _CHAINS.append(_chain())
    wrapped = (
        {"method": "tools/call", "params": {"name": "echo", "arguments": payload}} if phase == "request" else payload
    )
    result = await _CHAINS[0].execute("tools/call", phase, wrapped, context={"server": "A", "sessionId": "fuzz"})
    assert result.status in _STATUSES, result.status
    for failure in result.failures:
        assert "RecursionError" not in repr(failure) and "maximum recursion" not in repr(failure), failure
    return result.status


def guards_target(payload: Any) -> None:
    anyio.run(run_guards, payload)


#: Disguises the guards undo, each a function of the text.
DISGUISES: dict[str, Callable[[str], str]] = {
    "percent": lambda t: "".join(f"%{b:02X}" for b in t.encode()),
    "percent-quote": lambda t: urllib.parse.quote(t, safe=""),
    "zero-width": lambda t: "\u200b".join(t[i : i + 3] for i in range(0, len(t), 3)),
    "soft-hyphen": lambda t: t[:6] + "\u00ad" + t[6:],
    "bidi": lambda t: t[:4] + "\u202e" + t[4:] + "\u202c",
    "fullwidth": lambda t: "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in t),
    "entities": lambda t: "".join(f"&#{ord(c)};" if c.isalnum() and i % 2 else c for i, c in enumerate(t)),
    "hex-entities": lambda t: html.escape(t).replace("@", "&#x40;"),
    "backslash-u": lambda t: "".join(f"\\u{ord(c):04x}" if i % 3 == 0 else c for i, c in enumerate(t)),
    "base64": lambda t: base64.b64encode(f"v={t}".encode()).decode(),
    "base64url": lambda t: base64.urlsafe_b64encode(f"v={t}?>".encode()).decode().rstrip("="),
    "hex": lambda t: f"v={t}".encode().hex(),
}
#: The values disguised, with the scanner that must find each.
HIDDEN_VALUES: list[tuple[str, TextScanner, str]] = [
    ("AKIAQYLPMN5HHHFPZAM2", SECRETS, "aws_access_key"),
    ("ghp_" + "Zq8xR2mT5vW9yB3nK6pL1sD4fG7hJ0aC2eF5", SECRETS, "github_token"),
    ("jane.doe@example.com", PII, "email"),
    ("4111111111111111", PII, "credit_card"),
]
#: Disguises that keep a blob decodable after another is applied on top (percent-encoding of a blob,
#: a blob of percent-encoded text, ...). Character disguises are applied last, at most once.
_LAYERS = ("percent", "base64", "base64url", "hex", "percent-quote")


def hidden(value_index: int, layers: Sequence[str]) -> None:
    """`layers` applied in order to one of `HIDDEN_VALUES` (at most three in all, as the guards read three
    deep: a character disguise first, then encodings); the scanner must still find its kind."""
    value, scanner, kind = HIDDEN_VALUES[value_index % len(HIDDEN_VALUES)]
    text = value
    for layer in layers:
        text = DISGUISES[layer](text)
    kinds = {hit.kind for hit in find_in_payload({"t": text}, scanner)}
    assert kind in kinds, (layers, text[:200], kinds)
