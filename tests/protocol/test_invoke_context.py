"""`InvocationContext` wire rules that are easy to miss."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from mcp_interceptors import InvocationContext
from mcp_interceptors.protocol.invoke import Principal, now_iso


def test_reserved_interceptor_state_is_never_sent() -> None:
    context = InvocationContext.model_validate({"interceptorState": {"x": 1}, "sessionId": "s", "custom": 1})
    wire = context.to_wire()
    assert "interceptorState" not in wire
    assert wire["sessionId"] == "s"
    assert wire["custom"] == 1  # unknown fields still travel: hosts ignore what they do not know


def test_a_trusted_context_is_the_validated_context() -> None:
    """The gateway builds one per message from its own values without validating them (`trusted`): it must
    equal, dump and copy as the validated one, `model_extra` included (the model keeps unknown keys)."""
    values = {
        "principal": Principal(type="user", id="ana", claims={"scope": "read"}),
        "session_id": "s-1",
        "server": None,
        "trace_id": "7",
        "timestamp": "2026-01-01T00:00:00.000Z",
    }
    trusted, validated = InvocationContext.trusted(values), InvocationContext(**values)
    assert trusted == validated
    assert repr(trusted) == repr(validated)
    assert trusted.model_fields_set == validated.model_fields_set
    assert trusted.model_extra == validated.model_extra == {}
    assert trusted.to_wire() == validated.to_wire()
    assert trusted.stamped() is trusted
    assert trusted.model_copy(update={"span_id": "x"}) == validated.model_copy(update={"span_id": "x"})


def test_now_iso_is_the_utc_time_to_the_millisecond_as_datetime_writes_it() -> None:
    """`now_iso` formats the date and time once per second; what it returns must be what `datetime` gives,
    read between two `datetime` readings, across a change of second (a guard for that cache: the old code
    passes it too)."""
    seconds: set[str] = set()
    give_up = time.monotonic() + 3
    while len(seconds) < 2 and time.monotonic() < give_up:
        before = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        stamp = now_iso()
        after = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp)
        assert before <= stamp <= after
        seconds.add(stamp[:19])
    assert len(seconds) == 2
