"""`docs/conformance.md` and the test suite agree: every requirement R1-R70 has a `test_rNN_...` test,
and every test the document names exists (copies the manifest<->test check of the mcp interaction suite)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
DOC = ROOT / "docs" / "conformance.md"
REQUIREMENTS = [f"R{n}" for n in range(1, 71)]
ROW = re.compile(r"^\| (R\d+) \|", re.MULTILINE)
TEST_REF = re.compile(r"`((?:[\w/]+/)?test_\w+\.py)::(test_\w+)`")


def defined_tests() -> dict[str, set[str]]:
    """File (relative to tests/) -> names of the test functions defined in it."""
    found: dict[str, set[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        }
        found[path.relative_to(TESTS).as_posix()] = names
    return found


def test_the_document_lists_each_requirement_once() -> None:
    rows = ROW.findall(DOC.read_text(encoding="utf-8"))
    assert rows == REQUIREMENTS


def test_every_requirement_has_a_test_named_after_it() -> None:
    names = {name for functions in defined_tests().values() for name in functions}
    missing = [r for r in REQUIREMENTS if not any(n.startswith(f"test_{r.lower()}_") for n in names)]
    assert missing == []


def test_every_test_the_document_names_exists() -> None:
    functions = defined_tests()
    referenced = TEST_REF.findall(DOC.read_text(encoding="utf-8"))
    assert len(referenced) >= 70
    stale = [f"{file}::{name}" for file, name in referenced if name not in functions.get(file, set())]
    assert stale == []


def test_every_row_names_at_least_one_test_for_its_requirement() -> None:
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match is None:
            continue
        requirement = match.group(1).lower()
        tests = [name for _, name in TEST_REF.findall(line)]
        assert tests, line
        numbers = {int(n) for name in tests for n in re.findall(r"_r(\d+)", name)}
        for low, high in (m for name in tests for m in re.findall(r"_r(\d+)_to_r(\d+)", name)):
            numbers |= set(range(int(low), int(high) + 1))
        assert int(requirement[1:]) in numbers, line


CODE_REF = re.compile(r"`((?:[\w/]+/)?[a-z_]+\.py):([\w.]+)`")
SRC = ROOT / "src" / "mcp_interceptors"


def defined_names(path: Path) -> set[str]:
    """Dotted names (`Class`, `Class.method`, `function`, `CONSTANT`) defined at module or class level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}.{item.name}")
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(f"{node.name}.{item.target.id}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def test_every_code_location_the_document_names_exists() -> None:
    stale = []
    for file, name in CODE_REF.findall(DOC.read_text(encoding="utf-8")):
        path = SRC / file if (SRC / file).exists() else TESTS / file
        if not path.exists() or name not in defined_names(path):
            stale.append(f"{file}:{name}")
    assert stale == []
