"""Griffe extension of the API reference: `InterceptorHost.validator`, `.mutator` and `.sink` are made by
`host/authoring.py:registrar` from `build_descriptor`'s one signature, so a static reading sees assignments;
this shows each as the method it is, with `build_descriptor`'s options and the docstring `registrar` gives it.
"""

from __future__ import annotations

import ast
from typing import Any

import griffe

HOST = "mcp_interceptors.host.host.InterceptorHost"
BUILD = "mcp_interceptors.host.authoring.build_descriptor"


class Registrars(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.path != "mcp_interceptors":
            return
        host = pkg.modules_collection[HOST]
        build = pkg.modules_collection[BUILD]
        for name, member in list(host.members.items()):
            value = getattr(member, "value", None)
            if not isinstance(value, griffe.ExprCall) or str(value.function) != "registrar":
                continue
            doc = ast.literal_eval(str(value.arguments[2]))
            options = [p for p in build.parameters if p.kind is griffe.ParameterKind.keyword_only]
            own = [
                griffe.Parameter("self", kind=griffe.ParameterKind.positional_only),
                griffe.Parameter("name", kind=griffe.ParameterKind.positional_only, annotation="str"),
            ]
            method = griffe.Function(
                name,
                lineno=member.lineno,
                endlineno=member.endlineno,
                parameters=griffe.Parameters(*own, *options),
                returns="Registers",
                docstring=griffe.Docstring(
                    f"{doc}\n\nOptions are `build_descriptor`'s; a bad one raises `ValueError` naming it.",
                    parent=host,
                ),
            )
            host.set_member(name, method)
