"""The package's layers: no module imports, directly or through others, a module that imports it
back. Cycles make import order matter (a half-initialised module, an import moved into a function to
dodge it) and hide which module owns what."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


PACKAGE = Path(__file__).resolve().parent.parent / "jobtpu"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of imports under `if TYPE_CHECKING:`: they name types and never run."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            lines.update(n.lineno for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.stmt))
    return lines


def imports_of(path: Path, known: set[str], type_checking: bool = False) -> set[str]:
    """The package modules this file imports, at module level or inside functions (and, with
    `type_checking`, under `if TYPE_CHECKING:` too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skipped = set() if type_checking else _type_checking_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or node.lineno in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            modules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known]
            # `from jobtpu import timing` depends on jobtpu.timing; the package's own __init__ runs
            # for any of its modules, so it is no edge of its own then.
            targets = modules if len(modules) == len(node.names) else [target, *modules]
        found.update(t for t in targets if t in known and t != name)
    return found


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports_of(path, set(files), type_checking) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that starts and ends at the same module, or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        for dep in sorted(graph[module]):
            if (cycle := visit(dep)) is not None:
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if (cycle := visit(module)) is not None:
            return cycle
    return None


def test_no_import_cycles_among_jobtpu_modules() -> None:
    """An import under `if TYPE_CHECKING:` is a dependency too: a reader follows it as mypy does."""
    graph = import_graph(type_checking=True)
    assert len(graph) > 20 and "jobtpu.cli" in graph  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_walk_sees_function_level_and_relative_imports() -> None:
    """The check is not blind: the imports a module makes inside functions are edges too, and a cycle
    made of them is found."""
    graph = import_graph()
    assert "jobtpu.tpu.api" in graph["jobtpu.tpu.runtime"]  # `from jobtpu.tpu.api import TpuApi` inside TpuRuntime.api
    assert "jobtpu.transport.ssh" in graph["jobtpu.transport.connect"]  # `from .transport.ssh import ...` in a function
    assert find_cycle({**graph, "jobtpu.errors": {"jobtpu.cli"}}) is not None


def package_of(module: str) -> str:
    """The package a module is in (jobtpu.schema.events: jobtpu.schema); a top-level module
    (jobtpu.timing, jobtpu.cli) and the package's own __init__ (jobtpu) are nodes of their own."""
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, set[str]]:
    """The packages each package imports, through any of its modules, at module level, inside a
    function or under `if TYPE_CHECKING:` (`from jobtpu import timing` is an edge to jobtpu.timing)."""
    graph: dict[str, set[str]] = {}
    for module, deps in import_graph(type_checking=True).items():
        graph.setdefault(package_of(module), set()).update(package_of(dep) for dep in deps)
    return {package: deps - {package} for package, deps in graph.items()}


def knots(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The sets of two or more nodes of which each reaches every other (the graph's strongly
    connected components, found plainly: a few dozen packages)."""
    reached = {node: reaches(graph, node) for node in graph}
    return {frozenset({node} | {other for other in reached[node] if node in reached[other]})
            for node in graph if node in reached[node]}


def test_the_packages_form_no_knot() -> None:
    """docs/design.md §5.1: no package reaches itself back through others; a knot makes each of its
    packages depend on all the others, so none can be read, tested or moved alone."""
    graph = package_graph()
    assert len(graph) > 15 and "jobtpu.fleet" in graph  # the walk found the packages
    assert [sorted(k) for k in knots(graph)] == []
    assert knots({**graph, "jobtpu.schema": {*graph["jobtpu.schema"], "jobtpu.decide"}})  # the check is not blind


# docs/design.md §5.1: the core's packages, each importing only those before it.
CORE_ORDER = ("jobtpu.schema", "jobtpu.render", "jobtpu.decide")


def test_the_core_packages_go_one_way() -> None:
    """The types (schema/) import neither the text helpers (render/) nor the decisions (decide/), and
    the text helpers no decision: what a type's checks need lives with the types."""
    upward = sorted(f"{module} -> {dep}" for module, deps in import_graph(type_checking=True).items()
                    if package_of(module) in CORE_ORDER for dep in deps if package_of(dep) in CORE_ORDER
                    and CORE_ORDER.index(package_of(dep)) > CORE_ORDER.index(package_of(module)))
    assert upward == []


def test_tpu_flow_does_not_reach_back_into_the_pass() -> None:
    assert "jobtpu.passes.manage" not in import_graph()["jobtpu.tpu.flow"]


def test_no_module_keeps_state_in_globals_it_rebinds() -> None:
    """Per-pass and per-loop state travels as values (a pass context, a loop's kept connections):
    no `global` statement anywhere in the package."""
    found = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(node, ast.Global)]
    assert found == []


