"""Linters: flake8, ruff, pylint, pydocstyle, Hadolint, ShellCheck: diagnostics with rule codes."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, Idiom

IDIOMS = (
    Idiom(
        "lint.code_first",
        # A linter's diagnostic led by its rule code (ruff's full format: `F401 [*] `os` imported
        # but unused`; pydocstyle, Hadolint, ShellCheck). Lint runs rarely say "error".
        r"[A-Z]{1,4}\d{3,4}(?: \[\*\])?:?[ \t]+[A-Za-z`'\"(]",
        MEDIUM,
        "errors",
        examples=("F821 Undefined name `retry_limit`", "DL3008 Pin versions in apt get install"),
    ),
    Idiom(
        "lint.located",
        # src/app.py:3:1: F401 `os` imported but unused (flake8, pylint, ruff --output-format
        # concise). A path holds a letter or a dot: `09:12:33: A1234` is a time. The letter is
        # looked for ahead and the path read once: two runs of `[^\s:]*` around one letter split a
        # long word every way.
        r"(?:[A-Za-z]:)?(?=[^\s:]*[A-Za-z_./])[^\s:]++:\d+:\d+:[ \t]+[A-Z]{1,4}\d{2,4}\b",
        MEDIUM,
        "errors",
        examples=("src/app.py:3:1: F401 `os` imported but unused",),
        counter=("09:12:33: A1234 started",),
    ),
)
