"""Check the shape of the `drive` package: import cycles, layers, module sizes, CLI homes.

    python tools/check_architecture.py            # report; exit 1 when a rule is broken
    python tools/check_architecture.py --graph    # also print every module's imports of drive
    python tools/check_architecture.py --packages # also print the graph between layers' units

Rules (docs/architecture.md):
  1. no import cycles between modules (a package's ``__init__`` counts as a module; importing
     ``drive.a.b`` also imports ``drive.a``);
  2. imports run one way, down the layer list below: a module imports only from its own layer or
     the layers above it, and nothing imports ``drive.cli``;
  3. no module over 400 lines;
  4. ``argparse`` only in ``drive/cli/``;
  5. an import inside a function carries a comment on its line or the line above saying why
     (an optional dependency, start-up time).

Files in a folder without ``__init__.py`` (``drive/deploy/``, ``drive/configs/``) are package data,
not modules, and are not checked.

Rules 1 and 2 count every import of a drive module, at module level, inside a function (an
import moved into a function is still a dependency) or under ``if TYPE_CHECKING:`` (a type hint
names what the module works with: a circle through one is a circle the reader has to follow). The
check reads source with ``ast``; it imports nothing.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400

# Upstream first. A module may import from its own layer and any layer above it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("drive", "drive.io", "drive.bench", "drive.plugins"),
    ("drive.sim", "drive.data", "drive.nn", "drive.gym"),
    ("drive.checkpoint", "drive.replay"),
    ("drive.train", "drive.export"),
    ("drive.policy_drivers",),
    ("drive.explain", "drive.evaluate"),
    ("drive.demo",),
    ("drive.cli",),
)


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: set[str] = field(default_factory=set)  # module-level imports of drive modules
    local_imports: set[str] = field(default_factory=set)  # the same, inside functions
    unexplained_local: list[tuple[int, str]] = field(default_factory=list)
    uses_argparse: bool = False


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.Import | ast.ImportFrom, current: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = _resolve(node, current, is_package)
    # `from drive.x import y` imports drive.x.y when y is a module, else drive.x
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def scan(path: Path, root: Path = ROOT) -> Module:
    source = path.read_text()
    lines = source.splitlines()
    name = module_name(path, root)
    mod = Module(name, path, len(lines))
    tree = ast.parse(source, str(path))
    is_package = path.name == "__init__.py"

    def visit(body: list[ast.stmt], in_function: bool) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets = _targets(node, name, is_package)
                if any(t == "argparse" or t.startswith("argparse.") for t in targets):
                    mod.uses_argparse = True
                drive_targets = {t for t in targets if t == "drive" or t.startswith("drive.")}
                if in_function:
                    mod.local_imports.update(drive_targets)
                    comment = lines[node.lineno - 1].partition("#")[2].strip()
                    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                    if not comment and not above.startswith("#"):
                        mod.unexplained_local.append((node.lineno, lines[node.lineno - 1].strip()))
                else:
                    mod.imports.update(drive_targets)
            for child_body in _bodies(node):
                visit(child_body, in_function or isinstance(node, _FUNCTIONS))

    visit(tree.body, False)
    return mod


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _bodies(node: ast.stmt) -> list[list[ast.stmt]]:
    out = []
    for attr in ("body", "orelse", "finalbody", "handlers"):
        value = getattr(node, attr, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.AST):
            if attr == "handlers":
                out.extend(h.body for h in value)
            else:
                out.append(value)
    if isinstance(node, ast.Match):
        out.extend(case.body for case in node.cases)
    return out


def _is_package_data(path: Path, package: Path) -> bool:
    """A file in a folder without ``__init__.py`` ships as data, not as a module of the package
    (``drive/deploy/run_policy.py``: a script for the car that must not import drive)."""
    return any(
        not (d / "__init__.py").is_file()
        for d in [path.parent, *path.parent.parents]
        if d.is_relative_to(package)
    )


def load(package: Path = ROOT / "drive") -> dict[str, Module]:
    modules = {}
    for path in sorted(package.rglob("*.py")):
        if _is_package_data(path, package):
            continue
        mod = scan(path, package.parent)
        modules[mod.name] = mod
    for mod in modules.values():
        mod.imports = _edges(mod, mod.imports, modules)
        mod.local_imports = _edges(mod, mod.local_imports, modules) - mod.imports
    return modules


def _edges(mod: Module, targets: set[str], modules: dict[str, Module]) -> set[str]:
    """Only edges to real modules; importing drive.a.b also runs drive.a's ``__init__``, but a
    module's own parent packages run before it (not an import it chose)."""
    edges = set()
    for target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in modules and prefix != mod.name:
                edges.add(prefix)
    parents = {".".join(mod.name.split(".")[:i]) for i in range(1, mod.name.count(".") + 1)}
    return edges - parents


