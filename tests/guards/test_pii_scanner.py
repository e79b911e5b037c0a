"""PiiScanner: each kind's true positives and the near misses that must pass, on both regex engines.

Numbers come from ranges reserved for fiction or documentation (555-01xx, Ofcom drama numbers,
192.0.2.0/24, 2001:db8::/32), the ISO/ECBS example IBANs and Stripe's published test cards.
"""

from __future__ import annotations

import ipaddress
import itertools
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_interceptors.guards._detectors import PII_KINDS, PiiScanner, pii
from mcp_interceptors.guards._detectors._checksums import IBAN_LENGTHS, is_iban
from mcp_interceptors.guards._detectors._engine import re2

ENGINES = ["re", pytest.param("re2", marks=pytest.mark.skipif(re2 is None, reason="google-re2 not installed"))]

# (text, kind, the exact text the finding must cover)
POSITIVES = [
    ("mail bob.smith@example.com.", "email", "bob.smith@example.com"),
    ("<first+tag@mail.example.co.uk>", "email", "first+tag@mail.example.co.uk"),
    ("José <jose.muller@acme.test>", "email", "jose.muller@acme.test"),
    ("call (415) 555-0123 now", "phone", "(415) 555-0123"),
    ("415-555-0123", "phone", "415-555-0123"),
    ("415.555.0123", "phone", "415.555.0123"),
    ("1-800-555-0199", "phone", "1-800-555-0199"),
    ("+1 415 555 0123", "phone", "+1 415 555 0123"),
    ("+1 (415) 555-0123", "phone", "+1 (415) 555-0123"),
    ("+44 20 7946 0958", "phone", "+44 20 7946 0958"),
    ("0044 20 7946 0958", "phone", "0044 20 7946 0958"),
    ("020 7946 0958", "phone", "020 7946 0958"),
    ("0161 496 0123", "phone", "0161 496 0123"),
    ("030 1234567", "phone", "030 1234567"),
    ("030/1234567", "phone", "030/1234567"),
    ("+49 (0)30 1234567", "phone", "+49 (0)30 1234567"),
    ("01 99 00 12 34", "phone", "01 99 00 12 34"),
    ("+33 1 99 00 12 34", "phone", "+33 1 99 00 12 34"),
    ('"phone": "4155550123"', "phone", "4155550123"),  # bare digits need a phone keyword
    ("Tel: +442079460958", "phone", "+442079460958"),
    ("415-555-0123 2 items", "phone", "415-555-0123"),  # trailing group trimmed
    ("card 4242 4242 4242 4242 exp", "credit_card", "4242 4242 4242 4242"),
    ("4242-4242-4242-4242", "credit_card", "4242-4242-4242-4242"),
    ("pan=4242424242424242;", "credit_card", "4242424242424242"),
    ("amex 378282246310005", "credit_card", "378282246310005"),
    ("amex 3782 822463 10005", "credit_card", "3782 822463 10005"),
    ("mc 5555 5555 5555 4444", "credit_card", "5555 5555 5555 4444"),
    ("IBAN DE89 3704 0044 0532 0130 00", "iban", "DE89 3704 0044 0532 0130 00"),
    ("GB82WEST12345698765432", "iban", "GB82WEST12345698765432"),
    ("pay DE89 3704 0044 0532 0130 00 EUR", "iban", "DE89 3704 0044 0532 0130 00"),
    ("FR14 2004 1010 0505 0001 3M02 606", "iban", "FR14 2004 1010 0505 0001 3M02 606"),
    ("ssn 536-22-1234", "us_ssn", "536-22-1234"),
    ("536 22 1234", "us_ssn", "536 22 1234"),
    ("SSN: 536221234", "us_ssn", "536221234"),  # bare digits need an SSN keyword
    ("from 203.0.113.7:8443", "ip_address", "203.0.113.7"),
    ("host=10.0.0.1", "ip_address", "10.0.0.1"),
    ("8.8.8.8", "ip_address", "8.8.8.8"),
    ("2001:db8::1", "ip_address", "2001:db8::1"),
    ("[2001:db8:85a3::8a2e:370:7334]:443", "ip_address", "2001:db8:85a3::8a2e:370:7334"),
    ("fe80::1ff:fe23:4567:890a", "ip_address", "fe80::1ff:fe23:4567:890a"),
    ("::ffff:192.0.2.128", "ip_address", "::ffff:192.0.2.128"),
    ("2001:0db8:0000:0000:0000:ff00:0042:8329", "ip_address", "2001:0db8:0000:0000:0000:ff00:0042:8329"),
]