def reaches(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every package module `module` imports, directly or through others."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for dep in graph[todo.pop()] - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


FRONT = ("jobtpu.api", "jobtpu.cli", "jobtpu.commands", "jobtpu.web")


def _package_of(module: str) -> str:
    """A module's node in the package graph: its folder under jobtpu/ (`jobtpu.commands`), or the
    module itself when it sits at the top (`jobtpu.cli`)."""
    return ".".join(module.split(".")[:2])


def test_the_front_packages_form_no_knot() -> None:
    """The command implementations (commands/) sit below the front ends that call them: the command
    line (cli.py), the Python API (api.py) and the browser's (web/, with `jobtpu serve` itself), and
    no front end imports another (docs/design.md §5.1). In the graph of the packages, edges under
    `if TYPE_CHECKING:` and inside functions included, no cycle passes through one of the four."""
    packages: dict[str, set[str]] = {}
    for module, deps in import_graph(type_checking=True).items():
        packages.setdefault(_package_of(module), set()).update(_package_of(d) for d in deps)
    for node, deps in packages.items():
        deps.discard(node)
    knots = {front: sorted(p for p in FRONT if p in reaches(packages, front) and front in reaches(packages, p))
             for front in FRONT}
    assert {front: knot for front, knot in knots.items() if knot} == {}
    assert not {"jobtpu.web", "jobtpu.api", "jobtpu.cli"} & reaches(packages, "jobtpu.commands")
    assert not ({"jobtpu.api", "jobtpu.web"} & packages["jobtpu.cli"] or {"jobtpu.cli", "jobtpu.web"} & packages["jobtpu.api"]
                or {"jobtpu.api", "jobtpu.cli"} & packages["jobtpu.web"])


@pytest.mark.parametrize("module", ["jobtpu.decide.tpu_plan", "jobtpu.decide.tpu_outcomes", "jobtpu.decide.settle",
                                    "jobtpu.decide.tpu_group"])
def test_the_tpu_rules_do_no_io(module: str) -> None:
    """The TPU machines' decisions, and the settling of what a pass's acts reported, are pure: no
    session, no connection to a worker, no pass."""
    reached = reaches(import_graph(), module)
    assert not {m for m in reached if m.startswith(("jobtpu.passes", "jobtpu.transport", "jobtpu.tpu.flow"))}


def test_no_module_is_over_400_lines() -> None:
    """A module a reader can hold in mind: one job each, none over 400 lines."""
    long = {str(path.relative_to(PACKAGE.parent)): n for path in sorted(PACKAGE.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > 400}
    assert long == {}


def test_the_design_s_module_map_names_every_module_and_no_other() -> None:
    """docs/design.md §5 is one row per module: a newcomer's map of the package stays the package."""
    design = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    section = design.split("## 5. Module map", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `")}
    modules = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts}
    assert rows == modules, {"missing from the map": sorted(modules - rows), "no such module": sorted(rows - modules)}


FILE_SUFFIXES = {"py", "json", "jsonl", "lock", "sh", "md", "toml", "bak", "key", "pub"}


def _defines(text: str, name: str) -> bool:
    """Whether a module's source defines or imports `name` (a function, class, constant or field)."""
    return re.search(rf"^\s*(def|class) {name}\b|^\s*(\w+, )*{name}(, \w+)*\s*[:=]|import [^\n]*\b{name}\b",
                     text, re.M) is not None


def test_the_design_names_only_code_that_exists() -> None:
    """docs/design.md's code references (`decide/tpu_plan.decide_machine`, `scripts.probe_script`,
    `bring_logs_home`) name what the package has: a renamed or removed function leaves no stale
    name behind. A `module.name` is looked up in the module it names (by path, by file name, or by
    the alias the code imports it as); a bare snake_case name must occur in the package, its shell
    or its tests."""
    design = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    sources = {str(p.relative_to(PACKAGE).with_suffix("")): p.read_text(encoding="utf-8")
               for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    aliases: dict[str, set[str]] = {}
    for text in sources.values():
        for where, name, alias in re.findall(r"from jobtpu\.([\w.]+) import (\w+) as (\w+)", text):
            aliases.setdefault(alias, set()).add(f"{where.replace('.', '/')}/{name}")
    everything = "\n".join([*sources.values(), *(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.sh")),
                            *(p.read_text(encoding="utf-8") for p in PACKAGE.parent.joinpath("tests").glob("*.py"))])
    stale = []
    for token in sorted(set(re.findall(r"`([^`\s]+)`", design))):
        token = token.removesuffix("()")
        if dotted := re.fullmatch(r"([a-z_/]+)\.([A-Za-z_]\w*)", token):
            module, name = dotted.groups()
            if name in FILE_SUFFIXES or module in packages:  # a file, or a key of machines.json's `sheet`
                continue
            found = {m for m in sources if m == module or m.endswith(f"/{module}")} | \
                {m for m in aliases.get(module, ()) if m in sources}
            if found and not any(_defines(sources[m], name) for m in found):
                stale.append(token)
        elif re.fullmatch(r"_?[a-z][a-z0-9]*(_[a-z0-9]+)+", token) and not re.search(rf"\b{token}\b", everything):
            stale.append(token)
    assert stale == []


def layer_table() -> list[tuple[str, list[str], set[str]]]:
    """docs/design.md §5.1, bottom layer first: each layer's name, its entries (`render/text.py`, `home/`)
    and the layers it may import."""
    design = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    section = design.split("### 5.1 Layers", 1)[1].split("\n## ", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| layer ")]
    return [(name, re.findall(r"`([^`]+)`", entries), set(re.findall(r"[a-z]+", may)) - {"nothing"})
            for name, entries, may in rows]


def layer_of(module: str, table: list[tuple[str, list[str], set[str]]]) -> str | None:
    """The layer of the most specific entry naming a module: the module itself, else its package."""
    parts = module.split(".")[1:]
    path = "/".join(parts) + ".py"
    if not (PACKAGE / path).exists():  # a package: its __init__.py
        path = "/".join([*parts, "__init__.py"])
    package = path.split("/")[0] + "/" if "/" in path else None
    by_entry = {entry: name for name, entries, _ in table for entry in entries}
    return by_entry.get(path) or (by_entry.get(package) if package else None)


def _names_its_package_only(module: str) -> bool:
    """A package's __init__.py that holds its docstring and nothing else: importing one of its modules
    runs it, but it brings nothing with it."""
    path = PACKAGE.parent.joinpath(*module.split("."), "__init__.py")
    if not path.exists():
        return False
    body = ast.parse(path.read_text()).body
    return all(isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) or
               isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__" for stmt in body)


def layer_violations() -> list[str]:
    """Every import of a module from a layer its own layer may not import."""
    table = layer_table()
    may = {name: allowed for name, _, allowed in table}
    graph = import_graph()
    layers = {module: layer_of(module, table) for module in graph}
    return sorted(f"{module} ({layers[module]}) -> {dep} ({layers[dep]})"
                  for module, deps in graph.items() for dep in deps
                  if layers[dep] != layers[module] and layers[dep] not in may[str(layers[module])]
                  and not _names_its_package_only(dep))


def test_the_layer_table_points_one_way_and_places_every_module() -> None:
    table = layer_table()
    names = [name for name, _, _ in table]
    assert names[:2] == ["base", "core"] and "pass" in names  # the walk found the table
    for index, (name, _, allowed) in enumerate(table):
        assert allowed <= set(names[:index]), f"layer {name} may import a layer above it"
    unplaced = sorted(module for module in import_graph() if layer_of(module, table) is None)
    assert unplaced == []


def test_every_package_is_in_one_layer() -> None:
    """docs/design.md §5.1: the table places whole packages (and the top-level modules), never one
    module of a package apart from its folder, so that the folders' graph points one way too."""
    apart = [entry for _, entries, _ in layer_table() for entry in entries if "/" in entry.rstrip("/")]
    assert apart == []
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    placed = {entry.rstrip("/") for _, entries, _ in layer_table() for entry in entries if entry.endswith("/")}
    assert folders == placed


def test_every_import_goes_down_the_layers() -> None:
    """docs/design.md §5.1: the core (types, decisions, fit, placement, TPU plans and outcomes)
    imports nothing that reads a file, opens a socket or runs a process; the loaders live with the
    I/O; remote/ and tpu/ never reach the pass; home/ never reaches a decision's code or a view."""
    assert layer_violations() == []


def _kind_compares(path: Path) -> list[int]:
    """Lines that ask a machine its kind: a comparison of a `kind` with one of the kinds' words or a
    MachineKind member, or the `is_tpu` that stood for one."""
    kinds = {"local", "ssh", "tpu"}
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "is_tpu":
            found.append(node.lineno)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            words = {n.value for side in sides for n in ast.walk(side) if isinstance(n, ast.Constant)}
            members = any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "MachineKind"
                          for side in sides for n in ast.walk(side))
            if members or (words & kinds and any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides)):
                found.append(node.lineno)
    return found


# What may read a machine's kind (docs/design.md §5.1): the drivers, the properties that name what
# differs, and the loader's checks of each kind's keys.
READS_THE_KIND = {"fleet/drivers.py", "schema/fleet.py", "home/machines.py"}


def test_nothing_but_the_drivers_and_the_loader_asks_a_machine_its_kind() -> None:
    """docs/design.md §5.1: everywhere else asks the machine's driver (I/O) or a named property
    (`cloud_node`, `runs_here`, ...): a new kind of machine changes those places, not every branch."""
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             if str(path.relative_to(PACKAGE)) not in READS_THE_KIND for line in _kind_compares(path)]
    assert found == []



def test_the_package_defines_no_dataclass() -> None:
    """docs/design.md §8 (values are Structs): a dataclass's class costs a command about 0.5 ms at
    import, a msgspec Struct's about 0.01 ms; a pass used to load 51 of them."""
    found = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.ClassDef)
             and any("dataclass" in ast.unparse(d) for d in node.decorator_list)]
    assert found == []


def test_nothing_calls_dataclasses_helpers_on_a_struct() -> None:
    """With no dataclass in the package, `dataclasses.replace`, `asdict` or `astuple` on one of its
    values raises at run time (a pass once pinned a webhook so): msgspec.structs has each of them."""
    found = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Import) and any(a.name == "dataclasses" for a in node.names)
             or isinstance(node, ast.ImportFrom) and node.module == "dataclasses"]
    assert found == []


