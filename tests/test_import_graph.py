"""No import circle inside accelhost, counting every import statement wherever it stands.

A circle hidden behind a function-level import (or an `if TYPE_CHECKING:` block) is still
a circle in the design: neither module can be read or changed without the other. So the
graph is built from the sources with `ast`, not from what one import happens to execute.
An edge goes from a module to each accelhost module it names (`from pkg import mod` names
`pkg.mod`; `from pkg import name` names `pkg`); the implicit import of a parent package
does not count, as it is not a dependency the importing module chose.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import accelhost

ROOT = "accelhost"

# Circles found in packages that this change does not own, listed here so that the test
# holds everything else to the rule now; the coordinator empties this list as the owners
# fix them. Each entry is the set of modules of one strongly connected component.
KNOWN_CYCLES: list[frozenset[str]] = []


def _modules() -> dict[str, Path]:
    """Every module of the package, by dotted name, each imported once to prove it loads.

    `__main__` modules run the program when imported: they are parsed, not imported.
    """
    found: dict[str, Path] = {ROOT: Path(accelhost.__file__)}
    for info in pkgutil.walk_packages(accelhost.__path__, prefix=ROOT + "."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            spec = importlib.util.find_spec(info.name)
            assert spec is not None and spec.origin is not None, info.name
            found[info.name] = Path(spec.origin)
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:
            if not _optional_missing(exc):
                raise
            spec = importlib.util.find_spec(info.name)
            assert spec is not None and spec.origin is not None, info.name
            found[info.name] = Path(spec.origin)
            continue
        assert module.__file__ is not None, info.name
        found[info.name] = Path(module.__file__)
    return found


# Optional dependencies: a module that needs one of them is parsed all the same.
OPTIONAL = {"torch", "torch_npu", "tokenizers", "vllm", "pynvml"}


def _optional_missing(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] in OPTIONAL:
            return True
        exc = exc.__cause__
    return False


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name that `from <level dots><target> import ...` refers to."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The accelhost modules that `module` imports anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {name for name in out if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_checker_finds_a_circle_through_a_function_level_import(tmp_path: Path) -> None:
    a = tmp_path / "a.py"
    b = tmp_path / "b.py"
    c = tmp_path / "c.py"
    a.write_text("from pkg import b\n")
    b.write_text("def f():\n    from pkg.c import thing\n    return thing\n")
    c.write_text("import os\n\nif os:\n    from . import a\n")
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c"}
    graph = {
        "pkg.a": imports_of("pkg.a", a, known),
        "pkg.b": imports_of("pkg.b", b, known),
        "pkg.c": imports_of("pkg.c", c, known),
        "pkg": set(),
    }
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b", "pkg.c"})]
    graph["pkg.c"] = set()
    assert cycles(graph) == []


def test_every_module_is_seen() -> None:
    graph = import_graph()
    assert "accelhost.pipeline._run" in graph
    assert "accelhost.cli.main" in graph
    # a real edge, so an empty graph cannot pass the next test
    assert "accelhost.pipeline._run" in graph["accelhost.pipeline._pipeline"]


def test_no_import_cycle_in_accelhost() -> None:
    found = cycles(import_graph())
    unexpected = [c for c in found if c not in KNOWN_CYCLES]
    assert not unexpected, "import circles: " + "; ".join(
        " <-> ".join(sorted(c)) for c in unexpected
    )


def test_the_allow_list_holds_only_circles_that_still_exist() -> None:
    found = cycles(import_graph())
    fixed = [c for c in KNOWN_CYCLES if c not in found]
    assert not fixed, "no longer circles, remove from KNOWN_CYCLES: " + "; ".join(
        " <-> ".join(sorted(c)) for c in fixed
    )


def shell_imports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Every module outside `accelhost.cli` (and the package's own `__main__`, the program
    that starts it) that imports a module of `accelhost.cli`: arrows running back up."""

    def in_cli(name: str) -> bool:
        return name == f"{ROOT}.cli" or name.startswith(f"{ROOT}.cli.")

    return {
        name: {t for t in targets if in_cli(t)}
        for name, targets in graph.items()
        if not in_cli(name) and name != f"{ROOT}.__main__" and any(in_cli(t) for t in targets)
    }


