"""Long fuzzing campaigns of every place bytes from outside enter the gateway (issue 34 item 2).

    python bench/fuzz_gateway.py --all --seconds 180                 # each target for 3 minutes
    python bench/fuzz_gateway.py --target peer --engine atheris --runs 200000

Targets (`tests/fuzz/gateway_fuzz_targets.py`, the same the normal suite runs briefly in
`tests/fuzz/test_gateway_fuzz.py`, with the same strategies): `peer`, `stdio`, `upstream`, `interceptor`,
`http`, `config`, `jwt`, `jwks`, `audit`. The targets through a real gateway (`stdio`, `upstream`,
`interceptor`, `http`, and `audit`'s store) share one gateway child per front. With atheris (`peer`,
`config` and `jwks`: their input is bytes or text), the gateway's modules are instrumented and the
fuzzer steers by their coverage; every target runs with hypothesis. Prints inputs run and findings per
target; exits 1 when a target found a failing input.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fuzz"))

import fuzz_campaign

TARGETS = ("peer", "stdio", "upstream", "interceptor", "http", "config", "jwt", "jwks", "audit")
ATHERIS_TARGETS = ("peer", "config", "jwks")


def run_atheris(target: str, runs: int, seconds: float) -> None:
    """Fuzz one in-process target with atheris (libFuzzer ends the process: the summary prints at exit)."""
    import atheris

    with atheris.instrument_imports(include=["mcp_interceptors.gateway", "yaml", "jwt"]):
        import gateway_fuzz_targets as targets

        import mcp_interceptors.gateway.auth
        import mcp_interceptors.gateway.config
        import mcp_interceptors.gateway.jsonrpc.peer  # noqa: F401  (the targets import them lazily)

    def one_input(raw: bytes) -> None:
        if target == "peer":
            targets.peer([raw[i : i + 97] for i in range(0, len(raw), 97)])
        else:
            text = raw.decode("utf-8", "replace")
            (targets.config if target == "config" else targets.jwks)(text)

    fuzz_campaign.run_atheris(fuzz_campaign.Campaign(target, "atheris", runs, seconds), one_input)


#: The suite's test of each target, and the module fixture it takes (if any).
SUITE_TESTS = {
    "peer": ("test_the_jsonrpc_peer_answers_every_request_it_reads_and_survives_any_bytes", None),
    "stdio": ("test_the_stdio_gateway_keeps_serving_after_any_lines", "stdio_gateway"),
    "upstream": ("test_any_upstream_answer_gives_the_call_exactly_one_answer", "stdio_gateway"),
    "interceptor": ("test_an_interceptor_servers_answer_never_lets_a_call_through_unless_it_passes", "stdio_gateway"),
    "http": ("test_the_http_front_never_fails_with_a_5xx_and_keeps_serving", "http_gateway"),
    "config": ("test_the_config_loader_gives_a_config_or_a_config_error", None),
    "jwt": ("test_a_bearer_token_is_verified_or_refused_never_an_error", "jwt_keys"),
    "jwks": ("test_a_jwks_file_loads_or_is_a_config_error", None),
    "audit": ("test_audit_verify_reports_a_corrupted_store_never_a_traceback", "audit_store"),
}


def run_hypothesis(campaign: fuzz_campaign.Campaign, fixtures: dict[str, Any]) -> None:
    """The suite's test of the target: its body (`inner_test`) on inputs drawn from its own strategies."""
    import test_gateway_fuzz as suite

    name, fixture = SUITE_TESTS[campaign.target]
    test = getattr(suite, name).hypothesis
    given_fixture = {fixture: fixtures[fixture]} if fixture is not None else {}

    def body(**case: Any) -> None:
        test.inner_test(**given_fixture, **case)

    fuzz_campaign.run_hypothesis(campaign, body, **test._given_kwargs)  # the strategies the suite's test draws


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=TARGETS, action="append", default=[])
    parser.add_argument("--all", action="store_true", help="every target in turn")
    parser.add_argument("--runs", type=int, default=100_000, help="inputs per target (at most)")
    parser.add_argument("--seconds", type=float, default=0, help="time per target (0: no limit)")
    parser.add_argument("--engine", choices=["atheris", "hypothesis"], default="hypothesis")
    args = parser.parse_args()
    targets = list(TARGETS) if args.all or not args.target else args.target
    if args.engine == "atheris":
        if len(targets) != 1 or targets[0] not in ATHERIS_TARGETS:
            parser.error(f"atheris fuzzes one target per process, one of {', '.join(ATHERIS_TARGETS)}")
        run_atheris(targets[0], args.runs, args.seconds)  # does not return
    import gateway_fuzz_targets as fuzz

    failed = False
    with tempfile.TemporaryDirectory() as folder:
        fixtures = _fixtures(Path(folder), fuzz, targets)
        try:
            for target in targets:
                campaign = fuzz_campaign.Campaign(target, "hypothesis", args.runs, args.seconds)
                run_hypothesis(campaign, fixtures)
                campaign.report()
                failed = failed or bool(campaign.findings)
        finally:
            for name in ("stdio_gateway", "http_gateway"):
                if name in fixtures:
                    fixtures[name].close()
    return 1 if failed else 0


def _fixtures(folder: Path, fuzz: Any, targets: list[str]) -> dict[str, Any]:
    """What the suite's module fixtures give its tests: one gateway per front, the JWT keys, an audit store."""
    import sqlite3
    from contextlib import closing

    fixtures: dict[str, Any] = {}
    if {"stdio", "upstream", "interceptor", "audit"} & set(targets):
        (folder / "stdio").mkdir()
        fixtures["stdio_gateway"] = fuzz.StdioGateway(folder / "stdio")
    if "http" in targets:
        (folder / "http").mkdir()
        fixtures["http_gateway"] = fuzz.HttpGateway(folder / "http")
    if "jwt" in targets:
        (folder / "jwt").mkdir()
        fixtures["jwt_keys"] = fuzz.JwtKeys(folder / "jwt")
    if "audit" in targets:
        gateway = fixtures["stdio_gateway"]
        for index in range(4):
            gateway.call("echo", {"text": f"record {index}"})
        copy = folder / "audit.db"
        with closing(sqlite3.connect(gateway.folder / "audit.db")) as source, closing(sqlite3.connect(copy)) as target:
            source.backup(target)
        fixtures["audit_store"] = copy
    return fixtures


if __name__ == "__main__":
    sys.exit(main())
