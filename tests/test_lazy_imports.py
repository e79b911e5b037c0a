"""Start-up stays cheap: `import mcp_interceptors` loads no submodule and not `mcp`, and the CLI's `--help`,
`--version` and parser build import none of the heavy libraries its commands use (issue 32, cold start).

Each check runs in a fresh interpreter and reads its `sys.modules`, since this test process has them all."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import mcp_interceptors

ROOT_INIT = Path(mcp_interceptors.__file__)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (its stdout is left to `code`)."""
    runner = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    return set(json.loads(run_python(runner).stderr.strip().splitlines()[-1]))


def loaded(modules: set[str], top: str) -> bool:
    return any(name == top or name.startswith(f"{top}.") for name in modules)


def test_import_of_the_package_loads_neither_mcp_nor_a_submodule() -> None:
    modules = modules_after("import mcp_interceptors")
    assert not loaded(modules, "mcp")
    assert not loaded(modules, "mcp_types")
    assert not loaded(modules, "pydantic")
    assert sorted(name for name in modules if name.startswith("mcp_interceptors.")) == []


def test_a_public_name_loads_its_module_on_first_use() -> None:
    modules = modules_after("from mcp_interceptors import EXTENSION_ID, InterceptorsError")
    assert "mcp_interceptors.protocol.errors" in modules
    assert "mcp_interceptors.client" not in modules  # only what the names need


def test_lazy_table_matches_the_type_checking_imports_and_all() -> None:
    # what a type checker reads (the `if TYPE_CHECKING:` imports) and what runs (`_HOMES`) must name the same
    tree = ast.parse(ROOT_INIT.read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If))
    typed = {
        alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    homes = {name: module for module, names in mcp_interceptors._HOMES.items() for name in names}
    assert typed == homes
    assert sorted(mcp_interceptors.__all__) == sorted([*homes, "__version__"])


def test_dir_lists_every_public_name_before_any_is_used() -> None:
    done = run_python("import json, mcp_interceptors; print(json.dumps(dir(mcp_interceptors)))")
    assert set(mcp_interceptors.__all__) <= set(json.loads(done.stdout))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        _ = mcp_interceptors.NoSuchThing  # type: ignore[attr-defined]
    assert not hasattr(mcp_interceptors, "no_such_module")


def test_subpackages_stay_reachable_as_attributes() -> None:
    done = run_python("import mcp_interceptors as m; print(m.host.InterceptorHost.__name__)")
    assert done.stdout.strip() == "InterceptorHost"
