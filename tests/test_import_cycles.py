"""No import cycle anywhere in `src/mcp_interceptors`: an AST scan of every import, those under `TYPE_CHECKING`
and inside functions too, since each is a dependency a reader has to follow either way.

`test_layering.py` checks that imports point down across layers; this checks that they never loop,
within a layer (the gateway's modules) as across them.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from test_layering import PACKAGE, imported_modules, module_name


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (a package's own `__init__` counts as the package)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        names = imported_modules(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
        graph[module] = {name for name in names if name.split(".")[0] == "mcp_interceptors" and name != module}
    return graph


def cycles_in(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan's algorithm), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = import_graph()
    assert len(graph) > 50
    assert cycles_in(graph) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}, "e": {"a", "c"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_the_scanner_finds_every_cycle(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles_in(graph) == expected


def test_the_scan_sees_imports_under_type_checking_and_in_functions() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from mcp_interceptors.gateway.gateway import Gateway\n"
        "def later():\n"
        "    from mcp_interceptors.gateway import recording\n"
    )
    found = set(imported_modules(source, "mcp_interceptors.gateway.session", False))
    assert {"mcp_interceptors.gateway.gateway", "mcp_interceptors.gateway.recording"} <= found
