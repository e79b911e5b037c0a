"""deploy/: the Kubernetes manifest is valid against Kubernetes' own schemas (kubernetes-validate, from PyPI),
its gateway config is valid against the gateway's, and the Dockerfile runs the gateway as a user without
privileges with a health check on the /healthz it serves. No container tool runs here, so the image itself
is not built by the tests."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcp_interceptors.gateway.config import parse_config

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
