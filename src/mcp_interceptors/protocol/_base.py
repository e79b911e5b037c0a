"""The pydantic base every wire model shares: camelCase aliases, snake_case accepted, unknown keys ignored."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


class WireModel(BaseModel):
    """Base for wire models: dump with `to_wire()`, which omits defaults and absent optionals (R13)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
        frozen=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON object, without fields at their default."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude_none=True)
