"""Format-valid, obviously fake secrets and PII for the scan corpus, plus clean look-alikes.

Every token carries a FAKE/EXAMPLE marker where its format allows one, or comes from a range reserved
for fiction or documentation (555-01xx, Ofcom drama numbers, 192.0.2.0/24, 2001:db8::/32, example.com,
Stripe's published test card numbers). Nothing here is a real credential.
"""

from __future__ import annotations

import base64
import json
import random
import string

import phonenumbers

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
BASE32 = string.ascii_uppercase + "234567"

# Stripe's published test card numbers (https://docs.stripe.com/testing), one per network.
TEST_CARDS = (
    "4242424242424242",
    "4000056655665556",
    "5555555555554444",
    "2223003122003222",
    "5200828282828210",
    "378282246310005",
    "371449635398431",
    "6011111111111117",
    "6011000990139424",
    "3056930009020004",
    "36227206271667",
    "3566002020360505",
    "6200000000000005",
)
EMAIL_DOMAINS = ("example.com", "example.org", "example.net", "mail.example.com", "acme.test", "corp.example")
FIRST = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "olivia")
LAST = ("smith", "jones", "müller", "garcia", "dupont", "nguyen", "kowalski", "rossi", "tanaka", "okafor")


def luhn_complete(prefix: str, length: int, rng: random.Random) -> str:
    """A Luhn-valid number of `length` digits starting with `prefix`."""
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for check in string.digits:
        candidate = body + check
        total = 0
        for i, c in enumerate(reversed(candidate)):
            v = int(c)
            total += (v * 2 - 9 if v > 4 else v * 2) if i % 2 else v
        if total % 10 == 0:
            return candidate
    raise AssertionError("unreachable")


def iban_with_checksum(country: str, bban: str) -> str:
    rearranged = bban + country + "00"
    number = int("".join(str(int(c, 36)) for c in rearranged))
    return f"{country}{98 - number % 97:02d}{bban}"


def group4(value: str) -> str:
    return " ".join(value[i : i + 4] for i in range(0, len(value), 4))


