"""Running a plan: graphql-core's execution algorithm, minus its per-field machinery.

The order of work is graphql-core's: an object's fields resolve in order,
synchronous results complete at once, and whatever must wait (an async
resolver, or a completion below one) is gathered per object and per list.
So agent fetches batch and overlap as they do under strawberry; the errors
are then put in response order, as strawberry's are (``errors.in_response_order``).

A resolver's error makes its field null and adds the error with the field's
path and locations, as graphql-core does. Anything the plan does not
reproduce exactly raises ``Fallback``, and strawberry answers the operation:
a null in a non-null field (graphql-core would bubble it), the result budget
(graphql-core reports it once per refused field), a masked internal error, a
resolver that reads more of ``info`` than its context and path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from types import CoroutineType
from typing import Any

from graphql import GraphQLError, located_error
from graphql.execution import VariableValues, get_argument_values
from graphql.pyutils import Path

from ..errors import ResultBudgetError, is_internal
from ..gather import gather_inline
from .plan import (
    Completer,
    Fallback,
    FieldPlan,
    LeafCompleter,
    ListCompleter,
    ObjectCompleter,
    ObjectPlan,
)

__all__ = ["PlanRun"]

# Path links as tuples (parent, key, type name); a graphql Path is built only
# when a resolver or an error asks for one.
PathLink = tuple[Any, "str | int", "str | None"] | None


def _as_path(link: PathLink) -> Path | None:
    if link is None:
        return None
    parent, key, typename = link
    return Path(_as_path(parent), key, typename)


def _as_list(link: PathLink) -> list[str | int]:
    keys: list[str | int] = []
    while link is not None:
        keys.append(link[1])
        link = link[0]
    keys.reverse()
    return keys


def _close(values: Any) -> None:
    """Close coroutines that will never be awaited (the plan gave up), and the ones they
    were handed (resolvers' coroutines, lists of them), so none is reported unawaited."""
    for value in values:
        if isinstance(value, list | tuple):
            _close(value)
        elif isinstance(value, Coroutine):
            frame = value.cr_frame  # type: ignore[attr-defined]
            inner = list(frame.f_locals.values()) if frame is not None else []
            value.close()
            _close(inner)


# What most fields complete to: never awaitable, so no ABC check is needed.
_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})


def _awaitable(value: Any) -> bool:
    """``isinstance(value, Awaitable)``, by type first: the ABC's check is slow, and the
    plan asks it of every async field and every object it completes."""
    kind = type(value)
    if kind is CoroutineType:
        return True
    if kind in _PLAIN:
        return False
    return isinstance(value, Awaitable)


def _gather(awaitables: list[Awaitable[Any]]) -> Awaitable[list[Any]]:
    """The awaitables' results: stepped in this task when all are coroutines (all the
    plan makes), else through ``asyncio.gather``."""
    # CoroutineType, not the Coroutine ABC: a plain type check, per list item.
    if all(isinstance(a, CoroutineType) for a in awaitables):
        return gather_inline(awaitables)  # type: ignore[arg-type]
    return asyncio.gather(*awaitables)


class PlanInfo:
    """The part of strawberry's ``Info`` the schema's resolvers read: context and path."""

    __slots__ = ("_link", "context")

    def __init__(self, context: Any, link: PathLink) -> None:
        self.context = context
        self._link = link

    @property
    def path(self) -> Path:
        """The field's path, as graphql-core would give it."""
        path = _as_path(self._link)
        if path is None:
            # A generated selection's resolvers get no path (see codegen).
            raise Fallback("a resolver in a generated selection reads info.path")
        return path

    def __getattr__(self, name: str) -> Any:
        raise Fallback(f"a resolver reads info.{name}")


