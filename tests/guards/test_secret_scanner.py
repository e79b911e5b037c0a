"""SecretScanner: each kind's true positives and the near misses that must pass, on both regex engines.

Every token here is built from an obvious FAKE marker or filler; none is a real credential.
"""

from __future__ import annotations

import base64
import itertools
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_interceptors.guards._detectors import SECRET_KINDS, SecretScanner
from mcp_interceptors.guards._detectors import _secret_rules as secrets
from mcp_interceptors.guards._detectors._engine import re2

ENGINES = ["re", pytest.param("re2", marks=pytest.mark.skipif(re2 is None, reason="google-re2 not installed"))]

ALNUM36 = "FAKE" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG"[:32]
AWS_SECRET = "FAKEwJalrXUtnFEMI/K7MDENG+bPxRfiCY0a1b2c"


def jwt(header: dict[str, str], claims: dict[str, object] | None = None) -> str:
    def part(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part(claims or {'sub': 'fake-user'})}.{'FAKEsig0123456789abcdefghijklmnopqrstuvwx'}"


JWT = jwt({"alg": "HS256", "typ": "JWT"})
PEM = "\n".join(
    [
        "-----BEGIN RSA PRIVATE KEY-----",
        "MIIEFAKEKEYAAKCAQEA0123456789abcdef",
        "ZmFrZWtleWZha2VrZXk=",
        "-----END RSA PRIVATE KEY-----",
    ]
)

# (text, kind, the exact text the finding must cover)
POSITIVES = [
    ("id=AKIAFAKEFAKEFAKEFAKE;", "aws_access_key", "AKIAFAKEFAKEFAKEFAKE"),
    ("ASIAFAKE234567ABCDEF", "aws_access_key", "ASIAFAKE234567ABCDEF"),
    (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_key", AWS_SECRET),
    (f'"SecretAccessKey": "{AWS_SECRET}"', "aws_secret_key", AWS_SECRET),
    (f"AWS_SECRET_ACCESS_KEY='{AWS_SECRET}'", "aws_secret_key", AWS_SECRET),
    # JSON that escapes `/` as `\/` (PHP's json_encode, Java's org.json), as a string inside a payload
    (
        '{"AWS_SECRET_ACCESS_KEY": "' + AWS_SECRET.replace("/", "\\/") + '"}',
        "aws_secret_key",
        AWS_SECRET.replace("/", "\\/"),
    ),
    *[(f"t {p}_{ALNUM36} x", "github_token", f"{p}_{ALNUM36}") for p in ("ghp", "gho", "ghu", "ghs", "ghr")],
    (
        "github_pat_11FAKE" + "A" * 16 + "_" + "b" * 59,
        "github_fine_grained_token",
        "github_pat_11FAKE" + "A" * 16 + "_" + "b" * 59,
    ),
    ("key: sk_live_FAKE0123456789abcdefghij", "stripe_key", "sk_live_FAKE0123456789abcdefghij"),
    ("rk_live_FAKE0123456789abcdefghijKLMNOP", "stripe_key", "rk_live_FAKE0123456789abcdefghijKLMNOP"),
    (
        "xoxb-123456789012-1234567890123-FAKEaBcDeFgHiJkLmNoPqRsT",
        "slack_token",
        "xoxb-123456789012-1234567890123-FAKEaBcDeFgHiJkLmNoPqRsT",
    ),
    (
        "xoxp-1234567890-1234567890-123456789012-FAKE0123456789abcdef0123456789ab",
        "slack_token",
        "xoxp-1234567890-1234567890-123456789012-FAKE0123456789abcdef0123456789ab",
    ),
    (
        "url: https://hooks.slack.com/services/T0FAKE000/B0FAKE000/FAKEfakeFAKEfakeFAKEfake",
        "slack_webhook",
        "https://hooks.slack.com/services/T0FAKE000/B0FAKE000/FAKEfakeFAKEfakeFAKEfake",
    ),
    (
        '{"url":"https:\\/\\/hooks.slack.com\\/services\\/T0FAKE000\\/B0FAKE000\\/FAKEfakeFAKEfakeFAKEfake"}',
        "slack_webhook",
        "https:\\/\\/hooks.slack.com\\/services\\/T0FAKE000\\/B0FAKE000\\/FAKEfakeFAKEfakeFAKEfake",
    ),
    ("AIzaFAKE" + "x" * 31 + "'", "google_api_key", "AIzaFAKE" + "x" * 31),
    (f"key:\n{PEM}\nrest", "private_key", PEM),
    (PEM.replace("\n", "\\n"), "private_key", PEM.replace("\n", "\\n")),  # JSON-escaped newlines
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEFAKE\n",
        "private_key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEFAKE",
    ),  # truncated: the block ends at its last base64 line
    (f"Authorization: Bearer {JWT}", "jwt", JWT),
    (jwt({"alg": "none"})[:-41], "jwt", jwt({"alg": "none"})[:-41]),  # unsigned: empty signature
    ('password = "Xk9#mP2$vL8q"', "generic_secret", "Xk9#mP2$vL8q"),
    ("DB_PASSWORD=Zr8vQ2pLx9aB", "generic_secret", "Zr8vQ2pLx9aB"),
    ('{"api_key": "4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"}', "generic_secret", "4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"),
    ("client_secret: 'q8W#e7R$t6Y%u5'", "generic_secret", "q8W#e7R$t6Y%u5"),
    ('{\\"token\\": \\"Zr8vQ2pLx9aB3cD4\\"}', "generic_secret", "Zr8vQ2pLx9aB3cD4"),  # JSON inside JSON
    ('"api_token":"Zr8vQ2pLx9aB3cD4', "generic_secret", "Zr8vQ2pLx9aB3cD4"),  # a line cut before its quote
    ("--password=Zr8vQ2pLx9aB3cD4", "generic_secret", "Zr8vQ2pLx9aB3cD4"),
    ("Authorization: Bearer Zr8vQ2pLx9aB3cD4eF5gH6", "generic_secret", "Zr8vQ2pLx9aB3cD4eF5gH6"),
    ("DATABASE_URL=postgres://app:Zr8vQ2pLx9@db:5432/app", "generic_secret", "Zr8vQ2pLx9"),
    ("REDIS_URL=redis://:Zr8vQ2pLx9@cache:6379/0", "generic_secret", "Zr8vQ2pLx9"),  # a password, no user
]

