"""Imports only point down (style.md §1): an AST scan of every module under `src/mcp_interceptors`.

Each module's layer is the first package component after `mcp_interceptors`, so subpackages
(`gateway/`, `guards/`, `audit/`, anything new) are covered as soon as their files exist.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import mcp_interceptors

PACKAGE = Path(mcp_interceptors.__file__).parent
CORE_DOWN = {"cli", "root", "gateway", "guards", "audit", "ui"}

#: Layers restricted to an allow-list of our own layers.
ALLOWED_INTERNAL: dict[str, set[str]] = {
    "protocol": {"protocol"},
    "planning": {"planning", "protocol"},
    "executor": {"executor", "planning", "protocol"},
    "canonical": {"canonical", "protocol"},
    "signatures": {"signatures", "canonical", "protocol"},
    # the state store guards and the gateway share: below the guards, above the wire contract only
    "state": {"state", "protocol"},
}
#: Layers with a deny-list of our own layers; every layer but `cli` and `__main__` also never imports `cli`.
FORBIDDEN_INTERNAL: dict[str, set[str]] = {
    "host": {"invoker", "client"} | CORE_DOWN,
    "invoker": {"host", "client"} | CORE_DOWN,
    "client": {"host"} | CORE_DOWN,
    "guards": {"gateway", "audit", "invoker", "cli", "ui"},
    "audit": {"gateway", "guards", "cli", "ui"},
    # the web view reads the audit layer; the gateway mounts it and hands it an authenticator
    "ui": {"gateway", "guards", "host", "invoker", "client", "executor", "cli"},
    "gateway": {"cli"},
}
#: Third-party packages a layer may use (stdlib aside); layers not listed are unrestricted.
ALLOWED_THIRD_PARTY: dict[str, set[str]] = {
    "protocol": {"pydantic", "pydantic_core", "mcp_types"},
    "planning": set(),
    "executor": {"anyio"},
    "canonical": {"orjson", "rfc8785"},
    "signatures": {"cryptography", "nacl"},
    "state": {"redis"},
}
#: Standard-library modules that would bring IO, clocks or logging into a pure layer.
FORBIDDEN_STDLIB: dict[str, set[str]] = {
    "protocol": {"asyncio", "time", "socket", "subprocess", "logging", "random", "threading"},
    "planning": {"asyncio", "time", "socket", "subprocess", "logging", "random", "threading"},
    "canonical": {"asyncio", "time", "socket", "subprocess", "logging", "random", "threading"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    return "main" if parts[1] == "__main__" else parts[1]


def imported_modules(source: str, module: str, is_package: bool) -> list[str]:
    """Absolute names of every module `source` imports (relative imports resolved, `from pkg import sub` too)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            submodules = [f"{base}.{a.name}" for a in node.names if _is_our_module(f"{base}.{a.name}")]
            names.extend(submodules)
            if len(submodules) < len(node.names):  # some names are attributes of `base` itself
                names.append(base)
    return names


def _is_our_module(name: str) -> bool:
    if not name.startswith("mcp_interceptors."):
        return False
    relative = Path(*name.split(".")[1:])
    return (PACKAGE / relative).is_dir() or (PACKAGE / relative).with_suffix(".py").exists()


def violations_of(source: str, module: str, is_package: bool = False) -> list[str]:
    layer = layer_of(module)
    found = []
    for name in imported_modules(source, module, is_package):
        top = name.split(".")[0]
        if top == "mcp_interceptors":
            target = layer_of(name)
            if target == layer:
                continue
            allowed = ALLOWED_INTERNAL.get(layer)
            forbidden = FORBIDDEN_INTERNAL.get(layer, set() if layer in ("cli", "main") else {"cli"})
            if (allowed is not None and target not in allowed) or target in forbidden:
                found.append(f"{module} ({layer}) imports {name} ({target})")
        elif top in sys.stdlib_module_names or top == "__future__":
            if top in FORBIDDEN_STDLIB.get(layer, set()):
                found.append(f"{module} ({layer}) imports stdlib {name}")
        elif layer in ALLOWED_THIRD_PARTY and top not in ALLOWED_THIRD_PARTY[layer]:
            found.append(f"{module} ({layer}) imports third-party {name}")
    return found


