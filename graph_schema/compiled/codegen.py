"""Generated Python for the selections that read attributes and call synchronous resolvers.

Below the resolvers that fetch (a node's GPUs) most of an answer is
attributes of objects built once per snapshot (a GPU's metrics, its
processes, their pods) and small synchronous resolvers over them (a
process's allocation verdict and container, a pod's GPU request). For such a
selection set (every field a plain attribute, ``__typename`` or a
synchronous resolver without arguments, every nested selection the same) one
Python function is generated that builds the response dict in a single
expression, the way graphql-jit generates JavaScript. It reads, calls and
serializes each value as the interpreter in ``run`` would; any exception
inside it (a resolver's error, a null in a non-null field, a value its scalar
refuses) makes the plan give up, and strawberry answers, which reports it its
own way.

A generated function takes the object and the run's ``PlanInfo``, which a
resolver that reads ``info.context`` gets (one reading ``info.path`` fails,
and strawberry answers). A selection whose resolvers read only their object
is remembered per object (``remembered``), as is one whose resolvers read
the context only for what every caller shares (``operation.remember_while``:
a pod's GPU request reads the cached claims), until that changes; one with
a resolver reading the context otherwise (the caller's view, the result
budget) is rendered for each run.

Where the answers only ever leave as orjson's bytes (the server's HTTP and
WebSocket views), a selection below the root is encoded as soon as it is
built (``encoded``): the answer holds, and remembers, each GPU's or pod's
JSON as one ``orjson.Fragment``, which orjson copies into the response as it
is, instead of the dicts, lists, strings and integers it was built from
(five times the bytes in Python objects). A whole-cluster answer of tens of
MB is then held once as bytes and once as fragments, not as millions of
objects beside its bytes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from .plan import (
    Completer,
    FieldPlan,
    LeafCompleter,
    ListCompleter,
    ObjectCompleter,
    ObjectPlan,
)

__all__ = ["Generated", "attach_generated_functions", "encoded", "generated_function"]

# A generated selection: (the object, the run's PlanInfo) -> its response dict, or that
# dict's JSON as an orjson fragment (``encoded``).
Generated = Callable[[Any, Any], Any]

# When a value passes unchanged, by scalar: ``v`` is the value's first use (it may
# bind it), ``w`` the later ones. The fallback is the scalar's own serializer.
_INLINE = {
    "String": "type({v}) is str",
    "Int": "type({v}) is int and -2147483648 <= {w} <= 2147483647",
    "Boolean": "type({v}) is bool",
    "Float": "type({v}) is float and {w} - {w} == 0.0",
    "int": "type({v}) is int",
}


def _callable(field: FieldPlan) -> bool:
    """A resolver the generated code may call: synchronous, without arguments."""
    return field.resolver is not None and not field.is_async and field.convert is None


def is_generable(plan: ObjectPlan) -> bool:
    """Whether every field of ``plan`` (and below) is an attribute, ``__typename`` or a
    synchronous resolver without arguments."""
    for field in plan.fields:
        if field.typename is not None:
            continue
        if field.attribute is None and not _callable(field):
            return False
        if not _generable_completer(field.complete):
            return False
    return True


def _generable_completer(complete: Completer) -> bool:
    if isinstance(complete, LeafCompleter):
        return True
    if isinstance(complete, ObjectCompleter):
        return is_generable(complete.plan)
    return _generable_completer(complete.item)


def reads_info(plan: ObjectPlan) -> bool:
    """Whether a resolver in ``plan`` (or below) takes ``info`` for what is the caller's
    (not ``remember_while``'s): its answer is per run."""
    return any(
        field.info_name is not None and field.remember_while is None
        for field in _fields_below(plan)
    )


def versions(plan: ObjectPlan) -> tuple[Callable[[Any], Any], ...]:
    """What says how long ``plan``'s answer for an object stands: each ``remember_while``
    of the resolvers in it (and below)."""
    found = (field.remember_while for field in _fields_below(plan))
    return tuple(dict.fromkeys(v for v in found if v is not None))


def _fields_below(plan: ObjectPlan) -> Iterator[FieldPlan]:
    for field in plan.fields:
        yield field
        complete = field.complete
        while isinstance(complete, ListCompleter):
            complete = complete.item
        if isinstance(complete, ObjectCompleter):
            yield from _fields_below(complete.plan)


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
            items.append(f"{field.key!r}: {self.value(field.complete, self.read(field))}")
        body = ", ".join(items)
        self.functions.append(f"def {function}(source, info):\n    return {{{body}}}\n")
        return function

    def read(self, field: FieldPlan) -> str:
        """The expression reading ``field`` of ``source``: its attribute, or its resolver's call."""
        attribute = field.attribute
        if attribute is not None:
            if not attribute.isidentifier():
                return f"getattr(source, {attribute!r})"
            return f"source.{attribute}"
        arguments = ["source"] if field.takes_self else []
        if field.info_name is not None:
            arguments.append(f"{field.info_name}=info")
        return f"{self.name(field.resolver, 'resolve')}({', '.join(arguments)})"

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
            inner = f"{self.object_function(complete.plan)}({{}}, info)"
        else:
            assert isinstance(complete, ListCompleter)
            item = self.fresh()
            inner = f"[{self.value(complete.item, item)} for {item} in {{}}]"
        if not complete.nullable:
            # A None here fails inside (no attribute, a scalar's refusal): the plan gives up.
            return inner.format(expression)
        variable = self.fresh()
        return f"(None if ({variable} := {expression}) is None else {inner.format(variable)})"


def generated_function(plan: ObjectPlan) -> Generated:
    """One generated function building ``plan``'s response dict from an object."""
    writer = _Writer()
    entry = writer.object_function(plan)
    namespace: dict[str, Any] = dict(writer.names)
    # The source is built above from the schema's names and repr()'d response keys.
    exec("\n".join(writer.functions), namespace)
    function: Generated = namespace[entry]
    return function


def encoded(function: Generated) -> Generated:
    """``function``, its dict encoded at once: what orjson would write for the dict, as a
    fragment it writes as it is (the dict is freed as soon as it is encoded)."""
    dumps = orjson.dumps
    fragment = orjson.Fragment
    join = b"".join

    def encode(source: Any, info: Any) -> Any:
        # orjson's bytes keep the room of its first buffer (4 KB for a 500-byte GPU); the
        # copy a join makes is their size, which is what the answer holds and remembers.
        return fragment(join((dumps(function(source, info)), b"")))

    return encode


class _Kept(weakref.ref[Any]):
    """A remembered answer: a weak reference to its object, with the answer and its key.

    One object per entry, where a tuple, a weak reference and a callback closure
    made four: the collector walks every one of them, 80,000 GPUs' worth at
    10,000 nodes.
    """

    __slots__ = ("key", "value", "version")
    key: int
    value: Any
    version: Any


def remembered(function: Generated, versions: tuple[Callable[[Any], Any], ...] = ()) -> Generated:
    """``function``, answering again from memory for an object it has rendered.

    The objects under the fetching resolvers are built once per snapshot and
    never changed afterwards (``views``), so a selection's dict for one of them
    stays right for as long as the object lives: queries within the snapshot
    TTL reuse it instead of building it again. Entries go with their object
    (a weak reference's callback). The dicts (or fragments) are shared between
    answers, which only ever serialize them. Objects that take no weak reference
    are rendered each time. With ``versions`` (``remember_while``'s, read from
    the run's info), an answer stands only while they read as they did.
    """
    memory: dict[int, _Kept] = {}

    def gone(kept: _Kept) -> None:
        # Another object may hold the id by now (and its own entry).
        if memory.get(kept.key) is kept:
            del memory[kept.key]

    def render(source: Any, info: Any) -> Any:
        key = id(source)
        version = tuple(read(info) for read in versions) if versions else None
        kept = memory.get(key)
        if kept is not None and kept() is source and kept.version == version:
            return kept.value
        value = function(source, info)
        try:
            kept = _Kept(source, gone)
        except TypeError:  # no weak references to this type
            return value
        kept.key = key
        kept.value = value
        kept.version = version
        memory[key] = kept
        return value

    return render


def attach_generated_functions(
    plan: ObjectPlan, *, encode: bool = False, outermost: bool = True
) -> None:
    """Give each outermost generable selection under ``plan`` (or ``plan`` itself) its function.

    Selections below a list (a node's GPUs, a GPU's processes) are remembered
    per object unless a resolver in them reads the run's context; the root's
    is not (it has no object). With ``encode``, each is ``encoded``; the
    root's dict is the result's ``data``, so its fields are generated one by
    one instead (``{ pods { name } }`` is then a list of encoded pods).
    """
    if is_generable(plan) and not (encode and outermost):
        function = generated_function(plan)
        if encode:
            function = encoded(function)
        keep = not outermost and not reads_info(plan)
        plan.generated = remembered(function, versions(plan)) if keep else function
        return
    for field in plan.fields:
        complete = field.complete
        while isinstance(complete, ListCompleter):
            complete = complete.item
        if isinstance(complete, ObjectCompleter):
            attach_generated_functions(complete.plan, encode=encode, outermost=False)
