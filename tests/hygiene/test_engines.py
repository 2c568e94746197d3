"""The engine catalog: built-in engines, and a site's additions from a file or flags."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hygiene_fakes import FakeHost
from hypothesis import given, settings
from hypothesis import strategies as st

from accelhost.errors import UsageError
from accelhost.hygiene.engines import (
    BUILTIN_ENGINES,
    build_catalog,
    parse_catalog_file,
    required_literal,
)


def test_builtin_catalog_tells_frontends_from_children() -> None:
    cat = build_catalog()
    assert {e.name for e in BUILTIN_ENGINES} >= {"vLLM", "SGLang", "TensorRT-LLM", "LMDeploy"}
    for cmd in (
        "vllm serve Qwen/Qwen2.5-7B-Instruct",
        "/usr/bin/python3 /usr/local/bin/vllm serve m",
        "python3 -m vllm.entrypoints.openai.api_server --model m",
        "VLLM::APIServer_0",
    ):
        assert cat.frontend_engine(cmd) == "vLLM" and cat.child_engine(cmd) is None, cmd
    for cmd in (
        "VLLM::EngineCore",
        "VLLM::EngineCore_DP0",
        "VLLM::Worker_TP1",
        "VLLM::DPCoordinator",
    ):
        assert cat.child_engine(cmd) == "vLLM", cmd
    assert cat.child_engine("sglang::scheduler_TP0") == "SGLang"
    assert cat.frontend_engine("python3 -m sglang.launch_server --model m") == "SGLang"
    assert cat.frontend_engine("trtllm-serve /models/m") == "TensorRT-LLM"
    # a title somewhere inside a command line is not a child (`tail -f VLLM::EngineCore.log`)
    assert cat.child_engine("tail -f VLLM::EngineCore.log") is None
    from accelhost.hygiene.judge.rules import match_naming

    namings = [(e.name, g) for e in cat.engines for g in e.shm_names]  # in catalog order
    assert match_naming("psm_3f9a1c2e", namings) == "vLLM"  # the first engine naming it
    assert match_naming("vllm_offload_0.mmap", namings) == "vLLM"
    assert match_naming("nccl-Xa8Jd2", namings) == "NCCL"
    assert match_naming("PostgreSQL.1234", namings) is None


def test_catalog_file_merges_by_name_and_refuses_nonsense() -> None:
    text = json.dumps(
        {
            "engines": [
                {"name": "TensorRT-LLM", "children": ["^trtllm-worker"], "shm_names": ["trt_*"]},
                {"name": "site", "frontends": ["^my-server "], "children": ["^my-worker"]},
            ]
        }
    )
    cat = build_catalog(parse_catalog_file(text, "f.json"))
    trt = next(e for e in cat.engines if e.name == "TensorRT-LLM")
    assert trt.frontends and trt.children == ("^trtllm-worker",)  # added, not replaced
    assert cat.child_engine("my-worker 3") == "site"
    for bad in ("{", '{"engines": {}}', '{"engines": [{"frontends": []}]}',
                '{"engines": [{"name": "x", "kids": []}]}',
                '{"engines": [{"name": "x", "children": "^a"}]}'):  # fmt: skip
        with pytest.raises(UsageError):
            parse_catalog_file(bad, "f.json")
    with pytest.raises(UsageError):
        build_catalog(frontends=["(unclosed"])


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_catalog_file_and_flags_on_the_command_line(tmp_path: Path) -> None:
    fake = FakeHost()
    fake.proc(10, "my-server --port 1", ppid=1, pgid=10, sid=10)
    fake.proc(11, "my-worker 0", ppid=10, pgid=10, sid=10)
    fake.proc(21, "my-worker 1", ppid=1, pgid=20, sid=20)
    snap = tmp_path / "host.json"
    snap.write_text(json.dumps(fake.snapshot()))
    catalog = tmp_path / "engines.json"
    catalog.write_text(
        json.dumps(
            {
                "engines": [
                    {"name": "site", "frontends": ["^my-server "], "children": ["^my-worker"]}
                ]
            }
        )  # fmt: skip
    )
    base = ["--snapshot", str(snap), "--json", "--check", "orphan_engines"]
    res = _doctor(*base, "--engine-catalog", str(catalog))
    (check,) = json.loads(res.stdout)["checks"]
    assert [(e["pid"], e["engine"]) for e in check["evidence"]] == [(21, "site")]
    flags = _doctor(*base, "--engine-frontend", "^my-server ", "--engine-child", "^my-worker")
    (check,) = json.loads(flags.stdout)["checks"]
    assert [(e["pid"], e["engine"]) for e in check["evidence"]] == [(21, "custom")]
    assert json.loads(_doctor(*base).stdout)["checks"][0]["status"] == "OK"
    for bad in (str(tmp_path / "missing.json"), str(snap)):  # absent; not a catalog
        res = _doctor(*base, "--engine-catalog", bad)
        assert res.returncode == 2 and res.stderr.startswith("accelhost doctor: --engine-catalog")


# Patterns a site might add, beside the built-in ones: quantifiers, classes, escapes,
# groups, alternations inside groups, a top-level alternation, inline flags.
SITE_PATTERNS = (
    r"python3?\s+-m\s+myengine\.serve",
    r"ab?c",
    r"a{0,3}bc",
    r"[vV]llm serve",
    r"(foo|bar)baz+",
    r"x\.y\.z",
    r"^worker-\d+$",
    r"\\srv\\run",
    r"foo|bar",
    r"(?i)vllm",
    r"\x41bcd",
)
ALL_PATTERNS = tuple(p for e in BUILTIN_ENGINES for p in e.frontends + e.children) + SITE_PATTERNS


@pytest.mark.parametrize("pattern", ALL_PATTERNS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_every_match_contains_the_required_literal(pattern: str, data: st.DataObject) -> None:
    """The substring test that spares the regex search never rules out a real match."""
    literal = required_literal(pattern)
    text = data.draw(st.from_regex(pattern))
    assert re.search(pattern, text), text  # (from_regex: a match somewhere in text)
    if literal is not None:
        assert literal in text, (pattern, literal, text)


def test_required_literals_of_the_builtin_engines_are_their_names() -> None:
    """Each built-in pattern has a literal to test first (else every process of a host
    pays a regex search per pattern), and the obvious one."""
    literals = {p: required_literal(p) for e in BUILTIN_ENGINES for p in e.frontends + e.children}
    assert None not in literals.values(), literals
    assert literals[r"\bvllm\.entrypoints\."] == "vllm.entrypoints."
    assert literals["^VLLM::EngineCore"] == "VLLM::EngineCore"
    assert required_literal(r"a{0,3}bc") == "bc"  # the quantifier's digits are no text
    assert required_literal(r"foo|bar") is None
    assert required_literal(r"(?i)vllm") is None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["vllm", "serve", "VLLM::EngineCore", " ", "/", "sglang", ".launch_server",
             "-m", "python3", "trtllm-serve", "lmdeploy", "x", "mindie_llm", "_"]
        ),
        max_size=12,
    ).map("".join)
)  # fmt: skip
def test_catalog_answers_as_a_plain_search_of_every_pattern(command: str) -> None:
    cat = build_catalog()

    def plain(patterns: tuple[str, ...]) -> bool:
        return any(re.search(p, command) for p in patterns)

    frontends = tuple(p for e in BUILTIN_ENGINES for p in e.frontends)
    children = tuple(p for e in BUILTIN_ENGINES for p in e.children)
    assert (cat.frontend_engine(command) is not None) == plain(frontends)
    assert (cat.child_engine(command) is not None) == plain(children)
    assert cat.is_engine(command) == plain(frontends + children)
