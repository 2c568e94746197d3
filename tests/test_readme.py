"""The README and the docs say what the commands do: each shown command line is checked.

A demanding reader copies the `accelhost ...` lines out of README.md and docs/*.md. Three
promises are checked here, on every fenced code block:
- every option a shown command uses exists in that command's `--help` (no stale flag);
- the read-only ones (`topo`, `plan`, `snapshot`, `doctor --snapshot`, `--help`) run, in a
  scratch directory, block after block as a reader would (`plan --json > plan.json` writes
  the file the next line reads), and exit as shown;
- where a `$ accelhost ...` line is followed by its output and replays a bundled example,
  the output is exactly what the command prints now.
Nothing that binds, kills, cleans or supervises is run here (those have their own tests).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import accelhost
from accelhost.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
# The pages this check owns; docs/e2e.md, hygiene.md and run.md are checked by their owners'
# tests, but their options are still checked against --help below.
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Commands that only read (the machine or a recording) and write at most a file in the
# current directory: safe to run from a test on any machine.
READ_ONLY = {"topo", "plan", "snapshot"}
TIMEOUT = 120


@dataclass(frozen=True)
class Shown:
    """One `accelhost ...` command line of a code block, with its shown output if any."""

    page: str
    line: int
    argv: tuple[str, ...]  # the words after `accelhost`, up to a redirection
    redirect: str | None  # `> FILE`
    output: str | None  # the lines after a `$ ` prompt, up to the next prompt
    env: bool  # preceded by VAR=value assignments
    pipe: bool  # feeds or is fed by another command (`|`, `$(...)`)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}: accelhost {' '.join(self.argv)}"


def _blocks(text: str) -> list[tuple[int, list[str]]]:
    """The fenced code blocks of a page (shell, console or none), with their first line."""
    blocks: list[tuple[int, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^\s*```(\w*)\s*$", lines[i])
        if fence is None:
            i += 1
            continue
        lang, start, body = fence.group(1), i + 2, []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        i += 1
        if lang in ("", "sh", "shell", "console", "bash"):
            blocks.append((start, body))
    return blocks


def _logical_lines(body: list[str], start: int) -> list[tuple[int, str]]:
    """Join backslash continuations; keep the number of each command's first line."""
    joined: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for offset, raw in enumerate(body):
        if pending is not None:
            pending = (pending[0], pending[1] + " " + raw.strip())
        else:
            pending = (start + offset, raw)
        if pending[1].rstrip().endswith("\\"):
            pending = (pending[0], pending[1].rstrip()[:-1])
            continue
        joined.append(pending)
        pending = None
    if pending is not None:
        joined.append(pending)
    return joined


COMMAND = re.compile(
    r"^(?P<prompt>\$ )?(?P<env>(?:[A-Z_]+=\S+ )*)accelhost "
    rf"(?P<rest>(?:{'|'.join(map(re.escape, COMMANDS))}|-)(?:\s.*)?)$"
)


def _parse(page: str, number: int, text: str, output: str | None) -> Shown:
    match = COMMAND.match(text.strip())
    assert match is not None
    words = shlex.split(match.group("rest"), comments=True)
    argv: list[str] = []
    redirect = None
    pipe = "$(" in match.group("rest") or "`" in match.group("rest")
    for i, word in enumerate(words):
        if word in ("|", "&", "&&", ";"):
            pipe = pipe or word == "|"
            break
        if word == ">":
            redirect = words[i + 1]
            break
        argv.append(word)
    return Shown(page, number, tuple(argv), redirect, output, bool(match.group("env")), pipe)


