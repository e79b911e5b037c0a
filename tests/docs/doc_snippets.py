"""Extract the code blocks of README.md and docs/ and run them as a reader would.

A block's kind comes from its language, or from a `<!-- snippet: KIND OPTION=VALUE -->` line before it:

- `run` (python, bash: the default): runs in the page's working folder; it must exit 0 (`expect=N`: N).
- `check` (yaml with `upstreams:`, the default): `mcp-interceptors gateway --check` on it.
- `fragment` (other yaml, json): yaml is validated against gateway.yaml's JSON Schema, python compiled,
  json parsed.
- `background` (bash): started and left running for the page's later blocks, then stopped; `port=N`: the
  test waits for it, and runs this block and the later ones with a free port in place of `:N`.
- `e2e`: needs the network or npm; run only by the quick-start test, in page order. As an option of
  another kind (`background e2e`), the same: the block needs what e2e blocks before it made.
- `install` (bash): one `pip install -e`; the quick-start test runs the README's.
- `long` (bash): a run of minutes (a benchmark, a conformance suite): each `python SCRIPT` line's script
  must answer `--help`.
- `ci` (bash): the README's test command, which must be the one `.ci/run` runs.
- `output` (text: the default): right after a block that ran, each of its lines (`…` matching anything)
  must be in what that block printed (stdout or stderr).

A block with `title="NAME"` is also written to NAME in the page's working folder before later blocks run.
Each page runs in a temporary folder holding a copy of `examples/`, with the running Python's scripts
(`python`, `pip`, `mcp-interceptors`) first on PATH.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"run", "check", "fragment", "background", "e2e", "ci", "output", "long", "install"}
DEFAULT_KIND = {"python": "run", "bash": "run", "yaml": "fragment", "json": "fragment", "text": "output"}
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)(?P<attrs>[^\n`]*)$")
_MARK = re.compile(r"^\s*<!-- snippet: (?P<kind>[\w-]+)(?P<options>[^>]*)-->\s*$")
_TITLE = re.compile(r'title="([^"]+)"')
TIMEOUT_S = 180
#: How long a background block may take to listen (the demo runs before it serves).
BACKGROUND_START_S = 150


@dataclass
class Block:
    """One fenced code block: where it is, its language, kind, options and text."""

    page: str
    line: int
    lang: str
    kind: str
    code: str
    title: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    #: Whether only blank lines separate it from the block before it (an output block shows that one's output).
    adjacent: bool = False

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.lang}, {self.kind})"

    @property
    def needs_network(self) -> bool:
        """Whether only the quick-start test runs it."""
        return self.kind == "e2e" or "e2e" in self.options


def pages() -> list[Path]:
    """README.md and every Markdown page of the docs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a page, in order; a fence without a language is kept with `lang` empty."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, body, end = len(opening["indent"]), [], index + 1
        while end < len(lines) and lines[end].strip() != "```":
            body.append(lines[end][indent:])
            end += 1
        previous = next((line for line in reversed(lines[:index]) if line.strip()), "")
        adjacent = previous.strip() == "```" and bool(found)
        mark = _MARK.match(previous)
        lang = opening["lang"]
        kind = mark["kind"] if mark else DEFAULT_KIND.get(lang, "")
        if kind == "fragment" and lang == "yaml" and re.search(r"^upstreams:", "\n".join(body), re.MULTILINE):
            kind = "check"
        words = mark["options"].split() if mark else []
        options = dict(word.split("=", 1) if "=" in word else (word, "1") for word in words)
        title = _TITLE.search(opening["attrs"])
        found.append(
            Block(
                path.relative_to(ROOT).as_posix(),
                index + 1,
                lang,
                kind,
                "\n".join(body) + "\n",
                title[1] if title else None,
                options,
                adjacent,
            )
        )
        index = end + 1
    return found


