"""The one import rule import-linter does not ship: no cycle through a package's own ``__init__``.

``acyclic_siblings`` finds cycles between the children of each package. A
package whose ``__init__`` re-exports one of its modules, while that module
(or one it imports) imports the package back, is a cycle too, but not one
between siblings; this contract finds it. pyproject.toml declares it beside
the others, and ``lint-imports`` loads it from here.
"""

from __future__ import annotations

from typing import cast

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck
from importlinter.domain.helpers import module_expressions_to_modules
from importlinter.domain.imports import ModuleExpression


class NoCycleThroughPackageContract(Contract):
    """No package under ``packages`` imports a module of its own that leads back to it."""

    type_name = "no_cycle_through_package"

    packages = fields.SetField(subfield=fields.ModuleExpressionField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        """Every cycle ``package -> own module -> ... -> package``, shortest first."""
        expressions = cast(set[ModuleExpression], self.packages)
        roots = {m.name for m in module_expressions_to_modules(graph, expressions)}
        packages = sorted(
            m
            for m in roots | {d for r in roots for d in graph.find_descendants(r)}
            if graph.find_children(m)
        )
        cycles: list[tuple[str, ...]] = []
        for package in packages:
            for imported in sorted(graph.find_modules_directly_imported_by(package)):
                if imported.startswith(f"{package}."):
                    back = graph.find_shortest_chain(importer=imported, imported=package)
                    if back is not None:
                        cycles.append((package, *back))
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        """Each cycle as one line of imports."""
        for cycle in check.metadata["cycles"]:
            output.print_error(" -> ".join(cycle))
            output.new_line()