class Fakes:
    """Makes one fake value per call; `rng` is the only source of randomness, so output is reproducible."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def _chars(self, alphabet: str, n: int) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    # --- secrets -------------------------------------------------------------------------------------
    def aws_access_key(self) -> str:
        return self.rng.choice(("AKIA", "ASIA")) + "FAKE" + self._chars(BASE32, 12)

    def aws_secret_key(self) -> str:
        return "FAKE" + self._chars(B64, 36)

    def github_token(self) -> str:
        return self.rng.choice(("ghp_", "gho_", "ghu_", "ghs_", "ghr_")) + "FAKE" + self._chars(ALNUM, 32)

    def github_fine_grained_token(self) -> str:
        return "github_pat_11FAKE" + self._chars(ALNUM, 16) + "_" + self._chars(ALNUM, 59)

    def stripe_key(self) -> str:
        return self.rng.choice(("sk_live_", "rk_live_")) + "FAKE" + self._chars(ALNUM, self.rng.randint(20, 95))

    def slack_token(self) -> str:
        kind = self.rng.choice("bpas")
        if kind == "p":
            return f"xoxp-{self._chars(string.digits, 10)}-{self._chars(string.digits, 10)}-" + (
                f"{self._chars(string.digits, 12)}-FAKE{self._chars('0123456789abcdef', 28)}"
            )
        return (
            f"xox{kind}-{self._chars(string.digits, 12)}-{self._chars(string.digits, 13)}-FAKE{self._chars(ALNUM, 20)}"
        )

    def slack_webhook(self) -> str:
        return (
            f"https://hooks.slack.com/services/T0FAKE{self._chars(BASE32, 4)}/B0FAKE{self._chars(BASE32, 4)}/"
            + self._chars(ALNUM, 24)
        )

    def google_api_key(self) -> str:
        return "AIza" + "FAKE" + self._chars(B64URL, 31)

    def private_key(self, *, escaped: bool = False) -> str:
        label = self.rng.choice(("RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY"))
        lines = ["MIIEFAKEKEY" + self._chars(B64, 53)] + [self._chars(B64, 64) for _ in range(self.rng.randint(2, 6))]
        newline = "\\n" if escaped else "\n"
        return newline.join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])

    def jwt(self) -> str:
        def part(obj: object) -> str:
            return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()

        header = part({"alg": self.rng.choice(("HS256", "RS256", "ES256")), "typ": "JWT"})
        claims = part(
            {"sub": f"fake-user-{self.rng.randint(1, 99999)}", "iss": "https://auth.example.com", "iat": 1700000000}
        )
        return f"{header}.{claims}.{self._chars(B64URL, 43)}"

    def generic_value(self) -> str:
        """A random password / API key: mixed classes, no placeholder words."""
        style = self.rng.choice(("password", "hex", "alnum"))
        if style == "hex":
            return self._chars("0123456789abcdef", 32)
        if style == "alnum":
            return self._chars(ALNUM, self.rng.randint(20, 40))
        core = self._chars(ALNUM, self.rng.randint(10, 18))
        return core + self.rng.choice("!#%^*-_+=") + self._chars(string.digits, 2)

    def bearer_token(self) -> str:
        return self._chars(ALNUM, self.rng.randint(24, 48))

    def url_password(self) -> str:
        return self._chars(ALNUM, self.rng.randint(10, 20))

    # --- PII -----------------------------------------------------------------------------------------
    def email(self) -> str:
        first, last = self.rng.choice(FIRST), self.rng.choice(LAST).replace("ü", "u")
        local = self.rng.choice(
            (
                f"{first}.{last}",
                f"{first}{self.rng.randint(1, 99)}",
                f"{first[0]}{last}",
                f"{first}+news",
                f"{first.capitalize()}.{last.capitalize()}",
                f"{first}_{last}-{self.rng.randint(1, 9)}",
            )
        )
        domain = self.rng.choice(EMAIL_DOMAINS)
        return f"{local}@{domain.upper() if self.rng.random() < 0.1 else domain}"

    def phone(self) -> str:
        rng = self.rng
        tail = f"{rng.randint(0, 99):02d}"
        area = rng.choice(("201", "212", "312", "415", "646", "617", "713"))
        choices = (
            (f"({area}) 555-01{tail}", "US"),
            (f"{area}-555-01{tail}", "US"),
            (f"{area}.555.01{tail}", "US"),
            (f"+1 {area} 555 01{tail}", None),
            (f"+1-{area}-555-01{tail}", None),
            (f"020 7946 0{rng.randint(0, 999):03d}", "GB"),
            (f"+44 20 7946 0{rng.randint(0, 999):03d}", None),
            (f"0161 496 0{rng.randint(0, 999):03d}", "GB"),
            (f"030 12345{tail}", "DE"),
            (f"+49 89 12345{tail}", None),
            (f"01 99 00 {tail} {rng.randint(0, 99):02d}", "FR"),
            (f"+33 1 99 00 {tail} {rng.randint(0, 99):02d}", None),
            # Formats the scanner was not first written for, kept to measure what it misses:
            (f"{area} 555 01{tail}", "US"),
            (f"+1.{area}.555.01{tail}", None),
            (f"(020) 7946 0{rng.randint(0, 999):03d}", "GB"),
            (f"+44 (0) 20 7946 0{rng.randint(0, 999):03d}", None),
            (f"+33 (0)1 99 00 {tail} {rng.randint(0, 99):02d}", None),
            (f"0049 30 12345{tail}", "DE"),
            (f"+1{area}55501{tail}", None),
        )
        value, region = rng.choice(choices)
        assert phonenumbers.is_valid_number(phonenumbers.parse(value, region)), value
        return value

    def credit_card(self) -> str:
        if self.rng.random() < 0.5:
            digits = self.rng.choice(TEST_CARDS)
        else:
            prefix, length = self.rng.choice((("400000", 16), ("555555", 16), ("378282", 15), ("601100", 16)))
            digits = luhn_complete(prefix, length, self.rng)
        style = self.rng.choice(("plain", "space", "dash"))
        if len(digits) == 15 and style != "plain":  # Amex prints 4-6-5
            sep = " " if style == "space" else "-"
            return sep.join((digits[:4], digits[4:10], digits[10:]))
        if style == "plain" or len(digits) != 16:
            return digits
        return group4(digits) if style == "space" else "-".join(digits[i : i + 4] for i in range(0, 16, 4))

    def iban(self) -> str:
        country, bban = self.rng.choice(
            (
                ("DE", self._chars(string.digits, 18)),
                ("GB", "NWBK" + self._chars(string.digits, 14)),
                ("FR", self._chars(string.digits, 10) + self._chars(string.ascii_uppercase, 11) + "00"),
                ("NL", "ABNA" + self._chars(string.digits, 10)),
                ("ES", self._chars(string.digits, 20)),
            )
        )
        value = iban_with_checksum(country, bban)
        return group4(value) if self.rng.random() < 0.6 else value

    def us_ssn(self) -> str:
        area = self.rng.choice([a for a in range(1, 900) if a != 666])
        value = f"{area:03d}-{self.rng.randint(1, 99):02d}-{self.rng.randint(1, 9999):04d}"
        return value if self.rng.random() < 0.8 else value.replace("-", " ")

    def ip_address(self) -> str:
        rng = self.rng
        return rng.choice(
            (
                f"192.0.2.{rng.randint(1, 254)}",
                f"198.51.100.{rng.randint(1, 254)}",
                f"203.0.113.{rng.randint(1, 254)}",
                f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
                f"2001:db8::{rng.randint(1, 0xFFFF):x}",
                f"2001:db8:{rng.randint(1, 0xFFFF):x}:{rng.randint(1, 0xFFFF):x}::{rng.randint(1, 0xFF):x}",
                f"fe80::{rng.randint(1, 0xFFFF):x}:{rng.randint(1, 0xFFFF):x}",
                f"2001:db8:0:0:{rng.randint(1, 0xFFFF):x}:0:0:{rng.randint(1, 0xFFFF):x}",
                f"::ffff:192.0.2.{rng.randint(1, 254)}",
            )
        )


def lookalikes(rng: random.Random) -> list[str]:
    """Clean strings that resemble a secret or PII but must not be reported (near misses)."""
    fk = Fakes(rng)
    bad_luhn = luhn_complete("400000", 16, rng)
    bad_luhn = bad_luhn[:-1] + str((int(bad_luhn[-1]) + 1) % 10)
    good_iban = iban_with_checksum("DE", fk._chars(string.digits, 18))
    bad_iban = good_iban[:2] + f"{(int(good_iban[2:4]) + 1) % 97 + 2:02d}" + good_iban[4:]
    if bad_iban == good_iban:  # pragma: no cover - the +1 always changes the check digits
        bad_iban = good_iban[:4] + "0" + good_iban[5:]
    return [
        "AKIAEXAMPLE",  # too short
        "AKIA" + fk._chars(BASE32, 15),  # one char short
        "the ghp_ prefix marks a classic token",
        "ghp_" + fk._chars(ALNUM, 35),  # wrong length
        "github_pat_" + fk._chars(ALNUM, 40),  # truncated fine-grained token
        "sk_test_" + fk._chars(ALNUM, 24),  # Stripe test mode, not live
        "AIza" + fk._chars(B64URL, 20),  # too short
        f"commit {fk._chars('0123456789abcdef', 40)}",
        f"digest: sha256:{fk._chars('0123456789abcdef', 64)}",
        "request_id=" + "-".join(fk._chars("0123456789abcdef", n) for n in (8, 4, 4, 4, 12)),  # a UUID
        f'<img src="data:image/png;base64,iVBORw0KGgo{fk._chars(B64, 600)}==">',
        "password=changeme",
        'password: "********"',
        "api_key: ${API_KEY}",
        'token = os.environ["GITHUB_TOKEN"]',
        '"password": "<your-password-here>"',
        "secret: {{ vault_secret }}",
        "token_count = 12345678",
        "max_tokens: 4096",
        "password_hash = " + fk._chars("0123456789abcdef", 64),
        "Password: Incorrect",
        "eyJhbGciOi.notajwt.x",
        f"card {bad_luhn}",  # Luhn fails
        f"order #{rng.randint(10**9, 10**10 - 1)}-{rng.randint(100, 999)}",
        f"ts={rng.randint(1_600_000_000_000, 1_800_000_000_000)}",
        "2024-01-15 10:30:45",
        "15/01/2024",
        "v1.2.3.4",
        "version 10.0.19041.1",
        "OID 1.3.6.1.4.1.311.21.7",
        "Python 3.11.7",
        "pi is 3.14159265",
        "price 1,234.56 EUR",
        "123-456-7890",  # invalid NANP area code
        "555-0100",
        "000-000-0000",
        f"IBAN {bad_iban}",  # wrong checksum
        "SSN 000-12-3456",
        "SSN 666-12-3456",
        "SSN 912-34-5678",
        "user@localhost",
        "icon@2x.png",
        "git@github.com:acme/widgets.git",
        "lodash@4.17.21",
        "@mention in chat",
        "256.1.1.1",
        "1.2.3",
        "MAC 00:1A:2B:3C:4D:5E",
        "std::vector<int> v;",
        "a[::2]",
        "time 10:30:45",
    ]
