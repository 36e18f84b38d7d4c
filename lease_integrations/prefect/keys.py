"""Lease keys for flows: the default key from the flow name, and key templates
over the flow's parameters (``key="billing-{tenant}"``: one lease per tenant).

A template is checked against the flow's signature when the flow is
decorated, so a typo in a parameter name stops the deployment, not a run at
3 a.m.; the formatted key is checked again per run, because its characters
depend on the argument values.
"""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Mapping
from typing import Any

from lease_integrations import ConfigurationError
from lease_integrations.core import validate_key

_UNSAFE = re.compile(r"[^A-Za-z0-9._:/@=+-]+")


def default_key(flow_name: str) -> str:
    """The flow name, with characters a key cannot carry (spaces, mostly)
    replaced by ``-``. Two names that differ only there share one lease,
    which errs on the side of exclusion."""
    key = _UNSAFE.sub("-", flow_name).strip("-")
    if not key:
        raise ConfigurationError(
            f"cannot derive a lease key from flow name {flow_name!r}; pass key=..."
        )
    return validate_key(key)


class KeyTemplate:
    """A lease key, possibly with ``{parameter}`` fields filled from the flow
    run's bound arguments (defaults included)."""

    def __init__(self, template: str, signature: inspect.Signature, flow_name: str) -> None:
        if not isinstance(template, str):
            raise ConfigurationError(
                f"key must be a string (a template like 'billing-{{tenant}}' is allowed), "
                f"got {type(template).__name__}: {template!r}"
            )
        self.template = template
        self.fields = _field_names(template)
        self._signature = signature
        takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        for field in self.fields:
            if field not in signature.parameters and not takes_any:
                known = ", ".join(signature.parameters) or "none"
                raise ConfigurationError(
                    f"key template {template!r} names {{{field}}}, which is not a parameter "
                    f"of flow {flow_name!r} (parameters: {known})"
                )
        _check_fixed_text(template)

    @property
    def is_static(self) -> bool:
        return not self.fields

    def render(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        """The key for one call, from the arguments the flow function receives."""
        if self.is_static:
            return self.template
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        for param in self._signature.parameters.values():
            if param.kind is param.VAR_KEYWORD:
                values.update(values.pop(param.name, {}))
        key = self._fill(values)
        try:
            return validate_key(key)
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"key template {self.template!r} gave an invalid key for this run: {exc}"
            ) from None

    def _fill(self, values: Mapping[str, Any]) -> str:
        try:
            return self.template.format_map(values)
        except (KeyError, AttributeError, IndexError, ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"cannot fill key template {self.template!r}: {type(exc).__name__}: {exc}"
            ) from None


def _check_fixed_text(template: str) -> None:
    """The template's own text must already be valid in a key, checked with
    each field as "x"; the error speaks of the template's text, never of that
    stand-in (``'billing x' has characters outside...`` for ``billing {tenant}``)."""
    parts = list(string.Formatter().parse(template))
    try:
        validate_key("".join(text + ("x" if field is not None else "") for text, field, _, _ in parts))
        return
    except ConfigurationError:
        pass
    fixed = "".join(text for text, _, _, _ in parts)
    outside = sorted({c for c in fixed if not _allowed_inside(c)})
    if not parts:
        why = "it is empty"
    elif outside:
        why = (f"its text has {', '.join(repr(c) for c in outside)}, outside the safe set "
               "(letters, digits and . _ : / @ = + -)")
    elif parts[0][0]:  # the text before the first field: its first character
        why = "it must start with a letter, a digit or a {field}"
    else:
        why = "its text alone is longer than a key may be"
    raise ConfigurationError(f"key template {template!r} is not a valid key: {why}")


def _allowed_inside(char: str) -> bool:
    try:
        validate_key(f"a{char}")
    except ConfigurationError:
        return False
    return True


def _field_names(template: str) -> tuple[str, ...]:
    """The parameter names a template refers to (``{tenant.id}`` refers to
    ``tenant``); positional fields are refused, a flow run has no positions."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigurationError(f"key template {template!r} is malformed: {exc}") from None
    for _, field, _, _ in parsed:
        if field is None:
            continue
        root = re.split(r"[.\[]", field, maxsplit=1)[0]
        if not root or root.isdigit():
            raise ConfigurationError(
                f"key template {template!r} has a positional field {{{field}}}; "
                "name a flow parameter instead, e.g. {tenant}"
            )
        if root not in names:
            names.append(root)
    return tuple(names)