NEGATIVES = [
    "AKIAEXAMPLE",  # too short
    "AKIAFAKEFAKEFAKEFAK",  # one char short
    "XAKIAFAKEFAKEFAKEFAKE",  # glued to a word
    "akiafakefakefakefake",  # lower case
    f"aws_secret_access_key = {'A' * 40}",  # no entropy
    "ghp_" + "a" * 35,  # wrong length
    "ghp_" + "a" * 37,
    "the ghp_ prefix",
    "github_pat_" + "a" * 81,  # truncated
    "sk_test_FAKE0123456789abcdefghij",  # test mode
    "sk_live_short",
    "xoxb-",
    "AIzaFAKE" + "x" * 30,  # too short
    "AIzaFAKE" + "x" * 32,  # too long
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIBIjANBgkq\n-----END CERTIFICATE-----",
    "eyJhbGciOi.notajwt.x",
    jwt({"typ": "JWT"}),  # header has no alg
    "password=changeme",
    'password: "********"',
    "api_key: ${API_KEY}",
    'token = os.environ["GITHUB_TOKEN"]',
    "token = settings.GITHUB_TOKEN",
    '"password": "<your-password-here>"',
    "secret: {{ vault_secret }}",
    "DB_PASSWORD=hunter2",  # too short to judge
    "Password: Incorrect",
    "password: notarealpassword",
    "token_count = 12345678",
    "max_tokens: 4096",
    "password_hash = 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8",
    "PWD=/home/dev/projects/widgets",
    "api_key: your_api_key_here",
    "Bearer token",
    "https://user:password@example.com/",
    "http://u:pass@host/",
    "redis://:password@cache:6379/0",
    "commit 3f2a9c1e0b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
    "request_id=123e4567-e89b-12d3-a456-426614174000",
    # Seen in real code (site-packages):
    "AKIAIOSFODNN7EXAMPLE",  # AWS documentation's sample key
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "refresh_token: RefreshTokenT,",  # a type parameter
    "Token = _TokenType()",
    "token = make_token(user)",
    "async def set_tokens(self, tokens: OAuthToken) -> None:",
    "def __init__(self, keep_all_tokens: bool=False, expand1: bool=False):",
    '"arn:aws:secretsmanager:*:*:secret:events!connection/AmazonSecurityLake-*"',
    'publicKeyToken="1fc8b3b9a1e18e3b"',
    "SECRET_KEY = 'development key'",
    "message: str = \"Invalid Token: 'Invalid token'\"",
    'instead of expecting the "password:" prompt you can wait for the shell',
    'ACL_CREDENTIALS = "Access-Control-Allow-Credentials"',
    '"arn:aws:secretsmanager:*:*:secret:do-not-delete-rds-custom-*"',
    "when your file has '-----BEGIN RSA PRIVATE KEY-----' and '-----END RSA PRIVATE KEY-----'",
    '_SK_START = b"-----BEGIN OPENSSH PRIVATE KEY-----"',
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
]