def test_only_the_loader_imports_msgspec() -> None:
    """docs/design.md §9.2: msgspec is loaded once, by schema/msgspec_lib.py, without typing_extensions;
    a module that imported it first would load typing_extensions (8 ms of every command) again."""
    found = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "msgspec_lib.py"
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "msgspec" for a in node.names)
             or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "msgspec"]
    assert found == []


def test_no_schema_module_postpones_its_annotations() -> None:
    """docs/design.md §9.3: msgspec evaluates a Struct's string annotations when a decoder is first
    built for it (Decoder(State) 1.8 ms from strings, 0.6 from values); the schema's types keep theirs
    as values, every module of the package, so none is missed when a new decoder appears."""
    found = [str(path.relative_to(PACKAGE.parent)) for path in sorted((PACKAGE / "schema").glob("*.py"))
             if "from __future__ import annotations" in path.read_text()]
    assert found == []


def test_no_named_tuple_sits_under_postponed_annotations() -> None:
    """docs/design.md §9.3: typing.NamedTuple compiles every string annotation of its fields when
    the class is made (a ForwardRef each, 52 in a submit once, about 1 ms); a module that defines one
    keeps its annotations as values."""
    found = [str(path.relative_to(PACKAGE.parent)) for path in sorted(PACKAGE.rglob("*.py"))
             if "from __future__ import annotations" in (text := path.read_text())
             and re.search(r"^class \w+\((typing\.)?NamedTuple\)", text, re.M)]
    assert found == []