NEGATIVES = [
    "user@localhost",
    "icon@2x.png",
    "git@github.com:acme/widgets.git",
    "lodash@4.17.21",
    "@mention in chat",
    "foo@bar",
    "555-0100",  # too short for any region
    "123-456-7890",  # NANP area codes never start with 1
    "000-000-0000",
    "4155550123",  # bare digits without a phone keyword
    "id 20240001234",
    "2024-01-15 10:30:45",
    "15/01/2024",
    "01.02.2024",
    "pi is 3.14159265",
    "10.0.12.34.56",
    "time 10:30:45",
    "ORD-415-555-0123",  # glued to an id
    "1 2 3 4 5 6 7 8 9",
    "4242 4242 4242 4241",  # Luhn fails
    "1234567890123452",  # Luhn-valid, no issuer starts with 1
    "order #4235304346-370",  # not a card layout
    "4242424242424242424242424",  # 25 digits
    "0.4242424242424242",  # a float
    "ts=1705312345678",
    "IBAN DE88 3704 0044 0532 0130 00",  # wrong checksum
    "DE89 3704 0044 0532 0130",  # too short for DE
    "XX89 3704 0044 0532 0130 00",  # no such country
    "DE89370400440532013000X",  # glued to a letter
    "SSN 000-12-3456",
    "SSN 666-12-3456",
    "SSN 912-34-5678",
    "536-00-1234",
    "536-22-0000",
    "123-45-6789",  # the SSA's advertising sample
    "078-05-1120",  # Woolworth's wallet card
    "536-22 1234",  # mixed separators
    "536221234",  # bare digits without an SSN keyword
    "v1.2.3.4",
    "version 1.2.3.4",
    "version: 10.0.19041.1",
    "requests==2.31.0.1",
    "1.2.3.4.5",
    "OID 1.3.6.1.4.1.311",
    "256.1.1.1",
    "01.02.03.04",  # leading zeros
    "1.2.3",
    "MAC 00:1A:2B:3C:4D:5E",
    "std::vector<int> v;",
    "a[::2]",
    "css a::before",
    "::",
    # Seen in real code (site-packages):
    "rng = np.random.default_rng(6581432544381372042)",  # 19 digits, Luhn and a prefix by chance
    "[1, 1, 4, 108, 27648, 86400000, 4031078400000]",
    "w[1::2] = 1",
    're.sub(r"(\\b|:+)", r"[\\1]", "a::bc")',
    "magn. mom. ratio   1.520 993 1551 e-3",  # a table of decimals
    "42.576 384 74",
    "('2020-06-01T04:05:06.111111-0400', self",
    "Processing Systems 35 (2022): 26966-26979.",  # a page range, not a 5-5 US number
    "223 3000234 <message-id>",  # an NNTP status line
    "Decimal('+35236450.6')",
    "commit 3f2a9c1e0b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
    "request_id=123e4567-e89b-12d3-a456-426614174000",
]


@pytest.fixture(params=ENGINES)
def scanner(request: pytest.FixtureRequest) -> PiiScanner:
    return PiiScanner(engine=request.param)


@pytest.mark.parametrize(("text", "kind", "covered"), POSITIVES)
def test_finds_each_kind(scanner: PiiScanner, text: str, kind: str, covered: str) -> None:
    assert [(f.kind, text[f.start : f.end]) for f in scanner.scan(text)] == [(kind, covered)]


@pytest.mark.parametrize("text", NEGATIVES)
def test_near_misses_pass(scanner: PiiScanner, text: str) -> None:
    assert scanner.scan(text) == []