def shown_commands(path: Path) -> list[list[Shown]]:
    """The commands of each code block of a page, in order."""
    page = str(path.relative_to(ROOT))
    result: list[list[Shown]] = []
    for start, body in _blocks(path.read_text(encoding="utf-8")):
        lines = _logical_lines(body, start)
        block: list[Shown] = []
        # in a transcript (`$ ` prompts) only the prompted lines are commands: the rest is
        # output, some of which starts with "accelhost" too
        prompted = any(text.startswith("$ ") for _, text in lines)
        for i, (number, text) in enumerate(lines):
            if COMMAND.match(text.strip()) is None or (prompted and not text.startswith("$ ")):
                continue
            output = None
            if text.lstrip().startswith("$ "):
                rest = []
                for _, after in lines[i + 1 :]:
                    if after.startswith("$ "):
                        break
                    rest.append(after)
                output = "\n".join(rest).rstrip("\n")
            block.append(_parse(page, number, text, output))
        if block:
            result.append(block)
    return result


ALL = [shown for path in DOCS for block in shown_commands(path) for shown in block]


def _accelhost(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", LC_ALL="C")
    return subprocess.run(
        [sys.executable, "-m", "accelhost", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _command_words(argv: tuple[str, ...]) -> list[str]:
    """`bench bind --cpus 1` -> ["bench", "bind"]: the (sub)command whose --help applies."""
    words = []
    for word in argv:
        if word.startswith("-") or len(words) == 2:
            break
        words.append(word)
    if words and words[0] != "bench":
        words = words[:1]
    return words


@cache
def _help(words: tuple[str, ...]) -> str:
    res = _accelhost([*words, "--help"], ROOT)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_pages_show_commands() -> None:
    """The extraction itself works: the README's main commands are all found."""
    readme = {s.argv[0] for s in ALL if s.page == "README.md" and s.argv}
    assert {"topo", "plan", "snapshot", "bind", "exec", "verify", "unbind"} <= readme
    assert {"doctor", "clean", "watch", "run", "bench"} <= readme
    assert len(ALL) > 60


@pytest.mark.parametrize("shown", ALL, ids=[s.where for s in ALL])
def test_every_shown_option_exists(shown: Shown) -> None:
    words = _command_words(shown.argv)
    assert words, f"{shown.where}: no command"
    text = _help(tuple(words))
    options = []
    for word in shown.argv[len(words) :]:
        if word == "--":
            break  # what follows is the user's own command
        if word.startswith("--"):
            options.append(word.split("=", 1)[0])
    missing = [o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text)]
    assert not missing, f"{shown.where}: {missing} not in `accelhost {' '.join(words)} --help`"


def _safe(shown: Shown) -> bool:
    """Read-only and self-contained: a command this test may run anywhere."""
    if shown.env or shown.pipe or not shown.argv:
        return False
    if "--help" in shown.argv:
        return True
    if "--pci" in shown.argv:
        return False  # names PCI addresses of the page's host, not of this one
    if shown.argv[0] in READ_ONLY:
        return True
    return shown.argv[0] == "doctor" and "--snapshot" in shown.argv


@cache
def _this_host_has_accelerators() -> bool:
    res = _accelhost(["topo", "--json"], ROOT)
    assert res.returncode == 0, res.stderr
    return bool(json.loads(res.stdout).get("accelerators"))


def _expected_status(shown: Shown, cwd: Path) -> int:
    """What the page says (or the rules it states say) the command exits with.

    Shown output decides when there is some: a refusal `accelhost: cannot plan` is 1, a
    doctor table with a FAIL is 1 (the Node Problem Detector contract), else 0. A plan of
    this machine (live, or recorded here with `snapshot`) is refused where it has no
    accelerator, as the README says `plan` does.
    """
    if shown.output is not None:
        if "accelhost: cannot plan" in shown.output:
            return 1
        if shown.argv[0] == "doctor" and re.search(r"^\S+\s+FAIL\s", shown.output, re.M):
            return 1
        return 0
    recorded_here = any(
        a == "--snapshot" and not b.startswith("example:") and (cwd / b).exists()
        for a, b in zip(shown.argv, shown.argv[1:], strict=False)
    )
    live = "--snapshot" not in shown.argv
    if shown.argv[0] == "plan" and (live or recorded_here) and not _this_host_has_accelerators():
        return 1
    return 0


def _replays_example(shown: Shown) -> bool:
    return any(a.startswith("example:") for a in shown.argv)


RUNNABLE = [block for path in DOCS for block in shown_commands(path) if any(map(_safe, block))]


@pytest.mark.parametrize("block", RUNNABLE, ids=[f"{b[0].page}:{b[0].line}" for b in RUNNABLE])
def test_read_only_commands_run_as_shown(block: list[Shown], tmp_path: Path) -> None:
    for shown in block:
        if not _safe(shown):
            continue
        if shown.output is not None and "accelhost: cannot plan" in shown.output:
            continue  # a refusal of another host: checked on a recording below
        argv = list(shown.argv)
        if argv[0] == "snapshot":
            argv = [a if not a.endswith(".json") else str(tmp_path / Path(a).name) for a in argv]
        res = _accelhost(argv, tmp_path)
        if shown.redirect is not None:
            (tmp_path / Path(shown.redirect).name).write_text(res.stdout)
        assert res.returncode == _expected_status(shown, tmp_path), (
            f"{shown.where}: exit {res.returncode}\n{res.stdout}{res.stderr}"
        )
        if shown.output is not None and _replays_example(shown):
            got = "\n".join(line.rstrip() for line in (res.stdout + res.stderr).splitlines())
            want = "\n".join(line.rstrip() for line in shown.output.splitlines())
            assert got == want, f"{shown.where}: output differs from the page"


def test_refusal_shown_in_readme_is_what_a_host_without_workers_gets(tmp_path: Path) -> None:
    """README: `$ accelhost plan` is refused when no process runs on a visible NPU yet.

    Made real from the bundled A2 recording (its worker runs on NPU 0) by making NPU 1, which
    runs nothing, the visible one: the refusal must be exactly the README's line, exit 1,
    and naming the NPUs with `--device`, as the hint says, must then plan.
    """
    (shown,) = [
        s
        for s in ALL
        if s.page == "README.md" and s.output and "accelhost: cannot plan" in s.output
    ]
    assert shown.argv == ("plan",)
    example = Path(accelhost.__file__).parent / "data/examples/a2-192cpu-8npu-sees-npu0.json"
    data = json.loads(example.read_text(encoding="utf-8"))
    data["env"]["ASCEND_RT_VISIBLE_DEVICES"] = "1"
    host = tmp_path / "idle.json"
    host.write_text(json.dumps(data), encoding="utf-8")
    res = _accelhost(["plan", "--snapshot", str(host)], tmp_path)
    assert res.returncode == 1
    assert (res.stdout + res.stderr).strip() == (shown.output or "").strip()
    named = _accelhost(["plan", "--snapshot", str(host), "--device", "0,2"], tmp_path)
    assert named.returncode == 0, named.stderr
    assert named.stdout.startswith("device type A2, mode topo_affinity, devices 0,2")


def test_help_imports_nothing_heavy() -> None:
    """`accelhost --help` (and a command's --help) stays cheap: no metrics, torch, pipeline,
    hygiene checks, applier or supervisor are imported to print it."""
    code = (
        "import sys, runpy\n"
        "sys.argv = ['accelhost'] + sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_module('accelhost', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('prometheus_client', 'torch', 'psutil', 'accelhost.pipeline',\n"
        "         'accelhost.hygiene.doctor.checks', 'accelhost.hygiene.facts.host',\n"
        "         'accelhost.hygiene.clean.cleaner', 'accelhost.hygiene.watch.watcher',\n"
        "         'accelhost.apply.build', 'accelhost.apply.execute',\n"
        "         'accelhost.supervisor.loop', 'accelhost.bench.bind_runner',\n"
        "         'accelhost.readers', 'concurrent.futures')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)), file=sys.stderr)\n"
    )
    for argv in (["--help"], ["doctor", "--help"], ["bench", "bind", "--help"]):
        res = subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert "usage: accelhost" in res.stdout, res.stderr
        assert res.stderr.strip().splitlines()[-1] == "[]", (argv, res.stderr)


def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_names_every_bundled_example() -> None:
    examples = Path(accelhost.__file__).parent / "data" / "examples"
    bundled = {p.stem for p in examples.glob("*.json")}
    listing = _readme().split("replays a bundled one:", 1)[1].split("A snapshot is bounded", 1)[0]
    named = {n for n in re.findall(r"`([^`]+)`", listing) if "/" not in n and " " not in n}
    assert named == bundled


def _layout_paths() -> list[str]:
    """The paths of the README's layout table (a cell may name several: `a.py`, `b.py`)."""
    section = _readme().split("## Layout", 1)[1]
    paths: list[str] = []
    for row in re.findall(r"^\| (`[^|]+`) \|", section, re.M):
        names = re.findall(r"`([^`]+)`", row)
        base = names[0].rsplit("/", 1)[0] if "/" in names[0].rstrip("/") else ""
        for name in names:
            paths.append(name if "/" in name else f"{base}/{name}")
    return paths


def test_layout_table_lists_every_package_and_module_and_nothing_else() -> None:
    paths = _layout_paths()
    missing_on_disk = [p for p in paths if not (ROOT / p).exists()]
    assert not missing_on_disk, f"the README lists what does not exist: {missing_on_disk}"
    src = ROOT / "src" / "accelhost"
    listed = {p.rstrip("/") for p in paths}
    for entry in sorted(src.iterdir()):
        if entry.name.startswith(("_", ".")) and entry.name != "__init__.py":
            continue
        if entry.is_dir() and not (entry / "__init__.py").exists() and entry.name != "data":
            continue
        if entry.suffix not in (".py", "") or entry.name == "py.typed":
            continue
        rel = str(entry.relative_to(ROOT))
        covered = rel in listed or any(rel.startswith(p + "/") for p in listed)
        assert covered, f"{rel} is not in the README's layout table"


def test_every_package_says_what_lives_where() -> None:
    """Each package's docstring names the modules beside it (none missing, none gone)."""
    src = ROOT / "src" / "accelhost"
    for init in sorted(src.rglob("__init__.py")):
        package = init.parent
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert doc, f"{init} has no docstring"
        modules = sorted(
            p.stem for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")
        )
        subpackages = sorted(p.name for p in package.iterdir() if (p / "__init__.py").exists())
        unnamed = [
            m for m in modules + subpackages if not re.search(rf"`(?:[\w.]+\.)?{m}[`/.(]", doc)
        ]
        assert not unnamed, f"{init.relative_to(ROOT)} does not say what {unnamed} hold"


def _python_blocks(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)


PY_PAGES = [p for p in DOCS if _python_blocks(p)]


@pytest.mark.parametrize("path", PY_PAGES, ids=[p.name for p in PY_PAGES])
def test_python_shown_uses_real_names_and_keywords(path: Path) -> None:
    """Every `accelhost.NAME(...)` / `from accelhost.X import Y` in a page's Python exists,
    and takes the keywords shown (also those named in a comment: `# device_type=, ...`)."""
    import importlib
    import inspect

    for block in _python_blocks(path):
        tree = ast.parse(block.replace("...\n", "pass\n"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("accelhost"):
                assert node.module is not None
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{path.name}: {node.module}.{alias.name}"
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "accelhost"
            ):
                continue
            func = getattr(accelhost, node.func.attr)
            params = inspect.signature(func).parameters
            for kw in node.keywords:
                assert kw.arg in params, f"{path.name}: accelhost.{node.func.attr}({kw.arg}=)"
        for line in block.splitlines():
            call = re.match(r".*accelhost\.(\w+)\(.*#(.*)$", line)
            if call is None:
                continue
            params = inspect.signature(getattr(accelhost, call.group(1))).parameters
            comment = re.sub(r"\"[^\"]*\"|'[^']*'", "", call.group(2))
            for name in re.findall(r"(\w+)=", comment):
                assert name in params, f"{path.name}: accelhost.{call.group(1)}({name}=)"


def test_python_on_bundled_examples_runs_as_shown() -> None:
    """docs/gpu.md's snippet reads a bundled example: it runs, and prints what it shows."""
    (block,) = [b for b in _python_blocks(ROOT / "docs" / "gpu.md") if "example:" in b]
    *code, last = block.strip().splitlines()
    scope: dict[str, object] = {}
    exec("\n".join(code), scope)  # noqa: S102 - the page's own code, on a bundled example
    expr, shown = last.split("#", 1)
    value = eval(expr, scope)  # noqa: S307
    want = [int(n) for n in re.findall(r"\d+", shown)]
    assert list(value)[:1] + list(value)[13:15] + list(value)[-1:] == want


# Options of other programs that the pages quote (vLLM, torchrun, nvidia-smi, docker,
# irqbalance, mypy).
FOREIGN_OPTIONS = {
    "--additional-config",
    "--entrypoint",  # docker run
    "--ipc",  # docker run
    "--api-key",
    "--gpu-memory-utilization",
    "--model",
    "--port",
    "--numa-binding",
    "--strict",
    "--batch-size",
    "--dataset-name",
    "--input-len",
    "--max-concurrency",
    "--num-iters",
    "--num-iters-warmup",
    "--num-prompts",
    "--output-len",
    "--random-input-len",
    "--random-output-len",
    "--banirq",
    "--privileged",
    "--format",
    "--query-gpu",
}
OWN_PAGES = [
    ROOT / "README.md",
    *(ROOT / "docs" / n for n in ("bench.md", "bind.md", "gpu.md", "pipeline.md")),
]


def test_every_option_named_in_prose_exists() -> None:
    """An option named anywhere on the README or these pages, in a command or in a
    sentence, is an option of some accelhost command (or a quoted program's)."""
    known: set[str] = set()
    for words in [(c,) for c in COMMANDS if c != "bench"] + [
        ("bench", "pipeline"),
        ("bench", "bind"),
    ]:
        known |= set(re.findall(r"--[a-z][a-z0-9-]*", _help(words)))
    for page in OWN_PAGES:
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", page.read_text(encoding="utf-8")))
        unknown = sorted(named - known - FOREIGN_OPTIONS)
        assert not unknown, f"{page.name} names options no command has: {unknown}"


def test_every_repository_path_named_exists() -> None:
    """Files and folders of the checkout that the pages name (`contrib/...`, `tests/...`,
    benchmarks, links to other pages) are there."""
    pattern = r"(?<![\w/.-])((?:src|tests|benchmarks|contrib|docs)/[\w./-]*[\w/])"
    for page in OWN_PAGES:
        named = set(re.findall(pattern, page.read_text(encoding="utf-8")))
        missing = sorted(p for p in named if not (ROOT / p).exists())
        assert not missing, f"{page.name} names paths that do not exist: {missing}"


def _is_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a name under a module that is no package
        return False


def test_every_dotted_name_named_resolves() -> None:
    """`accelhost.apply.driver`, `accelhost.host.read_once`, ...: modules and names the pages
    point a reader to exist (a module, or an attribute of one)."""
    import importlib

    for page in OWN_PAGES:
        for name in set(re.findall(r"\baccelhost(?:\.[A-Za-z_]\w*)+", page.read_text("utf-8"))):
            parts = name.split(".")
            # the longest prefix that is a module (found without importing it: a module
            # that needs an optional dependency, such as pipeline.torch, exists all the same)
            cut = 1
            while cut < len(parts) and _is_module(".".join(parts[: cut + 1])):
                cut += 1
            if cut == len(parts):
                continue
            obj: object = importlib.import_module(".".join(parts[:cut]))
            for attr in parts[cut:]:
                assert hasattr(obj, attr), f"{page.name}: {name} does not resolve"
                obj = getattr(obj, attr)