@pytest.fixture(params=ENGINES)
def scanner(request: pytest.FixtureRequest) -> SecretScanner:
    return SecretScanner(engine=request.param)


@pytest.mark.parametrize(("text", "kind", "covered"), POSITIVES)
def test_finds_each_kind(scanner: SecretScanner, text: str, kind: str, covered: str) -> None:
    findings = scanner.scan(text)
    assert [(f.kind, text[f.start : f.end]) for f in findings] == [(kind, covered)]


@pytest.mark.parametrize("text", NEGATIVES)
def test_near_misses_pass(scanner: SecretScanner, text: str) -> None:
    assert scanner.scan(text) == []


def test_every_kind_has_a_positive_case() -> None:
    assert {kind for _, kind, _ in POSITIVES} == set(SECRET_KINDS)


def test_offsets_are_chars_after_non_ascii_text(scanner: SecretScanner) -> None:
    text = "Grüße 😀 東京 token ghp_" + ALNUM36 + " and AKIAFAKEFAKEFAKEFAKE"
    got = [(f.kind, text[f.start : f.end]) for f in scanner.scan(text)]
    assert got == [("github_token", "ghp_" + ALNUM36), ("aws_access_key", "AKIAFAKEFAKEFAKEFAKE")]


def test_specific_kind_wins_over_generic_on_the_same_value(scanner: SecretScanner) -> None:
    text = f"GITHUB_TOKEN=ghp_{ALNUM36}\nSESSION_TOKEN={JWT}"
    assert [f.kind for f in scanner.scan(text)] == ["github_token", "jwt"]


def test_a_41_char_value_is_not_an_aws_secret_key(scanner: SecretScanner) -> None:
    text = f"aws_secret_access_key = {AWS_SECRET}x"
    assert [f.kind for f in scanner.scan(text)] == ["generic_secret"]  # still random, still assigned
    escaped = AWS_SECRET.replace("/", "\\/")  # 40 characters written as 41, then one more ("\\/" counts once)
    assert "aws_secret_key" not in [f.kind for f in scanner.scan(f'{{"aws_secret_access_key": "{escaped}\\/"}}')]
    [finding] = scanner.scan(f'{{"aws_secret_access_key": "{escaped}\\n"}}')  # an escaped newline ends it
    assert (finding.kind, finding.end - finding.start) == ("aws_secret_key", len(escaped))


def test_truncated_private_key_leaves_following_prose_alone(scanner: SecretScanner) -> None:
    text = "-----BEGIN RSA PRIVATE KEY-----\nMIIEFAKEKEY0123\nZmFrZQ==\nthe rest of this message is prose\n"
    [finding] = scanner.scan(text)
    assert text[finding.end :] == "\nthe rest of this message is prose\n"


def test_kinds_limit_the_scan() -> None:
    text = f"AKIAFAKEFAKEFAKEFAKE ghp_{ALNUM36}"
    assert [f.kind for f in SecretScanner(kinds=["github_token"]).scan(text)] == ["github_token"]


