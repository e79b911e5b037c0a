"""CEL conditions over a tool call, for the guards that take them (tool-policy, approval): compiled once at
build time, with every name they use checked, and evaluated over the call's arguments, tool, server,
principal and session.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from mcp_interceptors.host import Invocation

if TYPE_CHECKING:
    import celpy

__all__ = ["CEL_VARIABLES", "CelCondition", "CelFailure", "cel_activation"]


@cache
def _cel() -> celpy.Environment:
    """The CEL environment, built on the first condition: its parser costs ~0.25 s of a gateway's start
    (`bench/footprint.py cold-start`), which guards without CEL conditions never need."""
    import celpy

    return celpy.Environment()


#: The variables a condition can name (see `cel_activation`).
CEL_VARIABLES = frozenset({"args", "tool", "server", "principal", "session"})
#: Names CEL itself declares: type names (`type(args.n) == int`) and the protobuf well-known types' package.
_CEL_BUILTIN_NAMES = frozenset(
    {"bool", "bytes", "double", "duration", "dyn", "int", "list", "map", "null_type", "string", "timestamp"}
    | {"type", "uint", "google"}
)
#: Macros whose first argument declares a variable for the rest of the call (`args.tags.all(t, t != "")`).
_CEL_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


class CelFailure(NamedTuple):
    """Why a condition has no value for a call: an evaluation error (a missing field, say), or a value that
    is not a bool (`not_bool`: the condition itself is wrong)."""

    reason: str
    not_bool: bool = False


class CelCondition:
    """One compiled condition; `where` (`config.arguments[0].cel`) names it in errors."""

    __slots__ = ("_program", "source", "where")

    def __init__(self, source: str, where: str) -> None:
        self.source = source
        self.where = where
        try:
            tree = _cel().compile(source)
            self._program = _cel().program(tree)
        except Exception as exc:  # celpy raises its own parse error types
            detail = " ".join(str(exc).split())
            raise ValueError(f"{where} does not compile: {detail}") from None
        unknown = list(dict.fromkeys(_free_names(tree, CEL_VARIABLES | _CEL_BUILTIN_NAMES)))
        if unknown:
            raise ValueError(
                f"{where} names {', '.join(map(repr, unknown))}, which "
                f"{'is not a variable' if len(unknown) == 1 else 'are not variables'}; "
                f"use {', '.join(sorted(CEL_VARIABLES))}"
            )

    def evaluate(self, activation: Mapping[str, Any]) -> bool | CelFailure:
        """The condition's value for a call, or why it has none."""
        try:
            outcome = self._program.evaluate(dict(activation))
        except Exception as exc:  # a CEL evaluation error (e.g. a missing field)
            return CelFailure(f"could not be evaluated: {exc.args[0] if exc.args else exc}")
        from celpy.celtypes import BoolType  # loaded with the condition's program

        if not isinstance(outcome, bool | BoolType):
            return CelFailure(f"must evaluate to a bool, got {type(outcome).__name__}", not_bool=True)
        return bool(outcome)


def cel_activation(inv: Invocation, tool: str, server: str | None, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The variables a condition sees for one call."""
    principal: dict[str, Any] = {"type": "anonymous"}
    if inv.context is not None and inv.context.principal is not None:
        principal = inv.context.principal.to_wire()
    values: dict[str, Any] = {
        "args": dict(arguments),
        "tool": tool,
        "server": server or "",
        "principal": principal,
        "session": inv.session_id or "",
    }
    from celpy.adapter import json_to_cel  # loaded already: only CEL conditions need an activation

    return {key: json_to_cel(value) for key, value in values.items()}


def _free_names(tree: Any, bound: frozenset[str]) -> Iterator[str]:
    """The variables a compiled expression names that are not `bound`, in order. Without this check such a
    condition compiles, then fails to evaluate on every call."""
    if not hasattr(tree, "data"):  # a token (celpy's trees are lark's: subtrees have `data`, tokens are str)
        return
    if tree.data == "primary" and tree.children and getattr(tree.children[0], "data", None) == "ident":
        name = str(tree.children[0].children[0])
        if name not in bound:
            yield name
        return
    if tree.data == "member_dot_arg" and len(tree.children) == 3 and str(tree.children[1]) in _CEL_MACROS:
        target, _, arguments = tree.children
        yield from _free_names(target, bound)
        expressions = arguments.children if hasattr(arguments, "data") else []
        variable = _macro_variable(expressions[0]) if expressions else None
        inner = bound | {variable} if variable is not None else bound
        for expression in expressions[1:] if variable is not None else expressions:
            yield from _free_names(expression, inner)
        return
    for child in tree.children:
        yield from _free_names(child, bound)


def _macro_variable(expression: Any) -> str | None:
    """The name a macro's first argument declares, when it is a bare identifier."""
    idents = [node for node in expression.iter_subtrees() if node.data == "ident"]
    primaries = [node for node in expression.iter_subtrees() if node.data == "primary"]
    if len(idents) == 1 and len(primaries) == 1:
        return str(idents[0].children[0])
    return None
