"""Option values converted without pydantic where typer's own conversion is plain.

typer (0.2x) converts every parameter through a pydantic ``TypeAdapter`` built on first use:
importing pydantic and building about thirty adapters costs every run about 0.1 s of CPU (as
much as the analysis of a short log), for values that are a string, a number or a choice. Here
each simple parameter gets a converter that does typer's work for the values it is sure of and
hands everything else (a malformed number, a value out of range, an unknown choice, a type not
listed here) to typer's own adapter, built then: a valid value converts to the same object, and
every error keeps typer's message.

It relies on typer's runtime-coercion layer (``typer._coercion``, typer >= 0.20): with another
typer, or anything unexpected, :func:`install` does nothing and typer converts as it always does.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

try:  # typer's private coercion layer: absent from older typers, may move in newer ones
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_choice, coerce_cli_path
except ImportError:  # pragma: no cover - depends on the installed typer
    RuntimeParam = None  # type: ignore[assignment,misc]

#: Texts whose int() and float() are the numbers pydantic reads from them (anything looser,
#: such as "1_000", " 5", "0x10" or "inf", goes to typer's adapter).
_INT_TEXT = re.compile(r"-?[0-9]+")
_FLOAT_TEXT = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


class _Delegate(Exception):
    """A value this module is not sure of: typer's adapter converts it (or says why not)."""


def _convert_leaf(annotation: Any, info: Any, value: Any, param: Any, ctx: Any) -> Any:
    """``value`` as typer's adapter converts it for ``annotation``, or :class:`_Delegate`."""
    if annotation is str:
        if isinstance(value, str):
            return value
        raise _Delegate
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise _Delegate  # a text ("yes", "0"): typer's rules
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        try:
            return coerce_cli_choice(
                value, choices=list(annotation), case_sensitive=info.case_sensitive, ctx=ctx
            )
        except ValueError:
            raise _Delegate from None
    if annotation is Path and info.path_type is None:
        if not isinstance(value, str) or not value:
            raise _Delegate
        # typer's own path checks (exists=, dir_okay=...); given a Path it needs no pydantic
        return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
    if annotation is int or annotation is float:
        if isinstance(value, str):
            pattern = _INT_TEXT if annotation is int else _FLOAT_TEXT
            if not pattern.fullmatch(value):
                raise _Delegate
            number = annotation(value)
        elif type(value) is annotation or (annotation is float and type(value) is int):
            number = annotation(value)
        else:
            raise _Delegate
        if annotation is float and not math.isfinite(number):
            raise _Delegate
        if (info.min is not None and number < info.min) or (
            info.max is not None and number > info.max
        ):
            raise _Delegate  # out of range: typer's message (or its clamp)
        return number
    raise _Delegate


def _supported(annotation: Any, info: Any) -> bool:
    """Whether every value of ``annotation`` is either converted here or delegated."""
    if info.parser is not None or info.clamp:
        return False
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        return _supported(item, info)
    return annotation in (str, bool, int, float, Path) or (
        isinstance(annotation, type) and issubclass(annotation, Enum)
    )


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        """typer's conversion of a string, flag, number, choice or path (a list of them), done
        here for the values it is sure of; the rest goes to the adapter typer would have used."""

        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            annotation, info = self.annotation, self.parameter_info
            try:
                if get_origin(annotation) is list:
                    (item,) = get_args(annotation)
                    items = value if isinstance(value, (list, tuple)) else [value]
                    return [_convert_leaf(item, info, v, param, ctx) for v in items]
                return _convert_leaf(annotation, info, value, param, ctx)
            except _Delegate:
                return build_runtime_param(self.descriptor)._coerce_value(value, param, ctx)


def install(params: Any) -> None:
    """Give each simple typer parameter of ``params`` the plain conversion (see the module
    docstring); the others, and every parameter under another typer, are left as they are."""
    if RuntimeParam is None:
        return  # pragma: no cover - depends on the installed typer
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", "absent") is not None:
            continue  # not typer's parameter, or its conversion is built already
        if descriptor.file_annotation is not None:
            continue
        if not _supported(descriptor.annotation, descriptor.parameter_info):
            continue
        param._runtime_param = PlainRuntimeParam(
            parameter_info=descriptor.parameter_info,
            annotation=descriptor.annotation,
            descriptor=descriptor,
        )