def test_the_shell_check_sees_an_arrow_back_up(tmp_path: Path) -> None:
    lib = tmp_path / "lib.py"
    lib.write_text("def f():\n    from accelhost.cli.common import print_json\n")
    known = {"accelhost.cli", "accelhost.cli.common", "accelhost.lib"}
    graph = {"accelhost.lib": imports_of("accelhost.lib", lib, known)}
    assert shell_imports(graph) == {"accelhost.lib": {"accelhost.cli.common"}}


def test_no_module_outside_cli_imports_the_command_line() -> None:
    """The library is usable without its shell: tables come from `accelhost.render`,
    defaults from the library, and only `accelhost.cli` parses arguments."""
    found = shell_imports(import_graph())
    assert not found, "modules importing accelhost.cli: " + "; ".join(
        f"{name} -> {', '.join(sorted(t))}" for name, t in sorted(found.items())
    )


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto what stands right under accelhost (a package, or a
    top-level module). The root itself is left out: it is the front door (lazy names),
    not a layer."""

    def part(name: str) -> str | None:
        return name.split(".")[1] if name.startswith(f"{ROOT}.") else None

    out: dict[str, set[str]] = {}
    for name, targets in graph.items():
        if (here := part(name)) is not None:
            out.setdefault(here, set()).update(
                there for t in targets if (there := part(t)) not in (None, here)
            )
    for targets in list(out.values()):
        for there in targets:
            out.setdefault(there, set())
    return out


def test_the_package_check_sees_two_packages_in_a_circle() -> None:
    graph = {
        "accelhost": {"accelhost.host.base"},
        "accelhost.host.base": {"accelhost"},
        "accelhost.hygiene.watch.react": {"accelhost.supervisor.events"},
        "accelhost.supervisor.events": {"accelhost.host.base"},
        "accelhost.supervisor.glue": {"accelhost.hygiene.preflight"},
        "accelhost.hygiene.preflight": set(),
    }
    packages = package_graph(graph)
    assert packages["hygiene"] == {"supervisor"} and packages["host"] == set()
    assert cycles(packages) == [frozenset({"hygiene", "supervisor"})]
    graph["accelhost.hygiene.watch.react"] = set()
    assert cycles(package_graph(graph)) == []


def test_no_two_packages_import_each_other() -> None:
    """Each package is a layer: `supervisor` may use `hygiene`'s preflight, or `hygiene`
    the supervisor's parts, never both (what both need goes below them, e.g. `kernel/`)."""
    found = cycles(package_graph(import_graph()))
    assert not found, "packages in a circle: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_a_lazy_name_stays_what_it_names_once_every_module_is_loaded() -> None:
    """A package's lazily loaded names (`accelhost.lazy_names`) are not submodule names: the
    import system sets a loaded submodule on its package, which would hide the name
    (`accelhost.hygiene.preflight`, a function, was once a module's name as well)."""
    checked = 0
    # every submodule loaded first, so that any one shadowing a name has done it
    for package, path in _modules().items():
        if path.name != "__init__.py":
            continue
        lazy = getattr(importlib.import_module(package), "_LAZY", None)
        if not isinstance(lazy, dict):
            continue
        submodules = {m.name for m in pkgutil.iter_modules([str(path.parent)])}
        for name, source in lazy.items():
            assert name not in submodules, f"{package}.{name} is also a submodule"
            value = getattr(importlib.import_module(package), name)
            assert value is getattr(importlib.import_module(source), name), f"{package}.{name}"
            checked += 1
    assert checked >= 20
