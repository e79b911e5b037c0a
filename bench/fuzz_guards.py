"""Long fuzzing campaigns of the guards' walkers and scanners (issue 34 item 2, the guards' part).

    python bench/fuzz_guards.py --target walk --runs 200000          # coverage-guided (atheris), one target
    python bench/fuzz_guards.py --all --seconds 300                  # each target for 5 minutes
    python bench/fuzz_guards.py --engine hypothesis --all --runs 20000

Targets (`tests/guards/fuzz_targets.py`, the same the normal suite runs briefly in test_guard_fuzz.py):
`walk` (the one walker's invariants on odd and deep payloads), `scan` (scanners and readings never raise,
nothing left after redaction), `guards` (the scanning guards in a chain decide on any payload; too deep
fails closed), `hidden` (a credential under random disguises is found). With atheris, inputs are built
from the fuzzer's bytes and the guards' modules are instrumented, so it steers by their coverage; without
it (or with `--engine hypothesis`), hypothesis generates inputs. Prints inputs run and findings per target;
exits 1 when a target found a failing input (printed, with its bytes in hex for atheris).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "guards"))

import fuzz_campaign

try:
    import atheris
except ImportError:  # pragma: no cover - optional
    atheris = None

TARGETS = ("walk", "scan", "guards", "hidden")
_ALPHABET = "%&;#\\uxX0123456789abcdefABCDEF=+/-_@.: \n\t\u200b\u00ad\u202e\uff20\u0301AKIAghp_"


def payload_from(data: Any, depth: int = 0) -> Any:
    """A JSON-like value from an atheris `FuzzedDataProvider`: nesting up to thousands of levels, odd
    strings (any code point, or the characters the readings look at), huge integers, NaN and infinities."""
    if data.remaining_bytes() == 0:
        return None
    choice = data.ConsumeIntInRange(0, 11)
    if choice == 0 and depth < 5000:  # a deep spine
        return payload_from(data, depth + 1) if data.ConsumeBool() else [payload_from(data, depth + 1)]
    if choice in (1, 2) and depth < 5000:
        return [payload_from(data, depth + 1) for _ in range(data.ConsumeIntInRange(0, 4))]
    if choice in (3, 4) and depth < 5000:
        return {_text(data): payload_from(data, depth + 1) for _ in range(data.ConsumeIntInRange(0, 4))}
    if choice == 5:
        return [{"type": "text", "text": _text(data)} for _ in range(data.ConsumeIntInRange(0, 3))]
    if choice == 6:
        return data.ConsumeInt(data.ConsumeIntInRange(1, 20))
    if choice == 7:
        return data.ConsumeFloat()
    if choice == 8:
        return data.ConsumeBool()
    return _text(data)


def _text(data: Any) -> str:
    if data.ConsumeBool():
        return str(data.ConsumeUnicodeNoSurrogates(data.ConsumeIntInRange(0, 64)))
    size = data.ConsumeIntInRange(0, 48)
    return "".join(_ALPHABET[data.ConsumeIntInRange(0, len(_ALPHABET) - 1)] for _ in range(size))


def run_atheris(target: str, runs: int, seconds: float) -> None:
    """Fuzz one target in this process (libFuzzer ends the process: the summary is printed at exit)."""
    with atheris.instrument_imports(include=["mcp_interceptors.guards"]):
        import fuzz_targets

    def one_input(raw: bytes) -> None:
        data = atheris.FuzzedDataProvider(raw)
        if target == "hidden":
            layers = [sorted(fuzz_targets.DISGUISES)[data.ConsumeIntInRange(0, 11)] for _ in range(3)]
            fuzz_targets.hidden(data.ConsumeIntInRange(0, 3), _stackable(fuzz_targets, layers))
        else:
            {"walk": fuzz_targets.walk, "scan": fuzz_targets.scan, "guards": fuzz_targets.guards_target}[target](
                payload_from(data)
            )

    fuzz_campaign.run_atheris(fuzz_campaign.Campaign(target, "atheris", runs, seconds, width=7), one_input)


def _stackable(fuzz_targets: Any, layers: list[str]) -> list[str]:
    """A character disguise first (if any), then the encodings: what `hidden` documents it finds."""
    chars = [layer for layer in layers if layer not in fuzz_targets._LAYERS][:1]
    return chars + [layer for layer in layers if layer in fuzz_targets._LAYERS][: 3 - len(chars)]


def run_hypothesis(campaign: fuzz_campaign.Campaign) -> None:
    import anyio
    import fuzz_targets
    from hypothesis import strategies as st
    from test_guard_fuzz import deep, payloads

    target = campaign.target
    if target == "hidden":
        strategy: Any = st.tuples(
            st.integers(0, 3), st.lists(st.sampled_from(sorted(fuzz_targets.DISGUISES)), min_size=0, max_size=3)
        )
    else:
        strategy = st.tuples(payloads | deep, st.sampled_from(["request", "response"]))

    def check(case: Any) -> None:
        if target == "hidden":
            fuzz_targets.hidden(case[0], _stackable(fuzz_targets, case[1]))
        elif target == "guards":
            anyio.run(fuzz_targets.run_guards, case[0], case[1])
        else:
            {"walk": fuzz_targets.walk, "scan": fuzz_targets.scan}[target](case[0])

    fuzz_campaign.run_hypothesis(campaign, check, case=strategy)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=TARGETS, action="append", default=[])
    parser.add_argument("--all", action="store_true", help="every target in turn")
    parser.add_argument("--runs", type=int, default=100_000, help="inputs per target (at most)")
    parser.add_argument("--seconds", type=float, default=0, help="time per target (0: no limit)")
    parser.add_argument("--engine", choices=["atheris", "hypothesis"], default="atheris" if atheris else "hypothesis")
    args = parser.parse_args()
    targets = list(TARGETS) if args.all or not args.target else args.target
    if args.engine == "atheris" and len(targets) == 1:
        run_atheris(targets[0], args.runs, args.seconds)  # does not return
    failed = False
    for target in targets:
        if args.engine == "atheris":  # libFuzzer runs once per process: one child per target
            argv = [
                sys.executable,
                __file__,
                "--target",
                target,
                "--runs",
                str(args.runs),
                "--seconds",
                str(args.seconds),
            ]
            failed = subprocess.run(argv, check=False).returncode != 0 or failed
            continue
        campaign = fuzz_campaign.Campaign(target, "hypothesis", args.runs, args.seconds, width=7)
        run_hypothesis(campaign)
        campaign.report()
        failed = failed or bool(campaign.findings)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