def test_unknown_kind_is_rejected_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown secret kinds \['aws_key'\]; choose from \['aws_access_key'"):
        SecretScanner(kinds=["aws_key"])


def test_extra_patterns_use_the_secret_group() -> None:
    scanner = SecretScanner(kinds=[], extra_patterns={"acme_key": r"acme_(?P<secret>[0-9a-f]{16})"})
    text = "k=acme_0123456789abcdef"
    assert [(f.kind, text[f.start : f.end]) for f in scanner.scan(text)] == [("acme_key", "0123456789abcdef")]


def test_extra_patterns_with_lookarounds_are_refused_not_run_on_stdlib_re() -> None:
    # stdlib `re` backtracks: `(?!z)(a+)+$` held the event loop for seconds on "a" * 27 + "!".
    with pytest.raises(ValueError, match=r"'acme_key' .* RE2 rejects it"):
        SecretScanner(kinds=[], extra_patterns={"acme_key": r"(?<![a-z])ACME-[0-9]{6}"})


def test_extra_patterns_run_on_re2_whatever_the_engine() -> None:
    scanner = SecretScanner(kinds=[], extra_patterns={"acme_key": r"(a+)+$"}, engine="re")
    assert scanner.scan("a" * 40 + "!") == []  # linear on re2; exponential on stdlib `re`


def test_a_broken_extra_pattern_names_its_kind() -> None:
    with pytest.raises(ValueError, match=r"extra secret pattern 'acme_key' .* does not compile"):
        SecretScanner(extra_patterns={"acme_key": "acme_(["})


def test_findings_are_sorted_and_disjoint(scanner: SecretScanner) -> None:
    text = "\n".join(t for t, _, _ in POSITIVES)
    findings = scanner.scan(text)
    assert all(a.end <= b.start for a, b in itertools.pairwise(findings))
    assert len(findings) == len(POSITIVES)


# The private-key check's regexes as first written (one alternation per char; every key char collected).
_REFERENCE_PEM_FILLER = re.compile(r"(?:[A-Za-z0-9+/=:,. \t\r\n-]|\\[nr])*")
_REFERENCE_PEM_KEY_CHARS = re.compile(r"[A-Za-z0-9+/=]")


@given(st.text(alphabet="Ab9+/=:,. \t\r\n-\\nrx\u00e9", max_size=60), st.integers(0, 8), st.integers(0, 8))
def test_private_key_body_checks_match_the_reference(body: str, pos: int, cut: int) -> None:
    endpos = max(pos, len(body) - cut)
    assert bool(secrets._PEM_FILLER.fullmatch(body, pos, endpos)) == bool(
        _REFERENCE_PEM_FILLER.fullmatch(body, pos, endpos)
    )
    assert bool(secrets._PEM_KEY_MATERIAL.match(body, pos, endpos)) == (
        len(_REFERENCE_PEM_KEY_CHARS.findall(body, pos, endpos)) >= 16
    )


def test_an_assigned_token_a_specific_rule_found_gets_no_entropy_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """`token = ghp_...` is a generic secret whose value is the GitHub token already found: a generic finding
    inside it changes nothing, so its value is not judged; a value no other rule knows still is."""
    judged: list[str] = []
    is_random_value = secrets.is_random_value

    def counting(value: str, *, min_length: int = 8) -> bool:
        judged.append(value)
        return is_random_value(value, min_length=min_length)

    monkeypatch.setattr(secrets, "is_random_value", counting)
    token = "ghp_" + "aB3dE5fG7hJ9kL2mN4pQ6rS8tU0vW1xY3zA5"
    text = f"token = {token}\npassword = Zr8vQ2pLx9aB3cD4"
    found = SecretScanner().scan(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [
        ("github_token", token),
        ("generic_secret", "Zr8vQ2pLx9aB3cD4"),
    ]
    assert judged == ["Zr8vQ2pLx9aB3cD4"]


@pytest.mark.parametrize("engine", ENGINES)
def test_jwt_headers_are_judged_alike_when_remembered_and_when_too_long_to_remember(engine: str) -> None:
    scanner = SecretScanner(kinds=["jwt"], engine=engine)  # type: ignore[arg-type]
    long_valid = jwt({"alg": "HS256", "kid": "FAKE" * 80})  # a header past secrets._MAX_REMEMBERED_HEADER
    long_invalid = jwt({"typ": "JWT", "kid": "FAKE" * 80})
    assert len(long_valid.split(".")[0]) > secrets._MAX_REMEMBERED_HEADER
    for _ in range(2):  # the second time, short headers' verdicts come from memory
        assert [f.kind for f in scanner.scan(f"t {JWT} x")] == ["jwt"]
        assert scanner.scan(f"t {jwt({'typ': 'JWT'})} x") == []
        assert [f.kind for f in scanner.scan(f"t {long_valid} x")] == ["jwt"]
        assert scanner.scan(f"t {long_invalid} x") == []