# The public API's own names, which mirror the core's on purpose (jobtpu.Home, jobtpu.Job).
SHARED_CLASS_NAMES = {"Home", "Job"}


def test_no_two_classes_of_the_package_share_a_name() -> None:
    """A name names one thing: two classes called alike (two `UsageError`, three `MachineRow`) make a
    reader, an import and a grep pick the wrong one. Private names (`_Keys`) are the module's own."""
    seen: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                seen.setdefault(node.name, []).append(str(path.relative_to(PACKAGE.parent)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1 and name not in SHARED_CLASS_NAMES}
    assert clashes == {}


def test_the_tests_readme_maps_every_command_and_every_test_file() -> None:
    """tests/README.md is where a maintainer looks for the tests of a command or a behaviour: it
    names every test file, and every command word has its row."""
    from jobtpu.commands.table import ROWS

    text = (PACKAGE.parent / "tests" / "README.md").read_text()
    files = sorted(p.name for p in (PACKAGE.parent / "tests").glob("test_*.py"))
    assert [f for f in files if f"| `{f}` |" not in text] == []
    assert [w for w in sorted(ROWS) if f"| `{w}` |" not in text] == []


# The TPU driver's own part (docs/design.md §5.1): the driver, tpu/, and the Reach that holds each
# kind's runtime state for its driver without reading it.
TPU_DRIVER_PART = ("fleet/drivers.py", "tpu/")
TPU_RUNTIME_NAMES = {"tpu_runtime", "TpuRuntime", "tpu_api", "runtime"}


def _runtime_reads(path: Path) -> list[int]:
    """Lines that name the TPU runtime state or ask a session for a kind's runtime state."""
    def named(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return node.id if node.id != "runtime" else None
        return node.attr if isinstance(node, ast.Attribute) else node.name if isinstance(node, ast.alias) else None

    return [getattr(node, "lineno", 0) for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if named(node) in TPU_RUNTIME_NAMES]


def test_the_tpu_runtime_state_is_read_only_in_the_tpu_driver_s_part() -> None:
    """A TPU's nodes, worker addresses and API client are its driver's state in a session
    (tpu/runtime.py): the rest of the package asks the driver (endpoints, internal addresses,
    doctor's checks) or tpu/ (its flow, repairs, operations), so a new kind adds a driver and its
    own part, not a field to the connection layer."""
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             if not str(path.relative_to(PACKAGE)).startswith(TPU_DRIVER_PART)
             and str(path.relative_to(PACKAGE)) != "fleet/reach.py" for line in _runtime_reads(path)]
    assert found == []


def test_the_connection_layer_keeps_no_kind_s_runtime_state() -> None:
    """fleet/reach.py's Reach holds each kind's runtime state for its driver, as one opaque value
    per kind: no TPU field (nodes, addresses, an API client) of its own."""
    tree = ast.parse((PACKAGE / "fleet" / "reach.py").read_text())
    reach = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Reach")
    fields = {n.attr for n in ast.walk(reach) if isinstance(n, ast.Attribute)
              and isinstance(n.value, ast.Name) and n.value.id == "self" and isinstance(n.ctx, ast.Store)}
    methods = {n.name for n in reach.body if isinstance(n, ast.FunctionDef)}
    assert not (fields | methods) & {"nodes", "addresses", "_tpu", "tpu_api"}
    assert not {m for m in import_graph()["jobtpu.fleet.reach"] if m.startswith("jobtpu.tpu")}


# Who may ask a machine whether the TPU API owns it: the pure core (it cannot ask a driver, which does
# I/O), the loader, and the TPU driver's part. Everything else asks the machine's driver.
READS_CLOUD_NODE = ("schema/", "decide/", "home/machines.py", *TPU_DRIVER_PART)


def test_only_the_core_the_loader_and_the_tpu_driver_ask_whether_a_machine_is_a_cloud_node() -> None:
    """docs/design.md §5.1: the pass, the commands, the views, the sheet and doctor ask the driver
    (what it shows, how it is brought back, what doctor checks): a new kind the API brings back is a
    driver and its own part, not a branch in each of them."""
    found = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path in sorted(PACKAGE.rglob("*.py"))
             if not str(path.relative_to(PACKAGE)).startswith(READS_CLOUD_NODE)
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Attribute) and node.attr == "cloud_node"]
    assert found == []


def test_the_pass_reaches_a_kind_s_life_cycle_only_through_its_driver() -> None:
    """A pass observes, brings back and carries out a machine's steps through its driver
    (`observe`, `bring_back`, `carry_out`): no module of passes/ imports tpu/."""
    graph = import_graph()
    found = sorted(f"{module} -> {dep}" for module, deps in graph.items() if module.startswith("jobtpu.passes")
                   for dep in deps if dep.startswith("jobtpu.tpu"))
    assert found == []