def test_every_kind_has_a_positive_case() -> None:
    assert {kind for _, kind, _ in POSITIVES} == set(PII_KINDS)


def test_phone_regions_limit_national_formats_only() -> None:
    scanner = PiiScanner(kinds=["phone"], phone_regions=["US"])
    assert scanner.scan("020 7946 0958") == []
    assert [f.kind for f in scanner.scan("+44 20 7946 0958")] == ["phone"]


def test_unknown_region_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"unknown phone regions \['UK'\]"):
        PiiScanner(phone_regions=["UK"])


def test_private_ips_can_be_skipped() -> None:
    scanner = PiiScanner(kinds=["ip_address"], include_private_ips=False)
    text = "10.0.0.1 127.0.0.1 192.0.2.1 fe80::1 2001:db8::1 8.8.8.8 2606:4700:4700::1111"
    assert [text[f.start : f.end] for f in scanner.scan(text)] == ["8.8.8.8", "2606:4700:4700::1111"]


def test_unknown_kind_is_rejected_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown PII kinds \['ssn'\]; choose from \['email'"):
        PiiScanner(kinds=["ssn"])


def test_offsets_are_chars_after_non_ascii_text(scanner: PiiScanner) -> None:
    text = "Grüße aus Zürich 😀 東京: jose@example.com, +44 20 7946 0958, DE89 3704 0044 0532 0130 00"
    got = [(f.kind, text[f.start : f.end]) for f in scanner.scan(text)]
    assert got == [
        ("email", "jose@example.com"),
        ("phone", "+44 20 7946 0958"),
        ("iban", "DE89 3704 0044 0532 0130 00"),
    ]


def fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if c.isdigit() else c for c in text)


def arabic_indic(text: str) -> str:
    return "".join(chr(0x0660 + int(c)) if c.isdigit() else c for c in text)


@pytest.mark.parametrize(
    ("before", "value", "after", "kind"),
    [
        ("card ", fullwidth("4111 1111 1111 1111"), " on file", "credit_card"),
        ("call ", fullwidth("+1 415 555 2671"), " today", "phone"),
        ("ssn ", arabic_indic("536-22-1234"), " here", "us_ssn"),
        ("ip ", fullwidth("8.8.4.4"), " is", "ip_address"),
    ],
)
def test_digits_of_other_scripts_are_read_as_digits_and_reported_where_they_stand(
    scanner: PiiScanner, before: str, value: str, after: str, kind: str
) -> None:
    """A reader (and a model) takes fullwidth or Arabic-Indic digits for digits: they passed every check."""
    text = before + value + after
    [finding] = scanner.scan(text)
    assert (finding.kind, text[finding.start : finding.end]) == (kind, value)


def test_findings_are_sorted_and_disjoint(scanner: PiiScanner) -> None:
    text = "\n".join(t for t, _, _ in POSITIVES)
    findings = scanner.scan(text)
    assert all(a.end <= b.start for a, b in itertools.pairwise(findings))
    assert len(findings) == len(POSITIVES)


# The per-candidate checks as first written; the faster ones must agree with them on every candidate.
_REFERENCE_EMAIL_LOCAL = frozenset(string.ascii_letters + string.digits + "._%+-")


def _reference_check_email(text: str, start: int, end: int) -> tuple[int, int] | None:
    local_start = start
    while local_start > 0 and start - local_start < 65 and text[local_start - 1] in _REFERENCE_EMAIL_LOCAL:
        local_start -= 1
    while local_start < start and text[local_start] == ".":
        local_start += 1
    local = text[local_start:start]
    if not local or len(local) > 64 or local.endswith(".") or ".." in local:
        return None
    labels = text[start + 1 : end].split(".")
    if any(not label or label[0] == "-" or label[-1] == "-" for label in labels):
        return None
    if labels[-1].lower() in pii._FILE_SUFFIXES:
        return None
    if end + 1 < len(text) and text[end] == ":" and text[end + 1] not in " \t\r\n":
        return None
    return local_start, end


def _reference_is_iban(compact: str) -> bool:
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact[2:4].isdigit():
        return False
    return int("".join(str(int(char, 36)) for char in compact[4:] + compact[:4])) % 97 == 1


