"""The PII phone check's own validity test (`_phone._is_valid_number`, compiled from phonenumbers' metadata)
answers exactly as `phonenumbers.is_valid_number` does.

Every region's example number of every type, each with digits changed and added (seeded), and random
national numbers for every country calling code: valid and invalid numbers of every length, including the
country codes shared by several regions (+1, +7, +44, +47, +61, +262, +590, +599), where the region is
picked by leading digits or by validity.
"""

from __future__ import annotations

import random

import phonenumbers
import pytest

from mcp_interceptors.guards._detectors import _phone


def _phonenumbers_says(country_code: int, national: str) -> bool:
    number = phonenumbers.PhoneNumber(country_code=country_code, national_number=int(national))
    return bool(phonenumbers.is_valid_number(number))


def _variants(national: str, rnd: random.Random) -> list[str]:
    found = [national]
    for _ in range(12):
        digits = list(national)
        digits[rnd.randrange(len(digits))] = rnd.choice("0123456789")
        if rnd.random() < 0.3:
            digits.insert(rnd.randrange(len(digits) + 1), rnd.choice("0123456789"))
        if rnd.random() < 0.2 and len(digits) > 1:
            del digits[rnd.randrange(len(digits))]
        found.append("".join(digits).lstrip("0") or "1")
    return found


def test_example_numbers_and_their_neighbours_get_phonenumbers_verdict() -> None:
    rnd = random.Random(7)
    checked = valid = 0
    for region in sorted(phonenumbers.SUPPORTED_REGIONS):
        for number_type in range(12):
            example = phonenumbers.example_number_for_type(region, number_type)
            if example is None:
                continue
            for national in _variants(str(example.national_number), rnd):
                expected = _phonenumbers_says(example.country_code, national)
                assert _phone._is_valid_number(example.country_code, national) == expected, (region, national)
                checked += 1
                valid += expected
    assert checked > 10_000 and 0.2 < valid / checked < 0.8  # both verdicts well represented


@pytest.mark.parametrize("country_code", sorted(phonenumbers.COUNTRY_CODE_TO_REGION_CODE))
def test_random_national_numbers_get_phonenumbers_verdict(country_code: int) -> None:
    rnd = random.Random(country_code)
    for _ in range(60):
        national = str(rnd.randint(1, 9)) + "".join(rnd.choice("0123456789") for _ in range(rnd.randint(3, 13)))
        assert _phone._is_valid_number(country_code, national) == _phonenumbers_says(country_code, national), national


def _parse_says(number: str) -> bool:
    try:
        return bool(phonenumbers.is_valid_number(phonenumbers.parse(number, None)))
    except phonenumbers.NumberParseException:
        return False


def test_plain_punctuation_parses_as_the_digits_alone() -> None:
    """The judge gives `parse` "+" and the digits of a "+" number written with the candidate patterns'
    punctuation (spaces, dots, slashes, dashes, parentheses): parse must read both alike."""
    rnd = random.Random(11)
    for _ in range(3000):
        digits = "".join(rnd.choice("0123456789") for _ in range(rnd.randint(7, 15)))
        cuts = sorted(rnd.sample(range(1, len(digits)), rnd.randint(0, 4)))
        pieces = [digits[a:b] for a, b in zip([0, *cuts], [*cuts, len(digits)], strict=True)]
        written = "+" + "".join(piece + rnd.choice([" ", ".", "/", "-", " (", ") ", ""]) for piece in pieces)
        assert _parse_says(written) == _parse_says("+" + digits), written


@pytest.mark.parametrize("country_code", sorted(phonenumbers.COUNTRY_CODE_TO_REGION_CODE))
def test_a_national_number_after_the_trunk_zero_gets_parses_verdict(country_code: int) -> None:
    """In "+44 (0) 20 ..." the trunk prefix is stripped as `parse` strips it, without calling it."""
    rnd = random.Random(country_code)
    nationals = ["0" + "".join(rnd.choice("0123456789") for _ in range(rnd.randint(1, 14))) for _ in range(40)]
    for region in phonenumbers.COUNTRY_CODE_TO_REGION_CODE[country_code]:
        for number_type in range(12):
            example = phonenumbers.example_number_for_type(region, number_type)
            if example is not None and example.country_code == country_code:
                nationals.append("0" + str(example.national_number))
    trunk = _phone._TrunkPrefix(country_code)
    for national in nationals:
        verdict = trunk.verdict(national)
        if verdict is not None:
            assert verdict == _parse_says(f"+{country_code}{national}"), national


def test_a_number_with_its_trunk_zero_in_brackets_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    parse = phonenumbers.parse

    def counting(number: str, region: str | None = None) -> phonenumbers.PhoneNumber:
        parsed.append(number)
        return parse(number, region)

    monkeypatch.setattr(phonenumbers, "parse", counting)
    judge = _phone.PhoneJudge(("US",))
    for text in ("+44 (0) 20 7946 0958", "+33 (0)1 99 00 92 36", "+49 (0)30 1234567"):
        assert judge.judge(text, 0, len(text), in_context=False) == (0, len(text))
    assert parsed == []


def test_forgetting_the_verdicts_judges_numbers_anew() -> None:
    from mcp_interceptors.guards._detectors import PiiScanner

    scanner = PiiScanner(kinds=["phone"])
    text = "call +1 202-555-0143 today"
    found = scanner.scan(text)
    assert found and scanner._phone_judge._cache  # remembered
    scanner.forget_verdicts()
    assert not scanner._phone_judge._cache
    assert scanner.scan(text) == found


def test_a_number_after_a_phone_keyword_is_judged_once() -> None:
    """Both phone patterns find "+44 20 7946 0692" after "phone:"; the keyword matters only for a bare digit
    run, so the second pattern reuses the first one's verdict instead of judging the number again."""
    from mcp_interceptors.guards._detectors import PiiScanner

    scanner = PiiScanner(kinds=["phone"])
    judge = scanner._phone_judge
    decided: list[tuple[str, bool]] = []
    decide = judge._decide

    def counting(candidate: str, in_context: bool) -> bool:
        decided.append((candidate, in_context))
        return decide(candidate, in_context)

    judge._decide = counting  # type: ignore[method-assign]
    text = "phone: +44 20 7946 0692, fax 2025550143"
    found = scanner.scan(text)
    assert [text[f.start : f.end] for f in found] == ["+44 20 7946 0692", "2025550143"]
    assert decided.count(("+44 20 7946 0692", False)) + decided.count(("+44 20 7946 0692", True)) == 1
    # A bare run keeps a verdict per context: without a keyword it is no number, after one it is.
    assert PiiScanner(kinds=["phone"]).scan("id 2025550143") == []


def test_a_number_inside_a_finding_already_made_is_not_judged() -> None:
    """The IBAN's digit groups and the card's are phone candidates too; inside a finding of a kind that ranks
    before phone, no verdict can change the result, so the judge is not asked."""
    from mcp_interceptors.guards._detectors import PiiScanner

    scanner = PiiScanner()
    judge = scanner._phone_judge
    decided: list[str] = []
    decide = judge._decide

    def counting(candidate: str, in_context: bool) -> bool:
        decided.append(candidate)
        return decide(candidate, in_context)

    judge._decide = counting  # type: ignore[method-assign]
    text = "iban DE89 3704 0044 0532 0130 00, card 4111 1111 1111 1111, call +44 20 7946 0692"
    found = scanner.scan(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [
        ("iban", "DE89 3704 0044 0532 0130 00"),
        ("credit_card", "4111 1111 1111 1111"),
        ("phone", "+44 20 7946 0692"),
    ]
    assert decided == ["+44 20 7946 0692"]
