"""Finds tests that use an outside tool without asking for it through ``tests.support.require``.

A test that needs a browser, containerd, Prometheus, kubectl, a C compiler,
Node.js, helm or make must skip with a reason on a machine without it (and
fail under GPUGRAPH_REQUIRE_ALL=1): it asks through ``require`` or a helper
that calls it (``require_chromium()``, ``kubectl_binary()``, ...), in its own
body before the use or in a fixture it requests. Otherwise a machine without
the tool fails it with the tool's own error, as the cluster map's tests once
failed with Playwright's "executable doesn't exist at /usr/bin/chromium".

Read from the source with ``ast``, without importing it. A function *uses* a
tool when it runs it (a subprocess whose command names it), looks it up
(``shutil.which``), names its installed path (``/usr/bin/chromium``), imports
its driver (Playwright), or calls a function or class of tests/ that does.
A function *asks* for a tool when it calls ``require`` with a condition that
uses the tool (directly, or through a variable assigned in the function),
``require_on_path("tool", ...)``, or a function that asks for it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

# Each tool by the commands that run it; a command's basename is what counts.
TOOLS = {
    "a browser (Chromium)": ("chromium", "chromium-browser", "google-chrome", "chrome"),
    "containerd": ("containerd", "ctr", "runc", "containerd-shim-runc-v2", "crictl"),
    "Prometheus": ("prometheus", "promtool"),
    "kubectl": ("kubectl",),
    "a C compiler": ("cc", "gcc", "clang", "c++", "g++"),
    "Node.js": ("node", "nodejs", "npm", "npx"),
    "helm": ("helm",),
    "make": ("make",),
}
COMMANDS = {command: tool for tool, commands in TOOLS.items() for command in commands}
# A driver whose import means the tool is about to be launched.
DRIVERS = {"playwright": "a browser (Chromium)"}
BIN_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin")
# Functions that start a process from a command (their first argument).
SPAWNERS = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "os": {"system", "popen", "execv", "execvp", "execlp", "spawnvp", "spawnlp"},
    "pexpect": {"spawn", "run"},
}
SUPPORT = "tests.support"
GATE = (SUPPORT, "require")
GATE_ON_PATH = (SUPPORT, "require_on_path")


@dataclass(frozen=True)
class Problem:
    """A test (or fixture) that uses ``tool`` at ``line`` without having asked for it first."""

    path: str
    line: int
    test: str
    tool: str
    late: bool

    @property
    def test_id(self) -> str:
        """``path::test``, as pytest names it."""
        return f"{self.path}::{self.test}"

    def __str__(self) -> str:
        how = "asks too late" if self.late else "never asks"
        return (
            f"{self.path}:{self.line}: {self.test} uses {self.tool} and {how} for it "
            "(through tests.support.require or a require_* helper, in the test or a "
            "fixture it requests)"
        )


@dataclass
class Function:
    """A function (or class, taken as the union of its methods) of some module under tests/."""

    module: Module
    node: ast.AST
    name: str
    # Filled in by Checker: tool -> the first line where it is used / asked for.
    uses: dict[str, int] | None = None
    asks: dict[str, int] | None = None


@dataclass
class Module:
    """One parsed module: its functions and classes, its constants, what it imported as what."""

    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    functions: dict[str, Function] = field(default_factory=dict)
    # Local name -> (module, attribute or None for the module itself).
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    # Module-level constants: name -> value.
    constants: dict[str, ast.expr] = field(default_factory=dict)


def _dotted(node: ast.expr) -> list[str]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return []


def _tool_of_command(command: str) -> str | None:
    words = command.split()
    return COMMANDS.get(PurePosixPath(words[0]).name) if words else None


def _tool_of_path(value: str) -> str | None:
    path = PurePosixPath(value)
    return COMMANDS.get(path.name) if str(path.parent) in BIN_DIRS else None


class Checker:
    """The modules under ``root``/tests, with each function's uses of and asks for tools."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: dict[str, Module] = {}
        for path in sorted((root / "tests").rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            module = Module(".".join(parts), path, ast.parse(path.read_text()), is_package)
            self._index(module)
            self.modules[module.name] = module

    # -- reading modules ---------------------------------------------------------

    def _index(self, module: Module) -> None:
        for statement in module.tree.body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                module.functions[statement.name] = Function(module, statement, statement.name)
            elif isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
                if isinstance(statement, ast.Assign):
                    targets = statement.targets
                else:
                    targets = [statement.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        module.constants[target.id] = statement.value
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    module.imports.setdefault(local, (alias.name if alias.asname else local, None))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module.name.split(".")
                    if not module.is_package:
                        package = package[:-1]
                    package = package[: len(package) - node.level + 1]
                    base = ".".join([*package, *([node.module] if node.module else [])])
                for alias in node.names:
                    module.imports.setdefault(alias.asname or alias.name, (base, alias.name))

    def resolve(self, module: Module, expr: ast.expr) -> tuple[str, str] | None:
        """(module, name) that a called name or ``module.name`` refers to, if it is in tests/."""
        parts = _dotted(expr)
        if not parts:
            return None
        if len(parts) == 1:
            if parts[0] in module.functions:
                return module.name, parts[0]
            found = module.imports.get(parts[0])
            if found is None or found[1] is None:
                return None
            if f"{found[0]}.{found[1]}" in self.modules:
                return None  # a module imported by ``from package import module``
            return found[0], found[1]
        found = module.imports.get(parts[0])
        if found is None:
            return None
        target = found[0] if found[1] is None else f"{found[0]}.{found[1]}"
        target = ".".join([target, *parts[1:-1]])
        return (target, parts[-1]) if target in self.modules else None

    def function(self, where: tuple[str, str] | None) -> Function | None:
        """The function (or class) a resolved name refers to, following re-exports."""
        seen = set()
        while where is not None and where not in seen:
            seen.add(where)
            module = self.modules.get(where[0])
            if module is None:
                return None
            if where[1] in module.functions:
                return module.functions[where[1]]
            found = module.imports.get(where[1])
            where = (found[0], found[1]) if found is not None and found[1] is not None else None
        return None

    def constant(self, module: Module, name: str) -> tuple[Module, ast.expr] | None:
        """The module-level value ``name`` refers to in ``module``, following imports."""
        seen = set()
        while (module.name, name) not in seen:
            seen.add((module.name, name))
            if name in module.constants:
                return module, module.constants[name]
            found = module.imports.get(name)
            if found is None or found[1] is None or found[0] not in self.modules:
                return None
            module, name = self.modules[found[0]], found[1]
        return None

    # -- uses and asks -----------------------------------------------------------

    def _raw(self, module: Module, node: ast.AST, scope: dict[str, list[str]]) -> Iterator[str]:
        """The tools ``node`` itself names (not through a call into tests/)."""
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                if name and name.split(".")[0] in DRIVERS:
                    yield DRIVERS[name.split(".")[0]]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            tool = _tool_of_path(node.value)
            if tool:
                yield tool
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in scope:
            found = self.constant(module, node.id)
            if found is not None:
                owner, value = found
                for inner in ast.walk(value):
                    yield from self._raw(owner, inner, {**scope, node.id: []})
        elif isinstance(node, ast.Call):
            parts = _dotted(node.func)
            if parts and parts[-1] == "which" and node.args:
                for name in self._strings(node.args[0], scope):
                    tool = COMMANDS.get(name)
                    if tool:
                        yield tool
            if self._spawns(module, parts):
                command = node.args[0] if node.args else None
                for keyword in node.keywords:
                    if keyword.arg == "args":
                        command = keyword.value
                if isinstance(command, ast.List | ast.Tuple) and command.elts:
                    command = command.elts[0]
                if isinstance(command, ast.Constant) and isinstance(command.value, str):
                    tool = _tool_of_command(command.value)
                    if tool:
                        yield tool

    def _spawns(self, module: Module, parts: list[str]) -> bool:
        if len(parts) == 2:
            origin = module.imports.get(parts[0], (parts[0], None))[0]
            return parts[1] in SPAWNERS.get(origin, ())
        if len(parts) == 1:
            origin, name = module.imports.get(parts[0], ("", None))
            return name in SPAWNERS.get(origin, ())
        return False

    def _strings(self, node: ast.expr, scope: dict[str, list[str]]) -> list[str]:
        """The strings an expression can be: a literal, or a loop variable over literals."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name):
            return scope.get(node.id, [])
        return []

    def _loop_strings(self, module: Module, body: ast.AST) -> dict[str, list[str]]:
        """Loop variables (``for``, comprehensions) that run over literal strings."""
        scope: dict[str, list[str]] = {}
        for node in ast.walk(body):
            if isinstance(node, ast.For | ast.comprehension) and isinstance(node.target, ast.Name):
                sequence = node.iter
                if isinstance(sequence, ast.Name):
                    sequence = module.constants.get(sequence.id, sequence)
                if isinstance(sequence, ast.List | ast.Tuple):
                    scope[node.target.id] = [
                        e.value
                        for e in sequence.elts
                        if isinstance(e, ast.Constant) and isinstance(e.value, str)
                    ]
        return scope

    def _touches(self, module: Module, node: ast.AST, scope: dict[str, list[str]]) -> set[str]:
        """Every tool ``node`` uses, its callees' uses included."""
        found: set[str] = set()
        for inner in ast.walk(node):
            found.update(self._raw(module, inner, scope))
            if isinstance(inner, ast.Call):
                callee = self.function(self.resolve(module, inner.func))
                if callee is not None:
                    self.analyse(callee)
                    assert callee.uses is not None
                    found.update(callee.uses)
        return found

    def analyse(self, function: Function) -> None:
        """Fill in what ``function`` uses and asks for, by first line.

        What only feeds a ``require`` (``node = shutil.which("node")`` before
        ``require(node is not None, ...)``) is the asking, not a use.
        """
        if function.uses is not None:
            return
        function.uses, function.asks = {}, {}  # guards recursion
        module, body = function.module, function.node
        scope = self._loop_strings(module, body)
        assigned: dict[str, list[ast.expr]] = {}
        for node in ast.walk(body):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        assigned.setdefault(target.id, []).append(node.value)
        asks: dict[str, int] = {}
        asking: set[int] = set()
        for node in ast.walk(body):
            if not isinstance(node, ast.Call):
                continue
            where = self.resolve(module, node.func)
            if where == GATE:
                feeding = [*node.args, *(k.value for k in node.keywords)]
                feeding += [
                    value
                    for argument in list(feeding)
                    for name in ast.walk(argument)
                    if isinstance(name, ast.Name)
                    for value in assigned.get(name.id, [])
                ]
                tools = set().union(*(self._touches(module, f, scope) for f in feeding))
                asking.update(id(inner) for f in feeding for inner in ast.walk(f))
            elif where == GATE_ON_PATH and node.args:
                tools = {
                    COMMANDS[value]
                    for value in self._strings(node.args[0], scope)
                    if value in COMMANDS
                }
            else:
                continue
            for tool in tools:
                asks[tool] = min(asks.get(tool, node.lineno), node.lineno)
        uses: dict[str, int] = {}
        for node in ast.walk(body):
            if id(node) in asking:
                continue
            line = getattr(node, "lineno", 0)
            touched = set(self._raw(module, node, scope))
            if isinstance(node, ast.Call):
                callee = self.function(self.resolve(module, node.func))
                if callee is not None:
                    self.analyse(callee)
                    assert callee.uses is not None and callee.asks is not None
                    touched.update(callee.uses)
                    for tool in callee.asks:
                        asks[tool] = min(asks.get(tool, line), line)
            for tool in touched:
                uses[tool] = min(uses.get(tool, line), line)
        function.uses, function.asks = uses, asks

    # -- tests and fixtures ------------------------------------------------------

    def _fixture_name(self, node: ast.AST) -> str | None:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            parts = _dotted(call.func if call else decorator)
            if parts[-1:] == ["fixture"]:
                for keyword in call.keywords if call else []:
                    if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                        return str(keyword.value.value)
                return node.name
        return None

    def _autouse(self, node: ast.AST) -> bool:
        decorators = getattr(node, "decorator_list", [])
        return any(
            isinstance(k.value, ast.Constant) and k.value.value is True
            for d in decorators
            if isinstance(d, ast.Call)
            for k in d.keywords
            if k.arg == "autouse"
        )

    def _visible_fixtures(self, module: Module) -> dict[str, Function]:
        """Fixtures a test of ``module`` can request: conftest.py's above it, then its own."""
        chain: list[Module] = []
        directory = module.path.parent
        while True:
            conftest = self.modules.get(
                ".".join([*directory.relative_to(self.root).parts, "conftest"])
            )
            if conftest is not None and conftest is not module:
                chain.insert(0, conftest)
            if directory == self.root / "tests":
                break
            directory = directory.parent
        visible: dict[str, Function] = {}
        for source in [*chain, module]:
            for local in [*source.functions, *source.imports]:
                function = self.function((source.name, local))
                if function is not None:
                    name = self._fixture_name(function.node)
                    if name is not None:
                        visible[local if local in source.imports else name] = function
        return visible

    def _requested(self, module: Module, node: ast.AST) -> set[str]:
        """Fixture names ``node`` requests: its parameters and ``usefixtures`` marks."""
        names: set[str] = set()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.update(a.arg for a in [*node.args.posonlyargs, *node.args.args])
        marks = [*getattr(node, "decorator_list", [])]
        pytestmark = module.constants.get("pytestmark")
        if pytestmark is not None:
            marks.extend(pytestmark.elts if isinstance(pytestmark, ast.List) else [pytestmark])
        for mark in marks:
            if isinstance(mark, ast.Call) and _dotted(mark.func)[-1:] == ["usefixtures"]:
                names.update(str(a.value) for a in mark.args if isinstance(a, ast.Constant))
        return names

    def _fixture_asks(self, module: Module, node: ast.AST) -> set[str]:
        """What the fixtures ``node`` requests (and theirs, and autouse ones) ask for."""
        visible = self._visible_fixtures(module)
        todo = [
            *self._requested(module, node),
            *(n for n, f in visible.items() if self._autouse(f.node)),
        ]
        asked: set[str] = set()
        seen: set[str] = set()
        while todo:
            name = todo.pop()
            fixture = visible.get(name)
            if name in seen or fixture is None or fixture.node is node:
                continue
            seen.add(name)
            self.analyse(fixture)
            assert fixture.asks is not None
            asked.update(fixture.asks)
            todo.extend(self._requested(fixture.module, fixture.node))
        return asked

    def problems(self) -> list[Problem]:
        """Each test or fixture that uses a tool it has not asked for before."""
        found: list[Problem] = []
        for module in self.modules.values():
            for function in self._entry_points(module):
                self.analyse(function)
                assert function.uses is not None and function.asks is not None
                from_fixtures = self._fixture_asks(module, function.node)
                for tool, line in sorted(function.uses.items()):
                    asked = function.asks.get(tool)
                    if tool in from_fixtures or (asked is not None and asked <= line):
                        continue
                    path = function.module.path.relative_to(self.root).as_posix()
                    found.append(Problem(path, line, function.name, tool, asked is not None))
        return found

    def _entry_points(self, module: Module) -> Iterator[Function]:
        """What pytest runs: test functions, and fixtures, of test modules and conftest.py."""
        tests_here = module.path.stem.startswith("test_") or module.path.stem == "conftest"
        for function in module.functions.values():
            is_test = tests_here and function.name.startswith("test")
            if is_test or self._fixture_name(function.node) is not None:
                yield function
