"""The catalog of inference engines: which processes are frontends, which are children.

Why two kinds: an engine's *frontend* (`vllm serve`, `python -m sglang.launch_server`) is
what a person or a script starts; it may outlive its launcher (`nohup ... &`) and still be a
healthy server. Its *children* (vLLM's `VLLM::EngineCore`, SGLang's `sglang::scheduler`)
exist only under a frontend: one that hangs under PID 1, a subreaper or a shell has lost it
and holds device memory for nobody. The orphan rule (rules.py) judges children only.

One catalog, documented in docs/hygiene.md, extended (never replaced) from the command line
(`--engine-frontend`, `--engine-child`, `--shm-name`) or a JSON file (`--engine-catalog`).
Patterns are regular expressions searched in the full command line (`/proc/PID/cmdline`,
arguments joined by spaces: `comm` is cut at 15 characters); shm names are globs.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelhost.errors import UsageError

CUSTOM = "custom"
_MEMO_MAX = 16384
# What a regex's literal text may hold: a character outside these, unescaped, is syntax.
_PLAIN = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-:/=,@%!'\"<>~`"
)
_QUANTIFIERS = frozenset("?*+{")
_LISTS = ("frontends", "children", "shm_names")  # an engine's lists, in field order


def required_literal(pattern: str) -> str | None:
    """The longest run of literal text every match of `pattern` contains, or None when
    there is none to be sure of (a top-level `|`, inline flags, nothing literal outside
    groups and classes).

    Why: Python's `re` tries a pattern at every position of a command line (14 us for
    one pattern on a 530-character line, 200 us for the catalog's), and a doctor asks
    about every process; a substring test first rules out nearly every line for less
    than a microsecond. Conservative by construction: it reads only the pattern's top
    level, stops a run at any syntax, and drops a run's last character when a quantifier
    follows it."""
    if "(?" in pattern.replace("(?:", ""):  # inline flags, lookarounds: no guarantee
        return None
    runs: list[str] = []
    run: list[str] = []
    depth, i = 0, 0

    def end(quantified: bool = False) -> None:
        if quantified and run:
            run.pop()
        if run:
            runs.append("".join(run))
        run.clear()

    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt in "xuUN01234567":
                return None  # a character by its code: not worth reading
            if depth == 0 and not nxt.isalnum():
                run.append(nxt)  # an escaped punctuation character is itself
            else:
                end()  # \b, \s, \d, back-references: no literal
            i += 2
            continue
        if c == "[":  # a class: skip to its end (a leading ] or ^] belongs to it)
            end()
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            j += pattern[j : j + 1] == "]"
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        if c == "(":
            end()
            depth += 1
        elif c == ")":
            end()
            depth -= 1
        elif c == "|":
            if depth == 0:
                return None
            end()
        elif c in _QUANTIFIERS:
            end(quantified=True)
            if c == "{":  # {m,n}: its digits are no text
                close = pattern.find("}", i)
                i = len(pattern) if close < 0 else close
        elif depth == 0 and c in _PLAIN:
            run.append(c)
        else:
            end()  # ^ $ . and anything inside a group
        i += 1
    end()
    best = max(runs, key=len, default="")
    return best or None


@dataclass(frozen=True)
class Engine:
    name: str
    frontends: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    shm_names: tuple[str, ...] = ()

    def merged(self, other: Engine) -> Engine:
        return Engine(
            self.name, *(tuple(dict.fromkeys(getattr(self, k) + getattr(other, k))) for k in _LISTS)
        )


BUILTIN_ENGINES: tuple[Engine, ...] = (
    Engine(
        "vLLM",
        frontends=(r"(?:^|[\s/])vllm\s+serve\b", r"\bvllm\.entrypoints\.", r"^VLLM::APIServer"),
        children=(r"^VLLM::EngineCore", r"^VLLM::Worker", r"^VLLM::DPCoordinator"),
        # multiprocessing.shared_memory (message queues), its semaphores, KV offload files
        shm_names=("psm_*", "sem.mp-*", "vllm_offload_*.mmap"),
    ),
    Engine(
        "SGLang",
        frontends=(
            r"\bsglang\.launch_server\b",
            r"(?:^|[\s/])sglang\s+serve\b",
            r"\bsglang_router\.launch_server\b",
        ),
        children=(
            r"^sglang::scheduler",
            r"^sglang::detokenizer",
            r"^sglang::data_parallel_controller",
        ),
        shm_names=("psm_*", "sem.mp-*"),
    ),
    # TensorRT-LLM, LMDeploy and MindIE do not retitle their child processes: only their
    # frontends are known (device holders, two engines on one device); their children are
    # not judged as orphans unless a site adds patterns for them.
    Engine(
        "TensorRT-LLM",
        frontends=(r"(?:^|[\s/])trtllm-serve\b", r"\btensorrt_llm\.commands\.serve\b"),
    ),
    Engine("LMDeploy", frontends=(r"(?:^|[\s/])lmdeploy\s+serve\b", r"\blmdeploy\.serve\.")),
    Engine("MindIE", frontends=(r"\bmindieservice_daemon\b", r"\bmindie_llm\b")),
    Engine("NCCL", shm_names=("nccl-*",)),
    Engine("PyTorch", shm_names=("torch_*",)),
)


@dataclass(frozen=True)
class Catalog:
    engines: tuple[Engine, ...]
    # Compiled once per catalog: the orphan rule asks about every process of the host,
    # every watch round. Per kind, (engine, test, the literal text any match contains):
    # a substring test first rules out most command lines at once (None: none known).
    _tests: dict[str, list[tuple[str, Callable[[str], object], str | None]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # (kind, command) -> engine: a host's processes share few command lines, and a watch
    # asks about the same ones every round. Bounded: emptied when it grows past _MEMO_MAX.
    _memo: dict[tuple[str, str], str | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # The one place a catalog's patterns are checked, wherever they came from: the
        # built-in engines, --engine-catalog, --engine-frontend or --engine-child.
        for e in self.engines:
            custom = e.name == CUSTOM  # the command line's engine is named by its option
            for kind, patterns in (("frontend", e.frontends), ("child", e.children)):
                where = f"--engine-{kind}" if custom else f"engine {e.name} {kind} pattern"
                for p in patterns:
                    try:
                        rx = re.compile(p)
                    except re.error as exc:
                        raise UsageError(f"{where} {p!r}: not a regex: {exc}") from None
                    self._tests.setdefault(kind, []).append(
                        (e.name, rx.search, required_literal(p))
                    )
        # a file name, matched whole by the shm globs
        self._tests["shm"] = [
            (e.name, re.compile(fnmatch.translate(g)).match, None)
            for e in self.engines
            for g in e.shm_names
        ]

    def _first(self, kind: str, text: str) -> str | None:
        key = (kind, text)
        if key in self._memo:
            return self._memo[key]
        tests = self._tests.get(kind, ())
        hits = (name for name, test, need in tests if (need is None or need in text) and test(text))
        found = next(hits, None)
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[key] = found
        return found

    def child_engine(self, command: str) -> str | None:
        """The engine whose child pattern matches `command` (None: not an engine child)."""
        return self._first("child", command)

    def frontend_engine(self, command: str) -> str | None:
        return self._first("frontend", command)

    def is_engine(self, command: str) -> bool:
        """Some engine's process, frontend or child (device holders, allocator hints,
        containers that run an engine)."""
        return self.child_engine(command) is not None or self.frontend_engine(command) is not None

    def shm_naming(self, name: str) -> str | None:
        """The engine whose shm glob matches the file name first (catalog order), as
        `rules.match_naming` tells it."""
        return self._first("shm", name)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: expected a list of strings")
    return tuple(value)


def parse_catalog_file(text: str, source: str) -> list[Engine]:
    """`{"engines": [{"name": ..., "frontends": [...], "children": [...], "shm_names": [...]}]}`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--engine-catalog {source}: not JSON: {exc}") from None
    entries = data.get("engines") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise UsageError(f'--engine-catalog {source}: expected {{"engines": [...]}}')
    out = []
    for n, entry in enumerate(entries):
        where = f"--engine-catalog {source}: engines[{n}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise UsageError(f"{where}: each engine needs a string 'name'")
        if unknown := set(entry) - {"name", *_LISTS}:
            raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        out.append(Engine(entry["name"], *(_strings(entry.get(k), f"{where}.{k}") for k in _LISTS)))
    return out


def build_catalog(
    extra: Iterable[Engine] = (),
    frontends: Sequence[str] = (),
    children: Sequence[str] = (),
    shm_names: Sequence[str] = (),
) -> Catalog:
    """The built-in catalog plus a file's engines (merged by name) plus command-line ones."""
    by_name = {e.name: e for e in BUILTIN_ENGINES}
    custom = Engine(CUSTOM, tuple(frontends), tuple(children), tuple(shm_names))
    for e in [*extra, custom]:
        by_name[e.name] = by_name[e.name].merged(e) if e.name in by_name else e
    return Catalog(tuple(e for e in by_name.values() if e.frontends or e.children or e.shm_names))
