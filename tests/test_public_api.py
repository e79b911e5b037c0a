"""The root `__all__` is the public SDK surface: pinned here so a change to it is always deliberate."""

from __future__ import annotations

import mcp_interceptors

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
