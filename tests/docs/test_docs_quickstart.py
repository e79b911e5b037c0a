"""The README works as a newcomer runs it: its commands, in order, in a fresh checkout and a fresh virtual
environment, fronting the real filesystem server from npm (installed offline from the cache `.ci/run` fills),
with the outputs it shows. The test command it shows is the one `.ci/run` runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from doc_snippets import ROOT, blocks, environment, page_runner, pages

README = ROOT / "README.md"


def readme_blocks(kind: str) -> list[str]:
    return [block.code.strip() for block in blocks(README) if block.kind == kind]


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    [command] = readme_blocks("ci")
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command in ci_lines


def test_the_npm_server_ci_caches_is_the_one_the_readme_installs() -> None:
    cached = re.search(r"^QUICKSTART_NPM=(\S+)$", (ROOT / ".ci" / "run").read_text(encoding="utf-8"), re.MULTILINE)
    assert cached is not None
    assert any(f" {cached[1]}" in command for command in readme_blocks("e2e"))


def test_the_readmes_links_name_files_that_exist() -> None:
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    assert [target for target in targets if "://" not in target and not (ROOT / target).exists()] == []


def require(variable: str, reason: str) -> None:
    """Skip, unless CI set `variable` (then a missing prerequisite fails the test)."""
    if os.environ.get(variable):
        pytest.fail(f"{variable} is set but {reason}")
    pytest.skip(f"{reason} (set {variable} to fail instead)")


def fresh_checkout(target: Path) -> Path:
    """The project's files as a clone has them (what git tracks, else the tree without build output)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode == 0 and listed.stdout:
        for name in listed.stdout.decode().split("\0"):
            if name and (ROOT / name).is_file():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, target / name)
    else:
        ignore = shutil.ignore_patterns(".git", ".venv", "site", ".cache", "__pycache__", "*.egg-info")
        shutil.copytree(ROOT, target, ignore=ignore, dirs_exist_ok=True)
    return target


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A new virtual environment (seeing the installed dependencies) with this package installed from a
    fresh checkout, as a newcomer's machine has it after the README's first command; its environment."""
    if shutil.which("npm") is None:
        require("MCPI_REQUIRE_NPM", "npm is not installed (apt-get install npm)")
    base = tmp_path_factory.mktemp("newcomer")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    env = environment(venv / "bin")
    env.pop("VIRTUAL_ENV", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if os.environ.get("MCPI_PIP_WHEELS"):  # CI: the build backend from the wheels .ci/run fetched, offline
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=os.environ["MCPI_PIP_WHEELS"])
    env.update(npm_config_update_notifier="false", npm_config_fund="false")
    if os.environ.get("MCPI_NPM_CACHE"):  # CI: npm installs from the cache .ci/run filled, offline
        env.update(npm_config_cache=os.environ["MCPI_NPM_CACHE"], npm_config_offline="true")
    checkout = fresh_checkout(base / "checkout")
    install = [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "-e", str(checkout)]
    subprocess.run(install, env=env, check=True, timeout=300, capture_output=True)
    return env


E2E_PAGES = [README, *(page for page in pages()[1:] if any(block.needs_network for block in blocks(page)))]


@pytest.mark.e2e
@pytest.mark.parametrize("page", E2E_PAGES, ids=[page.relative_to(ROOT).as_posix() for page in E2E_PAGES])
def test_a_page_runs_as_written_on_a_fresh_machine(page: Path, fresh_venv: dict[str, str], tmp_path: Path) -> None:
    """Every block of the page in order, network and npm ones included (README.md: the quick start)."""
    checkout = fresh_checkout(tmp_path / "checkout")
    started = time.monotonic()
    with page_runner(checkout, fresh_venv) as runner:
        for block in blocks(page):
            if block.kind == "ci":
                runner.skip(block)
            else:
                runner.run(block)
    print(f"{page.name}, from a fresh checkout and venv: {time.monotonic() - started:.0f} s")
    if page == README:
        assert (checkout / "quickstart" / "audit" / "audit.db").exists()