def cycles(modules: dict[str, Module]) -> list[list[str]]:  # noqa: C901 -- Tarjan's SCC, one closure
    """Strongly connected components with more than one module (Tarjan). Kept whole past ruff's
    complexity limit: the recursive closure shares the index, the stack and the counter with it, and
    split they would travel as arguments through every call."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(modules[v].imports | modules[v].local_imports):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(modules):
        if v not in index:
            strong(v)
    return found


def layer_of(name: str) -> int:
    best, rank = -1, -1
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    return rank


def upward(modules: dict[str, Module]) -> list[str]:
    out = []
    for mod in modules.values():
        own = layer_of(mod.name)
        for target in sorted(mod.imports | mod.local_imports):
            if layer_of(target) > own:
                out.append(f"{mod.name} imports {target} (downstream of it)")
            elif target.startswith("drive.cli") and not mod.name.startswith("drive.cli"):
                out.append(f"{mod.name} imports {target} (nothing imports the CLI)")
    return out


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def unit(name: str) -> str:
    """The layer unit ``name`` belongs to (the longest prefix in LAYERS), ``drive`` when none."""
    units = sorted({p for layer in LAYERS for p in layer if p != "drive"}, key=len, reverse=True)
    return next((u for u in units if name == u or name.startswith(u + ".")), "drive")


def packages(modules: dict[str, Module]) -> dict[str, set[str]]:
    """The graph between layer units (``drive.io``, ``drive.nn``, ``drive.checkpoint`` ...):
    what docs/architecture.md draws."""
    graph: dict[str, set[str]] = {}
    for mod in modules.values():
        edges = {unit(t) for t in mod.imports | mod.local_imports} - {unit(mod.name), "drive"}
        graph.setdefault(unit(mod.name), set()).update(edges)
    return graph


def problems(modules: dict[str, Module]) -> dict[str, list[str]]:
    cli_home = "drive.cli"
    return {
        "import cycles": [" <-> ".join(c) for c in cycles(modules)],
        "upward imports": upward(modules),
        f"modules over {MAX_LINES} lines": [
            f"{_shown(m.path)}: {m.lines}" for m in modules.values() if m.lines > MAX_LINES
        ],
        "argparse outside drive/cli": [
            _shown(m.path)
            for m in modules.values()
            if m.uses_argparse and not (m.name == cli_home or m.name.startswith(cli_home + "."))
        ],
        "imports inside functions without a reason": [
            f"{_shown(m.path)}:{line}: {text}" for m in modules.values() for line, text in m.unexplained_local
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", action="store_true", help="print each module's drive imports")
    parser.add_argument("--packages", action="store_true", help="print the graph between layer units")
    args = parser.parse_args(argv)
    modules = load()
    if args.packages:
        for name, edges in sorted(packages(modules).items(), key=lambda kv: layer_of(kv[0])):
            print(f"{name} -> {', '.join(sorted(edges, key=layer_of))}")
    if args.graph:
        for name in sorted(modules):
            mod = modules[name]
            local = f"; in functions: {', '.join(sorted(mod.local_imports))}" if mod.local_imports else ""
            print(f"{name} ({mod.lines}) -> {', '.join(sorted(mod.imports))}{local}")
    found = problems(modules)
    bad = 0
    for rule, items in found.items():
        print(f"{rule}: {len(items)}")
        for item in items:
            print(f"  {item}")
        bad += len(items)
    print(f"{len(modules)} modules, {sum(m.lines for m in modules.values())} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
