"""deploy/: the Kubernetes manifest is valid against Kubernetes' own schemas (kubernetes-validate, from PyPI),
its gateway config is valid against the gateway's, and the Dockerfile runs the gateway as a user without
privileges with a health check on the /healthz it serves. No container daemon runs here (and no image registry
is reachable), so the image itself is not built: the tests read the Dockerfile's instructions, check that every
file it copies from the build context exists, and run its ENTRYPOINT and HEALTHCHECK commands against a real
gateway on loopback."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from mcp_interceptors.gateway.config import parse_config

sys.path.insert(0, str(Path(__file__).resolve().parent / "guards"))  # guard_support.py
from guard_support import E2E_TIMEOUT_S, gateway_config, upstream
from helpers import child_env, free_tcp_port, running

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
KUBERNETES_VERSION = "1.30.0"
ENV = {
    "TOOLS_URL": "http://tools:8000/mcp",
    "REDIS_URL": "redis://redis:6379/0",
    "GATEWAY_TOKEN": "a-token-for-the-test",
    "REQUEST_STATE_KEY": "k" * 40,
    "AUDIT_DATABASE_URL": "postgresql://gateway@postgres/audit",
}


def documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text(encoding="utf-8")) if doc]


def test_the_kubernetes_manifest_is_valid_against_kubernetes_schemas() -> None:
    try:
        import kubernetes_validate
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("kubernetes-validate is not installed (pip install -e '.[test]')")
    kinds = []
    for doc in documents():
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)  # raises naming the field
        kinds.append(doc["kind"])
    assert kinds == ["ConfigMap", "Deployment", "Service"]


def test_a_manifest_kubernetes_would_refuse_is_refused() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    deployment = documents()[1]
    deployment["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_the_manifest_gateway_config_is_valid_and_shares_its_state() -> None:
    [config_map, deployment, _] = documents()
    config = parse_config(yaml.safe_load(config_map["data"]["gateway.yaml"]), file="gateway.yaml", env=ENV)
    assert config.state.redis_url == ENV["REDIS_URL"] and config.state.request_state_keys == [ENV["REQUEST_STATE_KEY"]]
    assert config.audit.store.startswith("postgresql://") and config.auth.enabled
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_the_dockerfile_runs_the_gateway_unprivileged_with_a_health_check() -> None:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.\d+-slim$", text, re.MULTILINE)
    [user] = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert user.split(":")[0] not in ("0", "root")
    assert "HEALTHCHECK" in text and "/healthz" in text
    deployment = documents()[1]
    mount = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    assert f'"{mount}/gateway.yaml"' in text  # the ENTRYPOINT reads the ConfigMap's file


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's (instruction, arguments), continuation lines joined and comments dropped."""
    lines, pending = [], ""
    for raw in (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_dockerfile_copies_only_what_the_build_context_has() -> None:
    root = DEPLOY.parent
    known = {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT"}
    steps = instructions()
    assert {name for name, _ in steps} <= known
    stages = [args for name, args in steps if name == "FROM"]
    assert stages[-1] == "python:3.11-slim" and all(stage.startswith("python:3.11-slim") for stage in stages)
    copied = []
    for name, args in steps:
        if name != "COPY" or args.startswith("--from="):
            continue
        *sources, _ = args.split()
        copied += sources
        for source in sources:
            assert (root / source).exists(), f"COPY {source}: not in the build context"
    assert {"pyproject.toml", "src"} <= set(copied)
    runs = " ".join(args for name, args in steps if name == "RUN")
    assert "pip wheel" in runs and "mcp_interceptors-*.whl)[redis,postgres]" in runs  # the image installs the wheel
    [entrypoint] = [json.loads(args) for name, args in steps if name == "ENTRYPOINT"]
    assert entrypoint[:2] == ["mcp-interceptors", "gateway"]


def _health_argv(port: int) -> list[str]:
    [check] = [args for name, args in instructions() if name == "HEALTHCHECK"]
    argv: list[str] = json.loads(check.split("CMD", 1)[1])
    assert argv[0] == "python"
    return [sys.executable, *(a.replace("127.0.0.1:8080", f"127.0.0.1:{port}") for a in argv[1:])]


@pytest.mark.anyio
@pytest.mark.e2e
async def test_the_image_entrypoint_serves_and_its_healthcheck_passes_and_fails(tmp_path: Path) -> None:
    """The ENTRYPOINT's own arguments (its config path and port moved to the test's) start the gateway; the
    HEALTHCHECK command exits 0 against its /healthz and non-zero once nothing answers."""
    [entrypoint] = [json.loads(args) for name, args in instructions() if name == "ENTRYPOINT"]
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(gateway_config([{"name": "secrets"}], upstreams={"notes": upstream()})))
    port = free_tcp_port()
    moved = {"/etc/mcp-interceptors/gateway.yaml": str(config), "0.0.0.0:8080": f"127.0.0.1:{port}"}
    argv = [sys.executable, "-m", "mcp_interceptors", *(moved.get(a, a) for a in entrypoint[1:])]
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with running(argv, port=port, env=child_env(), label="image entrypoint"):
            healthy = await anyio.run_process(_health_argv(port), check=False)
            assert healthy.returncode == 0, healthy.stderr.decode()
        gone = await anyio.run_process(_health_argv(port), check=False)
    assert gone.returncode != 0
