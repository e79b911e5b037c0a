"""Start-up stays cheap: `import mcp_interceptors` loads no submodule and not `mcp`, and the CLI's `--help`,
`--version` and parser build import none of the heavy libraries its commands use (issue 32, cold start).

Each check runs in a fresh interpreter and reads its `sys.modules`, since this test process has them all."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import mcp_interceptors
from mcp_interceptors.cli import _commands, build_parser

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


#: What the commands run on; building the parser imports none of them.
HEAVY = ("mcp", "mcp_types", "pydantic", "sqlalchemy", "opentelemetry", "cryptography", "anyio", "httpx2", "yaml")


def cli_modules(*words: str) -> set[str]:
    """The modules a fresh interpreter holds after `mcp-interceptors WORDS` (through the CLI's `main`)."""
    return modules_after(
        "import contextlib, io\n"
        "from mcp_interceptors.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    main({list(words)!r})"
    )


@pytest.mark.parametrize(
    "words",
    [("--help",), ("--version",), ("gateway", "--help"), ("audit", "verify", "--help"), ("serve", "--help")],
    ids=" ".join,
)
def test_help_and_version_import_none_of_the_commands_libraries(words: tuple[str, ...]) -> None:
    modules = cli_modules(*words)
    assert [top for top in (*HEAVY, "shtab") if loaded(modules, top)] == []
    commands = {"_core", "_gateway", "_guards", "_audit", "_ui", "_clients", "_completion", "_runtime"}
    assert {name.rpartition(".")[2] for name in modules if name.startswith("mcp_interceptors.cli.")} & commands == set()


def test_completion_imports_shtab_but_not_the_commands_libraries() -> None:
    modules = cli_modules("completion", "bash")
    assert loaded(modules, "shtab")
    assert [top for top in HEAVY if loaded(modules, top)] == []


def test_a_command_imports_its_module_when_it_runs() -> None:
    modules = cli_modules("config-schema")
    assert "mcp_interceptors.cli._gateway" in modules
    assert "mcp_interceptors.cli._audit" not in modules


def _leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        return [parser]
    return [leaf for sub in subcommands for child in sub.choices.values() for leaf in _leaf_parsers(child)]


def test_every_command_names_a_handler_its_module_defines() -> None:
    leaves = _leaf_parsers(build_parser())
    assert len(leaves) >= 14  # list, invoke, gateway, config-schema, serve, pin, audit x6, ui, wrap, completion
    for leaf in leaves:
        handler = leaf.get_default("handler")
        module = importlib.import_module(f"mcp_interceptors.cli.{handler.module}")
        assert callable(getattr(module, handler.function)), (leaf.prog, handler)


def test_constants_the_parser_repeats_match_their_sources() -> None:
    import shtab

    from mcp_interceptors import audit

    assert _commands.DEFAULT_KEY_PATH == audit.DEFAULT_KEY_PATH
    assert list(_commands.SHELLS) == list(shtab.SUPPORTED_SHELLS)