@given(st.text(alphabet="ab.-_%+9@ :é", max_size=40), st.text(alphabet="ab.-9Z", max_size=12), st.data())
def test_email_check_matches_the_reference(before: str, domain: str, data: st.DataObject) -> None:
    text = f"{before}@{domain}{data.draw(st.sampled_from(['', ':', ':x', ': ', '.png', 'x']))}"
    start = len(before)
    end = data.draw(st.integers(start + 1, len(text)))
    assert pii._check_email(text, start, end) == _reference_check_email(text, start, end)


@given(
    st.lists(st.integers(0, 999).map(str) | st.sampled_from(["00", "01", "099", "007", "0"]), min_size=4, max_size=4)
)
def test_dotted_quad_validity_matches_ipaddress(octets: list[str]) -> None:
    candidate = ".".join(octets)
    try:
        ipaddress.IPv4Address(candidate)
    except ValueError:
        valid = False
    else:
        valid = True
    assert bool(pii._VALID_IPV4.fullmatch(candidate)) == valid


@given(
    st.sampled_from(["DE", "GB", "NO", "XX", "de"]),
    st.text(alphabet="0123456789", min_size=2, max_size=2),
    st.text(alphabet=string.ascii_uppercase + string.digits + "abz", min_size=9, max_size=22),
)
def test_iban_check_matches_the_reference(country: str, check: str, account: str) -> None:
    compact = country + check + account
    assert is_iban(compact) == _reference_is_iban(compact)
    valid = "GB82WEST12345698765432"  # the ECBS example
    assert is_iban(valid) and _reference_is_iban(valid)


def _ipaddress_accepts_v6(candidate: str) -> bool:
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    return True


@settings(max_examples=500)
@given(st.from_regex(f"(?:{pii._IPV6})", fullmatch=True) | st.text(alphabet="0123456789abcdefABCDEFg:.", max_size=45))
def test_ipv6_validity_matches_ipaddress(candidate: str) -> None:
    assert bool(pii._VALID_IPV6.fullmatch(candidate)) == _ipaddress_accepts_v6(candidate)


@pytest.mark.parametrize(
    "candidate",
    ["::", "1::", "::1", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1:2:3:4:5:6::1.2.3.4",
     "1:2:3:4:5::1.2.3.4", "::1.2.3.04", "::ffff:255.255.255.255", "1:2:3:4:5:6:1.2.3.4", ":1::2", "1:::2",
     "1:2:3:4:5:6:7:8:9", "12345::1", "fe80::1"],
)  # fmt: skip
def test_ipv6_validity_matches_ipaddress_at_the_edges(candidate: str) -> None:
    assert bool(pii._VALID_IPV6.fullmatch(candidate)) == _ipaddress_accepts_v6(candidate)


def _reference_check_card(text: str, start: int, end: int) -> tuple[int, int] | None:
    run = pii._CARD_RUN.match(text, start, start + pii._CARD_RUN_CAP)
    run_end = run.end() if run else end
    if pii._is_glued(text, start, run_end, pii._WORD_DOT_DASH, pii._WORD) or pii._digit_follows(text, run_end, ". -"):
        return None
    groups = [(m.start(), m.end()) for m in pii._DIGIT_GROUP.finditer(text, start, run_end)]
    for size in range(min(len(groups), 5), 0, -1):
        for i in range(len(groups) - size + 1):
            window = groups[i : i + size]
            if not pii._is_card_layout([e - s for s, e in window]):
                continue
            left, right = window[0][0], window[-1][1]
            digits = "".join(text[s:e] for s, e in window)
            lengths = range(14, 17) if size == 1 else range(13, 20)
            if len(digits) in lengths and pii.is_card_number(digits):
                return left, right
    return None


@given(st.text(alphabet="4111 -.x_", max_size=40), st.data())
def test_card_check_matches_the_reference(text: str, data: st.DataObject) -> None:
    text = data.draw(st.sampled_from(["", "4111 1111 1111 1111", "378282246310005", "x"])) + text
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    assert pii._check_card(text, start, end) == _reference_check_card(text, start, end)