class PlanRun:
    """One execution of a plan for one operation's context and variables."""

    def __init__(self, context: Any, variables: VariableValues) -> None:
        self.context = context
        self.variables = variables
        self.errors: list[GraphQLError] = []
        # What generated selections hand their resolvers: the context, and no path.
        self._info = PlanInfo(context, None)
        # Per field: graphql-core's coerced arguments, and their conversion when reusable.
        self._arguments: dict[int, tuple[dict[str, Any], dict[str, Any] | None]] = {}

    async def execute(self, root: ObjectPlan) -> dict[str, Any]:
        """The operation's data; ``errors`` holds the field errors, as they happened."""
        data = self._object(root, None, None)
        if _awaitable(data):
            data = await data
        return data

    # ---------------------------------------------------------------- objects

    def _object(self, plan: ObjectPlan, source: Any, link: PathLink) -> Any:
        generated = plan.generated
        if generated is not None:
            try:
                return generated(source, self._info)
            except Exception as exc:
                raise Fallback(f"in a generated selection: {exc!r}") from exc
        result: dict[str, Any] = {}
        waiting: list[tuple[str, Awaitable[Any]]] | None = None
        lone = plan.lone_async
        try:
            for field in plan.fields:
                if field is lone:
                    result[field.key] = None  # its place in the answer's order
                    continue
                value = self._field(field, plan.type_name, source, link)
                if (field.is_async or field.complete.may_await) and _awaitable(value):
                    if waiting is None:
                        waiting = []
                    waiting.append((field.key, value))
                    result[field.key] = None
                    continue
                result[field.key] = value
        except BaseException:
            _close(a for _, a in waiting or ())
            raise
        if lone is not None:
            return self._awaited(lone, source, (link, lone.key, plan.type_name), result)
        if waiting is None:
            return result
        return self._gather_object(result, waiting)

    async def _gather_object(
        self, result: dict[str, Any], waiting: list[tuple[str, Awaitable[Any]]]
    ) -> dict[str, Any]:
        if len(waiting) == 1:
            key, awaitable = waiting[0]
            result[key] = await awaitable
            return result
        values = await _gather([a for _, a in waiting])
        for (key, _), value in zip(waiting, values, strict=True):
            result[key] = value
        return result

    # ---------------------------------------------------------------- fields

    def _field(self, field: FieldPlan, type_name: str, source: Any, link: PathLink) -> Any:
        if field.typename is not None:
            return field.typename
        attribute = field.attribute
        if attribute is not None:
            value = getattr(source, attribute)
            return self._complete(field.complete, value, field, (link, field.key, None))
        here: PathLink = (link, field.key, type_name)
        if field.is_async:
            # The resolver's coroutine is made when this one first runs: a time limit
            # that cancels it before then leaves no resolver coroutine unawaited.
            return self._awaited(field, source, here)
        try:
            value = self._resolve(field, source, here)
        except Exception as exc:
            return self._failed(field, exc, here)
        try:
            return self._complete(field.complete, value, field, here)
        except Exception as exc:
            return self._failed(field, exc, here)

    def _resolve(self, field: FieldPlan, source: Any, link: PathLink) -> Any:
        info = PlanInfo(self.context, link) if field.info_name or field.convert else None
        kwargs = self._argument_values(field, info) if field.convert is not None else {}
        if field.info_name is not None:
            kwargs[field.info_name] = info
        resolver = field.resolver
        assert resolver is not None
        if field.takes_self:
            return resolver(source, **kwargs)
        return resolver(**kwargs)

    def _argument_values(self, field: FieldPlan, info: PlanInfo | None) -> dict[str, Any]:
        """The resolver's keyword arguments: graphql-core coerces, strawberry converts."""
        convert = field.convert
        assert convert is not None
        cached = self._arguments.get(id(field))
        if cached is not None:
            values, kwargs = cached
            if kwargs is not None:
                return dict(kwargs)
            return convert(values, info)
        assert field.definition is not None
        try:
            values = get_argument_values(field.definition, field.nodes[0], self.variables)
        except GraphQLError as exc:
            # graphql-core would make this one field null with that error: not reproduced.
            raise Fallback(f"arguments: {exc.message}") from None
        kwargs = convert(values, info)
        # Scalars and enums are converted once per run; lists and input objects per call.
        self._arguments[id(field)] = (values, kwargs if field.convert_once else None)
        return dict(kwargs)

    async def _awaited(
        self, field: FieldPlan, source: Any, link: PathLink, into: dict[str, Any] | None = None
    ) -> Any:
        """The field's completed value; or, given its object's dict, that dict with it."""
        try:
            value = await self._resolve(field, source, link)
            completed = self._complete(field.complete, value, field, link)
            if _awaitable(completed):
                completed = await completed
        except Exception as exc:
            self._failed(field, exc, link)
            completed = None
        if into is None:
            return completed
        into[field.key] = completed
        return into

    def _failed(self, field: FieldPlan, exc: Exception, link: PathLink) -> None:
        if isinstance(exc, Fallback | ResultBudgetError):
            raise exc
        if not field.complete.nullable:
            # graphql-core would null the parent, and so on up: not reproduced.
            raise Fallback("an error in a non-null field") from exc
        error = located_error(exc, list(field.nodes), _as_list(link))
        if is_internal(error):
            raise Fallback("an internal error (strawberry masks it)") from exc
        self.errors.append(error)
        return None

    # ---------------------------------------------------------------- values

    def _complete(self, complete: Completer, value: Any, field: FieldPlan, link: PathLink) -> Any:
        if value is None:
            if complete.nullable:
                return None
            raise Fallback("null in a non-null field")
        if isinstance(complete, LeafCompleter):
            return complete.serialize(value)
        if isinstance(complete, ObjectCompleter):
            return self._object(complete.plan, value, link)
        return self._list(complete, value, field, link)

    def _list(self, complete: ListCompleter, values: Any, field: FieldPlan, link: PathLink) -> Any:
        item = complete.item
        if isinstance(item, LeafCompleter):
            serialize = item.serialize
            if item.nullable:
                return [None if v is None else serialize(v) for v in values]
            if any(v is None for v in values):
                raise Fallback("null in a non-null list item")
            return [serialize(v) for v in values]
        if isinstance(item, ObjectCompleter) and item.plan.generated is not None:
            generated = item.plan.generated
            info = self._info
            try:
                if item.nullable:
                    return [None if v is None else generated(v, info) for v in values]
                return [generated(v, info) for v in values]
            except Exception as exc:
                raise Fallback(f"in a generated selection: {exc!r}") from exc
        if isinstance(item, ObjectCompleter) and not item.plan.may_await:
            plan = item.plan
            if not item.nullable and any(v is None for v in values):
                raise Fallback("null in a non-null list item")
            return [
                None if v is None else self._object(plan, v, (link, i, None))
                for i, v in enumerate(values)
            ]
        completed: list[Any] = []
        try:
            for i, v in enumerate(values):
                completed.append(self._complete(item, v, field, (link, i, None)))
        except BaseException:
            _close(completed)
            raise
        if not any(_awaitable(c) for c in completed):
            return completed
        return self._gather_list(completed)

    async def _gather_list(self, completed: list[Any]) -> list[Any]:
        indices = [i for i, c in enumerate(completed) if _awaitable(c)]
        values = await _gather([completed[i] for i in indices])
        for i, value in zip(indices, values, strict=True):
            completed[i] = value
        return completed
