"""docs/audit.md stays true: its Python snippets are runnable examples (run here), its YAML is valid gateway
config, the documented `_meta` receipt matches what the gateway builds, and every documented command flag exists."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcp_interceptors import signatures
from mcp_interceptors.audit import DecisionInput, SqliteStore, load_or_create_key, open_audit_writer
from mcp_interceptors.gateway.config import parse_config
from mcp_interceptors.gateway.recording import RECEIPT_META_KEY, receipt_meta

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "audit.md"
EXAMPLES = ROOT / "examples"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)


def run_example(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_every_python_snippet_is_part_of_a_runnable_example() -> None:
    sources = [path.read_text(encoding="utf-8") for path in EXAMPLES.glob("*.py")]
    snippets = blocks("python")
    assert snippets
    for snippet in snippets:
        assert any(snippet in source for source in sources), snippet


def test_audit_writer_example_writes_and_verifies() -> None:
    out = run_example("audit_writer.py")
    assert out.splitlines()[-1] == "verified: True, 3 records in 1 segments, 1 receipts"
    assert '"kind": "receipt"' in out and '"call_id": "call-1"' in out


def test_signed_results_example_checks_and_refuses() -> None:
    lines = run_example("signed_results.py").splitlines()
    assert lines[1:] == [
        "with the host's key: success, ed25519 signature checked",
        "with another key: validation_failed, no-shell: signature invalid",
    ]


def test_yaml_snippets_are_valid_gateway_config() -> None:
    snippets = blocks("yaml")
    assert len(snippets) == 2
    for snippet in snippets:
        parse_config({"upstreams": {"u": {"command": "python"}}, **yaml.safe_load(snippet)}, file="docs/audit.md")


@pytest.mark.anyio
async def test_the_documented_receipt_is_what_the_gateway_sends(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert f"`{RECEIPT_META_KEY}`" in text
    (documented,) = [json.loads(block) for block in blocks("json") if '"records"' in block]
    store = SqliteStore(tmp_path / "audit.db")
    common: dict[str, Any] = {"timestamp": datetime.now(UTC), "event": "tools/call", "decision": "allow"}
    common |= {"status": "success", "call_id": "c"}
    async with open_audit_writer(store, load_or_create_key(tmp_path / "key")) as writer:
        receipts = [
            await writer.append(DecisionInput(**common, phase="request", direction="sending")),
            await writer.append(DecisionInput(**common, phase="response", direction="receiving")),
        ]
    store.close()
    sent = receipt_meta(receipts)
    assert sent is not None
    assert sent.keys() == documented.keys()
    assert [r.keys() for r in sent["records"]] == [r.keys() for r in documented["records"]]
    assert sent["receipt"].keys() == documented["receipt"].keys()
    assert sent["receipt"]["request"]["id"] == sent["records"][0]["id"]
    assert sent["receipt"]["response"]["id"] == sent["receipt"]["id"] == sent["records"][1]["id"]


def test_documented_signature_functions_exist() -> None:
    section = DOC.read_text(encoding="utf-8").split("## Signed validation results")[1].split("\n## ")[0]
    named = set(re.findall(r"^\| `(\w+)\(", section, flags=re.MULTILINE))
    named |= set(re.findall(r"`(\w+)\(", section)) & set(signatures.__all__)
    assert {"load_signing_key", "generate_signing_key", "public_key_text", "check_result_signature"} <= named
    assert named <= set(signatures.__all__) | {"verify_key_from", "load_verify_key"}


@pytest.mark.parametrize(
    "row", [line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| `audit ")]
)
def test_documented_command_flags_exist(row: str) -> None:
    usage = row.split("`")[1]
    action = usage.split()[1]
    done = subprocess.run(
        [sys.executable, "-m", "mcp_interceptors", "audit", action, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for flag in [*re.findall(r"--[a-z-]+|-n\b", usage), "--store", "--config", "--key-file"]:
        assert flag in done.stdout, (action, flag)
