"""docs/architecture.md stays true: every module of `src/mcp_interceptors` but the CLI, the guards, the audit
trail and its web view has its line there, every file it names exists, and each function of the `tools/call`
path is in its file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_layering import PACKAGE

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
#: Packages documented elsewhere (docs/guards.md, docs/audit.md, docs/ui.md, the CLI's --help).
ELSEWHERE = ("guards/", "audit/", "ui/", "cli/")


def documented_modules() -> set[str]:
    return set(re.findall(r"^\| `([a-z_/]+\.py)` \|", DOC.read_text(encoding="utf-8"), re.MULTILINE))


def test_every_module_has_its_line() -> None:
    modules = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    }
    missing = sorted(m for m in modules if not m.startswith(ELSEWHERE) and m not in documented_modules())
    assert missing == []
    assert sorted(m for m in documented_modules() if not (PACKAGE / m).exists()) == []


def defined(path: Path) -> set[str]:
    """`name` and `Class.name` for the functions and classes of a module."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            )
    return names


def test_the_call_path_names_functions_that_exist() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = re.findall(r"^\| \d \| `([a-z_/]+\.py)` \| (.+?) \|", text, re.MULTILINE)
    assert len({file for file, _ in rows}) == 6
    missing = []
    for file, functions in rows:
        names = defined(PACKAGE / file)
        owner = ""
        for name in re.findall(r"`([A-Za-z_.]+)`", functions):
            owner, _, method = name.rpartition(".") if "." in name else (owner, "", name)
            if name not in names and f"{owner}.{method}" not in names:
                missing.append(f"{file}: {name}")
    assert missing == []
