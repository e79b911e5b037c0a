"""Optional Presidio backend for PII: its pattern recognizers behind the same `scan(text)` shape.

No spaCy model can be fetched here, so the analyzer runs with Presidio's no-op NLP engine: pattern
recognizers only, no NER and no in-text context words. `presidio-analyzer` is optional; building the
scanner without it raises `ImportError` naming the extra to install.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .findings import Finding, merge_findings
from .pii import PII_KINDS

__all__ = ["PRESIDIO_ENTITIES", "PresidioPiiScanner", "load_presidio_scanner"]

# Our kind -> Presidio entity name.
PRESIDIO_ENTITIES = {
    "email": "EMAIL_ADDRESS",
    "phone": "PHONE_NUMBER",
    "credit_card": "CREDIT_CARD",
    "iban": "IBAN_CODE",
    "us_ssn": "US_SSN",
    "ip_address": "IP_ADDRESS",
}
_KINDS_BY_ENTITY = {entity: kind for kind, entity in PRESIDIO_ENTITIES.items()}


class PresidioPiiScanner:
    """`PiiScanner`'s interface over Presidio's pattern recognizers (no NLP model).

    `score_threshold` drops weak pattern hits: 0.4 keeps phone numbers (Presidio scores them 0.4
    without context words, which the no-op engine cannot supply) and drops bare 9-digit "SSNs".
    """

    def __init__(
        self,
        kinds: Iterable[str] | None = None,
        phone_regions: Sequence[str] = ("US", "GB", "DE", "FR"),
        score_threshold: float = 0.4,
    ) -> None:
        try:
            import tldextract  # type: ignore[import-not-found, unused-ignore]
            from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
            from presidio_analyzer.nlp_engine import NoOpNlpEngine
            from presidio_analyzer.predefined_recognizers import (
                CreditCardRecognizer,
                EmailRecognizer,
                IbanRecognizer,
                IpRecognizer,
                PhoneRecognizer,
                UsSsnRecognizer,
            )
        except ImportError as error:
            raise ImportError(
                "PresidioPiiScanner needs presidio-analyzer>=2.2.366 (with NoOpNlpEngine): "
                "pip install 'mcp-interceptors[presidio]'"
            ) from error
        wanted = list(PII_KINDS if kinds is None else kinds)
        unknown = set(wanted) - set(PII_KINDS)
        if unknown:
            raise ValueError(f"unknown PII kinds {sorted(unknown)}; choose from {list(PII_KINDS)}")
        # Presidio's email check calls tldextract's default extractor, which downloads the public suffix
        # list on first use; validate against the snapshot bundled with tldextract instead (no network).
        offline_suffixes = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

        class OfflineEmailRecognizer(EmailRecognizer):  # type: ignore[misc, unused-ignore]
            def validate_result(self, pattern_text: str) -> bool:
                return bool(offline_suffixes(pattern_text).fqdn)

        registry = RecognizerRegistry(supported_languages=["en"])
        for recognizer in (
            OfflineEmailRecognizer(),
            PhoneRecognizer(supported_regions=list(phone_regions)),
            CreditCardRecognizer(),
            IbanRecognizer(),
            UsSsnRecognizer(),
            IpRecognizer(),
        ):
            registry.add_recognizer(recognizer)
        nlp_engine = NoOpNlpEngine(models=[{"lang_code": "en", "model_name": "none"}])
        self._analyzer: Any = AnalyzerEngine(registry=registry, nlp_engine=nlp_engine, supported_languages=["en"])
        self._entities = [PRESIDIO_ENTITIES[kind] for kind in wanted]
        self._threshold = score_threshold

    def scan(self, text: str) -> list[Finding]:
        """Return Presidio's findings in `text` as merged `Finding`s with our kind names."""
        results = self._analyzer.analyze(
            text=text, language="en", entities=self._entities, score_threshold=self._threshold
        )
        return merge_findings(Finding(_KINDS_BY_ENTITY[r.entity_type], r.start, r.end) for r in results)


def load_presidio_scanner(**options: Any) -> PresidioPiiScanner:
    """Build a `PresidioPiiScanner`, or raise `ImportError` saying how to install Presidio."""
    return PresidioPiiScanner(**options)
