"""The root `__all__` is the public SDK surface: pinned here so a change to it is always deliberate."""

from __future__ import annotations

import inspect

import pytest

import mcp_interceptors
from mcp_interceptors.host import build_descriptor

PUBLIC_API = [
    "EXTENSION_ID",
    "AbortedAt",
    "Call",
    "Chain",
    "ChainExecutionParams",
    "ChainExecutionResult",
    "ChainParamsError",
    "ChainResult",
    "Compat",
    "Discovery",
    "DiscoveryError",
    "Escalation",
    "HookEntry",
    "HookMismatchError",
    "HostConnectionError",
    "InterceptingClient",
    "InterceptorDescriptor",
    "InterceptorExecutionError",
    "InterceptorHost",
    "InterceptorNotFoundError",
    "InterceptorTimeoutError",
    "InterceptorsError",
    "InvalidParamsError",
    "Invocation",
    "InvocationContext",
    "InvocationFailure",
    "InvokeParams",
    "MalformedResultError",
    "MutationResult",
    "Overrides",
    "PhasePriority",
    "Plan",
    "Principal",
    "RemoteSource",
    "RequiredInterceptor",
    "SinkResult",
    "Source",
    "Suggestion",
    "ValidationMessage",
    "ValidationResult",
    "ValidationSummary",
    "WideningOverrideError",
    "__version__",
    "chain_error",
    "direction_for",
    "discover",
    "escalate",
    "escalation_of",
    "invoke_interceptor",
    "list_interceptors",
    "parse_descriptors",
    "parse_result",
    "resolve_priority",
]


def test_public_api_is_pinned() -> None:
    assert list(mcp_interceptors.__all__) == PUBLIC_API


def test_every_public_name_resolves() -> None:
    for name in mcp_interceptors.__all__:
        assert getattr(mcp_interceptors, name) is not None, name


def test_public_names_come_from_the_package() -> None:
    for name in PUBLIC_API:
        value = getattr(mcp_interceptors, name)
        module = getattr(value, "__module__", "mcp_interceptors")
        assert isinstance(value, str) or module.startswith("mcp_interceptors"), (name, module)


def test_exceptions_share_one_root_and_carry_a_code() -> None:
    errors = [getattr(mcp_interceptors, n) for n in PUBLIC_API if n.endswith("Error")]
    for error in errors:
        assert issubclass(error, mcp_interceptors.InterceptorsError), error
        assert isinstance(error.code, int)


SIGNATURES_API = [
    "ALGORITHM",
    "UNSIGNED_KEYS",
    "SignatureError",
    "SigningKeyLike",
    "VerifyKeyLike",
    "check_result_signature",
    "generate_signing_key",
    "load_signing_key",
    "load_verify_key",
    "public_key_text",
    "sign_result",
    "signed_bytes",
    "signing_key_from",
    "verify_key_from",
]


def test_signatures_api_is_pinned() -> None:
    from mcp_interceptors import signatures

    assert list(signatures.__all__) == SIGNATURES_API
    assert issubclass(signatures.SignatureError, mcp_interceptors.InterceptorsError)
    assert signatures.SignatureError.code == -32603


@pytest.mark.parametrize("decorator", ["validator", "mutator", "sink"])
def test_decorator_options_are_typed_keywords_so_a_type_checker_catches_a_typo(decorator: str) -> None:
    # regression: they were `**options: Any`, so `mypy --strict` accepted `phse="request"` or `priority="high"`
    # (the package ships py.typed) and a typo surfaced only at runtime as `build_descriptor()`'s TypeError
    parameters = inspect.signature(getattr(mcp_interceptors.InterceptorHost, decorator)).parameters
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    options = {name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert options == set(inspect.signature(build_descriptor).parameters) - {"name", "type_"}
    with pytest.raises(TypeError, match=rf"InterceptorHost\.{decorator}\(\) got an unexpected keyword argument 'phse'"):
        getattr(mcp_interceptors.InterceptorHost(), decorator)("x", events=["*"], phse="request")


UI_API = ["AuditReader", "Limits", "UiAuth", "UiSettings", "allowed_hosts_for", "create_app", "serve_ui"]


def test_ui_api_is_pinned() -> None:
    from mcp_interceptors import ui

    assert list(ui.__all__) == UI_API