@functools.cache
def config_validator() -> jsonschema.protocols.Validator:
    """A validator for gateway.yaml's JSON Schema, as `mcp-interceptors config-schema` prints it."""
    done = subprocess.run(
        [sys.executable, "-m", "mcp_interceptors", "config-schema"], capture_output=True, text=True, check=True
    )
    schema = json.loads(done.stdout)
    validator: jsonschema.protocols.Validator = jsonschema.validators.validator_for(schema)(schema)
    return validator


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def environment(bin_dir: Path | None = None) -> dict[str, str]:
    """The reader's environment: this Python's scripts first on PATH."""
    scripts = str(bin_dir or Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONUNBUFFERED": "1"}


def workdir(base: Path) -> Path:
    """A working folder with `examples/` (copied unless it has them), so relative paths in the docs resolve."""
    if not (base / "examples").exists():
        shutil.copytree(ROOT / "examples", base / "examples", ignore=shutil.ignore_patterns("__pycache__", ".audit"))
    return base


class Runner:
    """Runs one page's blocks in order in one folder; `close` stops what `background` blocks started."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.env = folder, env
        self.background: list[tuple[Block, subprocess.Popen[bytes]]] = []
        #: What the last block that ran printed (None after a block that prints nothing checkable).
        self.printed: str | None = None
        #: `:PORT` as the docs write it -> `:PORT` this run uses.
        self.ports: dict[str, str] = {}

    def run(self, block: Block) -> None:
        if "port" in block.options:
            self.ports[f":{block.options['port']}"] = f":{free_port()}"
        code = block.code
        for documented, used in self.ports.items():
            code = re.sub(rf"{re.escape(documented)}\b", used, code)
        block = replace(block, code=code)
        if block.title is not None:
            target = self.folder / block.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code, encoding="utf-8")
        handler = getattr(self, f"_{block.kind}_{block.lang}", None) or getattr(self, f"_{block.kind}", None)
        if handler is None:
            raise AssertionError(f"{block}: no way to run a {block.lang!r} block of kind {block.kind!r}")
        if block.kind != "output":
            self.printed = None
        handler(block)

    def _install(self, block: Block) -> None:
        assert re.fullmatch(r"pip install -e \S+\n", block.code), f"{block}: an install block is one `pip install -e`"
        self.printed = None

    def skip(self, block: Block) -> None:
        """A block this run leaves out: the output shown after it cannot be checked either."""
        self.printed = None

    def _output(self, block: Block) -> None:
        if block.lang == "json":
            json.loads(block.code)
        if self.printed is None or not block.adjacent:
            return
        lines = self.printed.splitlines()
        for expected in filter(None, (line.strip() for line in block.code.splitlines())):
            pattern = ".*".join(re.escape(piece) for piece in expected.split("…"))
            assert any(re.search(pattern, line) for line in lines), (
                f"{block}: {expected!r} is not in what the block before printed:\n{self.printed[-3000:]}"
            )

    def _fragment_json(self, block: Block) -> None:
        json.loads(block.code)

    def _fragment_python(self, block: Block) -> None:
        compile(block.code, str(block), "exec")

    def _fragment_yaml(self, block: Block) -> None:
        data = yaml.safe_load(block.code)
        assert isinstance(data, dict), f"{block}: a YAML fragment of gateway.yaml is a mapping"
        config = {"upstreams": {"docs": {"command": "python"}}, **data}
        errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in config_validator().iter_errors(config)]
        assert errors == [], f"{block} does not fit gateway.yaml's JSON Schema: {errors}"

    def _check_yaml(self, block: Block) -> None:
        self._check_config(block, block.code)

    def _check_config(self, block: Block, text: str) -> None:
        if block.title is not None:
            path = self.folder / block.title
        else:
            path = self.folder / f".snippet-{block.line}.yaml"
            path.write_text(text, encoding="utf-8")
        command = [sys.executable, "-m", "mcp_interceptors", "gateway", "--check", str(path)]
        self._completes(block, command)

    def _run_python(self, block: Block) -> None:
        script = self.folder / (block.title or f".snippet-{block.line}.py")
        if block.title is None:
            script.write_text(block.code, encoding="utf-8")
        self._completes(block, [sys.executable, str(script)])

    def _run_bash(self, block: Block) -> None:
        self._completes(block, ["bash", "-euo", "pipefail", "-c", block.code])

    def _long_bash(self, block: Block) -> None:
        scripts = 0
        for line in block.code.splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"\w+=\S*", words[0]):
                words.pop(0)
            if words[:3] == ["python", "-m", "pytest"]:
                assert all((ROOT / word).exists() for word in words[3:] if not word.startswith("-")), block
            elif words[:1] == ["python"] and words[1].endswith(".py"):
                assert (ROOT / words[1]).is_file(), f"{block}: {words[1]} does not exist"
                done = subprocess.run(
                    [sys.executable, words[1], "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
                )
                assert done.returncode == 0, f"{block}: {words[1]} --help exited {done.returncode}: {done.stderr}"
                scripts += 1
        assert scripts, f"{block}: a long block runs at least one `python SCRIPT`"

    _e2e_bash = _run_bash
    _e2e_python = _run_python

    def _completes(self, block: Block, command: list[str]) -> None:
        done = subprocess.run(
            command,
            cwd=self.folder,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        expected = int(block.options.get("expect", 0))
        assert done.returncode == expected, (
            f"{block} exited {done.returncode}, not {expected}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        self.printed = done.stdout + done.stderr

    def _background_bash(self, block: Block) -> None:
        with (self.folder / f".snippet-{block.line}.log").open("wb") as log:
            process = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", f"exec {block.code.strip()}"],
                cwd=self.folder,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        self.background.append((block, process))
        port = int(self.ports[f":{block.options['port']}"][1:]) if "port" in block.options else 0
        deadline = time.monotonic() + BACKGROUND_START_S
        while time.monotonic() < deadline:
            assert process.poll() is None, f"{block} exited {process.returncode}: {self.log(block)}"
            if port == 0:
                time.sleep(2)
                return
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                return
            time.sleep(0.2)
        raise AssertionError(f"{block}: nothing listened on {port} within {BACKGROUND_START_S} s: {self.log(block)}")

    def log(self, block: Block) -> str:
        return (self.folder / f".snippet-{block.line}.log").read_text(encoding="utf-8", errors="replace")[-3000:]

    def close(self) -> None:
        """Stop the background processes; each must still have been running, and must stop cleanly."""
        problems = []
        for block, process in self.background:
            if process.poll() is not None:
                problems.append(f"{block} had exited {process.returncode}: {self.log(block)}")
                continue
            os.killpg(process.pid, signal.SIGTERM)
            try:
                code = process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                problems.append(f"{block} did not stop within 20 s of SIGTERM")
                continue
            if code not in (0, -signal.SIGTERM):
                problems.append(f"{block} exited {code} on SIGTERM: {self.log(block)}")
        self.background.clear()
        assert problems == [], "\n".join(problems)


@contextlib.contextmanager
def page_runner(folder: Path, env: dict[str, str] | None = None) -> Iterator[Runner]:
    runner = Runner(workdir(folder), env or environment())
    try:
        yield runner
    finally:
        runner.close()
