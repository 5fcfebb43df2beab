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
        examples=("F401 [*] `os` imported but unused",),
    ),
    Idiom(
        "lint.code_first.fact",
        r"[A-Z]{1,4}\d{3,4}(?: \[\*\])?:?[ \t]+[A-Za-z`'\"(]",
        fact="errors",
        examples=("F821 Undefined name `retry_limit`",),
    ),
    Idiom(
        "lint.located.fact",
        # src/app.py:3:1: F401 `os` imported but unused (a path holds a letter or a dot:
        # `09:12:33: A1234` is a time)
        # (the letter looked for ahead, the path read once: two runs of `[^\s:]*` around one
        # letter split a long word every way)
        r"(?:[A-Za-z]:)?(?=[^\s:]*[A-Za-z_./])[^\s:]++:\d+:\d+: [A-Z]{1,4}\d{2,4}\b",
        fact="errors",
        examples=("src/app.py:3:1: F401 `os` imported but unused",),
    ),
)
