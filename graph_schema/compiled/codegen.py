"""Generated Python for the selections that only read attributes.

Below the resolvers that fetch (a node's GPUs) most of an answer is plain
attributes of objects built once per snapshot: a GPU's metrics, its
processes, their pods. For such a selection set (every field a plain
attribute or ``__typename``, every nested selection the same) one Python
function is generated that builds the response dict in a single expression,
the way graphql-jit generates JavaScript. It reads and serializes each value
as the interpreter in ``run`` would; any exception inside it (a null in a
non-null field, a value its scalar refuses) makes the plan give up, and
strawberry answers, which reports it its own way.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

from .plan import Completer, LeafCompleter, ListCompleter, ObjectCompleter, ObjectPlan

__all__ = ["attach_pure_functions", "pure_function"]

# When a value passes unchanged, by scalar: ``v`` is the value's first use (it may
# bind it), ``w`` the later ones. The fallback is the scalar's own serializer.
_INLINE = {
    "String": "type({v}) is str",
    "Int": "type({v}) is int and -2147483648 <= {w} <= 2147483647",
    "Boolean": "type({v}) is bool",
    "Float": "type({v}) is float and {w} - {w} == 0.0",
    "int": "type({v}) is int",
}


def is_pure(plan: ObjectPlan) -> bool:
    """Whether every field of ``plan`` (and below) is a plain attribute or ``__typename``."""
    for field in plan.fields:
        if field.typename is not None:
            continue
        if field.attribute is None:
            return False
        if not _pure_completer(field.complete):
            return False
    return True


def _pure_completer(complete: Completer) -> bool:
    if isinstance(complete, LeafCompleter):
        return True
    if isinstance(complete, ObjectCompleter):
        return is_pure(complete.plan)
    return _pure_completer(complete.item)


class _Writer:
    def __init__(self) -> None:
        self.names: dict[str, Any] = {}
        self.functions: list[str] = []
        self._count = 0

    def name(self, value: Any, prefix: str) -> str:
        self._count += 1
        name = f"{prefix}{self._count}"
        self.names[name] = value
        return name

    def fresh(self) -> str:
        self._count += 1
        return f"v{self._count}"

    def object_function(self, plan: ObjectPlan) -> str:
        self._count += 1
        function = f"object{self._count}"
        items = []
        for field in plan.fields:
            if field.typename is not None:
                items.append(f"{field.key!r}: {field.typename!r}")
                continue
            assert field.attribute is not None
            value = f"source.{field.attribute}"
            if not field.attribute.isidentifier():
                value = f"getattr(source, {field.attribute!r})"
            items.append(f"{field.key!r}: {self.value(field.complete, value)}")
        body = ", ".join(items)
        self.functions.append(f"def {function}(source):\n    return {{{body}}}\n")
        return function

    def value(self, complete: Completer, expression: str) -> str:
        """An expression completing ``expression`` (evaluated once) as ``complete`` says."""
        if isinstance(complete, LeafCompleter) and complete.scalar in _INLINE:
            # The common case inline; anything else through the scalar's serializer.
            test = _INLINE[complete.scalar]
            serialize = self.name(complete.serialize, "serialize")
            variable = self.fresh()
            if not complete.nullable:
                passes = test.format(v=f"({variable} := {expression})", w=variable)
                return f"({variable} if {passes} else {serialize}({variable}))"
            check = test.format(v=variable, w=variable)
            return (
                f"(None if ({variable} := {expression}) is None "
                f"else {variable} if {check} else {serialize}({variable}))"
            )
        if isinstance(complete, LeafCompleter):
            inner = f"{self.name(complete.serialize, 'serialize')}({{}})"
        elif isinstance(complete, ObjectCompleter):
            inner = f"{self.object_function(complete.plan)}({{}})"
        else:
            assert isinstance(complete, ListCompleter)
            item = self.fresh()
            inner = f"[{self.value(complete.item, item)} for {item} in {{}}]"
        if not complete.nullable:
            # A None here fails inside (no attribute, a scalar's refusal): the plan gives up.
            return inner.format(expression)
        variable = self.fresh()
        return f"(None if ({variable} := {expression}) is None else {inner.format(variable)})"


def pure_function(plan: ObjectPlan) -> Callable[[Any], dict[str, Any]]:
    """One generated function building ``plan``'s response dict from an object."""
    writer = _Writer()
    entry = writer.object_function(plan)
    namespace: dict[str, Any] = dict(writer.names)
    # The source is built above from the schema's names and repr()'d response keys.
    exec("\n".join(writer.functions), namespace)
    function: Callable[[Any], dict[str, Any]] = namespace[entry]
    return function


def remembered(function: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    """``function``, answering again from memory for an object it has rendered.

    The objects under the fetching resolvers are built once per snapshot and
    never changed afterwards (``views``), so a selection's dict for one of them
    stays right for as long as the object lives: queries within the snapshot
    TTL reuse it instead of building it again. Entries go with their object
    (a weak reference's callback). The dicts are shared between answers, which
    only ever serialize them. Objects that take no weak reference are rendered
    each time.
    """
    memory: dict[int, tuple[weakref.ref[Any], dict[str, Any]]] = {}

    def forget(key: int) -> Callable[[weakref.ref[Any]], None]:
        def gone(_ref: weakref.ref[Any]) -> None:
            memory.pop(key, None)

        return gone

    def render(source: Any) -> dict[str, Any]:
        key = id(source)
        kept = memory.get(key)
        if kept is not None and kept[0]() is source:
            return kept[1]
        value = function(source)
        with contextlib.suppress(TypeError):  # no weak references to this type
            memory[key] = (weakref.ref(source, forget(key)), value)
        return value

    return render


def attach_pure_functions(plan: ObjectPlan, *, outermost: bool = True) -> None:
    """Give each outermost pure selection under ``plan`` (or ``plan`` itself) its function.

    Selections below a list (a node's GPUs, a GPU's processes) are remembered
    per object; the root's is not (it has no object).
    """
    if is_pure(plan):
        function = pure_function(plan)
        plan.pure = function if outermost else remembered(function)
        return
    for field in plan.fields:
        complete = field.complete
        while isinstance(complete, ListCompleter):
            complete = complete.item
        if isinstance(complete, ObjectCompleter):
            attach_pure_functions(complete.plan, outermost=False)
