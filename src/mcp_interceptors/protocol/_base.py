"""The pydantic base every wire model shares: camelCase aliases, snake_case accepted, unknown keys ignored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
_new = object.__new__
# Models are frozen: `trusted` fills them the way pydantic itself does, through BaseModel's slots
# (their descriptors set a slot several times faster than `object.__setattr__` looks it up:
# `bench/chain_overhead.py`).
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


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

    #: Every field in declaration order, at its default (None for required ones), for `trusted`.
    _defaults: ClassVar[dict[str, Any]] = {}
    #: Whether the model keeps unknown keys (`extra="allow"`): a validated one then has `model_extra == {}`.
    _keeps_extra: ClassVar[bool] = False

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._defaults = {name: None if info.is_required() else info.default for name, info in cls.model_fields.items()}
        cls._keeps_extra = cls.model_config.get("extra") == "allow"

    @classmethod
    def trusted(cls, values: dict[str, Any]) -> Self:
        """A model from field values the caller already knows are valid (snake_case names, every
        required field given; fields with plain defaults only): no validation.

        For values that are ours (a host's stamps on a handler's bool, the gateway's own context); equal
        to the validated model, and several times faster to build (`model_construct` is slower than validating;
        `bench/gateway_overhead.py`).
        """
        return cls.filled(cls.template(values), set(values))

    @classmethod
    def template(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """Every field, in declaration order (as validation gives), at `values` or its default: a copy of
        it with the rest of the fields set is what `filled` takes."""
        return {**cls._defaults, **values}

    @classmethod
    def filled(cls, fields: dict[str, Any], given: set[str]) -> Self:
        """`trusted` from a complete `template` copy (owned by the model from now on) and the names given."""
        return filled_model(cls, fields, given)

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON object, without fields at their default."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude_none=True)


M = TypeVar("M", bound=WireModel)


def filled_model(cls: type[M], fields: dict[str, Any], given: set[str]) -> M:
    """`cls.filled(fields, given)` without the classmethod's binding: a host builds one per invocation."""
    model = _new(cls)
    _set_dict(model, fields)
    _set_fields_set(model, given)
    _set_extra(model, {} if cls._keeps_extra else None)
    _set_private(model, None)
    return model