def test_imports_only_point_down() -> None:
    problems = []
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 10
    for path in files:
        problems += violations_of(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
    assert problems == []


def test_every_existing_layer_is_known() -> None:
    layers = {layer_of(module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert {"root", "main", "protocol", "planning", "executor", "host", "invoker", "client", "cli"} <= layers
    known = {"root", "main", "cli"} | set(ALLOWED_INTERNAL) | set(FORBIDDEN_INTERNAL)
    unknown = layers - known
    # A new layer is allowed, but then it only gets the "never imports cli" rule: add it to the tables.
    assert unknown == set(), f"new layer(s) {sorted(unknown)}: add their rules from style.md to this test"


@pytest.mark.parametrize(
    ("source", "module", "problem"),
    [
        ("from mcp_interceptors.gateway import config", "mcp_interceptors.host", "imports mcp_interceptors.gateway"),
        ("from mcp_interceptors import host", "mcp_interceptors.invoker", "imports mcp_interceptors.host (host)"),
        ("import anyio", "mcp_interceptors.planning", "imports third-party anyio"),
        ("import time", "mcp_interceptors.planning", "imports stdlib time"),
        ("from ..executor import Call", "mcp_interceptors.protocol.results", "imports mcp_interceptors.executor"),
        ("from mcp_interceptors.cli import main", "mcp_interceptors.gateway.serve", "(cli)"),
        ("from mcp_interceptors.audit import records", "mcp_interceptors.guards.secrets", "(audit)"),
        ("from mcp_interceptors.guards import registry", "mcp_interceptors.audit.writer", "(guards)"),
        ("from mcp_interceptors.invoker import Chain", "mcp_interceptors.guards.policy", "(invoker)"),
        ("from mcp_interceptors.cli import main", "mcp_interceptors.newthing.x", "(cli)"),
        ("import mcp.server", "mcp_interceptors.executor", "imports third-party mcp.server"),
        ("from mcp_interceptors.audit import records", "mcp_interceptors.signatures", "(audit)"),
        ("from mcp_interceptors.executor import Call", "mcp_interceptors.canonical", "(executor)"),
        ("from mcp_interceptors.gateway.auth import build_auth", "mcp_interceptors.ui.app", "(gateway)"),
        ("from mcp_interceptors.ui import create_app", "mcp_interceptors.audit.commands", "(ui)"),
        ("import anyio", "mcp_interceptors.signatures", "imports third-party anyio"),
    ],
)
def test_the_scanner_catches_upward_imports(source: str, module: str, problem: str) -> None:
    found = violations_of(source, module)
    assert len(found) == 1 and problem in found[0], found


def test_the_scanner_allows_downward_imports() -> None:
    assert violations_of("from mcp_interceptors.planning import plan_for", "mcp_interceptors.executor") == []
    assert violations_of("from .events import Phase", "mcp_interceptors.protocol.descriptors") == []
    assert violations_of("from mcp_interceptors.cli import main", "mcp_interceptors.__main__") == []
    assert violations_of("import anyio", "mcp_interceptors.executor") == []
    assert violations_of("from mcp_interceptors.signatures import sign_result", "mcp_interceptors.host") == []
    assert violations_of("from mcp_interceptors.canonical import canonical_json", "mcp_interceptors.audit.x") == []
    assert violations_of("from mcp_interceptors.audit.verify import verify_excerpt", "mcp_interceptors.ui.checks") == []
    assert violations_of("from mcp_interceptors.ui import create_app", "mcp_interceptors.gateway.fronts") == []
