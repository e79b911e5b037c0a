"""Property tests of the guards' walkers and scanners on deep and odd payloads (the short form of
`bench/fuzz_guards.py`'s campaigns; the targets and their invariants are in `fuzz_targets.py`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzz_targets import _LAYERS, DISGUISES, HIDDEN_VALUES, hidden, nested, run_guards, scan, walk
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.anyio

#: Text an attacker or a careless server sends: any code point (lone surrogates too), and the characters
#: the readings look at, often.
_READ_CHARS = [*"%&;#\\uxX0123456789abcdefABCDEF=+/-_@.: \n\t", "\u200b", "\u00ad", "\u202e", "\uff20", "\u0301"]
odd_text = st.text(st.characters(codec=None) | st.sampled_from(_READ_CHARS), max_size=40) | st.sampled_from(
    [v for v, _, _ in HIDDEN_VALUES]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | odd_text
)
payloads = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=6)
        | st.dictionaries(odd_text, children, max_size=6)
        | st.builds(lambda texts: [{"type": "text", "text": t} for t in texts], st.lists(odd_text, max_size=4))
    ),
    max_leaves=40,
)
deep = st.builds(nested, payloads, st.integers(min_value=0, max_value=400))


@settings(max_examples=300)
@given(payloads | deep)
def test_walker_invariants_hold_on_odd_and_deep_payloads(payload: Any) -> None:
    walk(payload)


@settings(max_examples=300)
@given(payloads)
def test_scanners_never_raise_and_leave_nothing_after_redaction(payload: Any) -> None:
    scan(payload)


@settings(max_examples=150)
@given(payloads | deep, st.sampled_from(["request", "response"]))
async def test_the_guard_chain_decides_on_any_payload(payload: Any, phase: str) -> None:
    await run_guards(payload, phase)


async def test_a_payload_deeper_than_the_chain_takes_fails_closed_naming_the_nesting() -> None:
    status = await run_guards(nested("AKIAQYLPMN5HHHFPZAM2", 5000))
    assert status != "success"


@settings(max_examples=300)
@given(
    st.integers(min_value=0, max_value=len(HIDDEN_VALUES) - 1),
    st.lists(st.sampled_from(_LAYERS), max_size=3),
    st.sampled_from([None, *sorted(set(DISGUISES) - set(_LAYERS))]),
)
def test_a_disguised_value_is_still_found(value: int, layers: list[str], last: str | None) -> None:
    # Readings go three deep: a character disguise under three encodings is a fourth layer.
    hidden(value, [last, *layers[:2]] if last else layers)


def test_the_campaign_script_runs_every_target() -> None:
    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "bench/fuzz_guards.py", "--engine", "hypothesis", "--all", "--runs", "15"]
    done = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["walk", "scan", "guards", "hidden"]
    assert all(line.endswith("findings: 0") for line in lines)


def test_a_campaign_ends_at_its_time_limit_however_many_inputs_it_may_run() -> None:
    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "bench/fuzz_guards.py", "--engine", "hypothesis", "--target", "scan", "--seconds", "3"]
    done = subprocess.run([*argv, "--runs", str(10**9)], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = done.stdout.splitlines()
    ran, seconds = line.split()[2:6:3]
    assert int(ran.replace(",", "")) > 0 and float(seconds) < 13, line
