"""The toolchain idioms: every shape of line stage 1 ranks or the facts list, one record each.

Grouped by family (one module each); `TABLE` is all of them and `COMPILED` what stage 1
(`proxy.pipeline.compact.scoring`) and the facts (`proxy.pipeline.outcomes`) scan with. A new
idiom is one record in its family's module; tests/pipeline/test_idioms.py walks the table.
"""

from __future__ import annotations

from proxy.pipeline.idioms import (
    go,
    infra,
    jvm,
    lint,
    logs,
    native,
    node,
    own,
    python,
    runners,
    rust,
    vcs,
)
from proxy.pipeline.idioms.compile import Compiled, compile_table
from proxy.pipeline.idioms.record import Idiom

FAMILIES = (python, node, go, rust, jvm, native, runners, vcs, infra, logs, lint, own)
TABLE: tuple[Idiom, ...] = tuple(i for family in FAMILIES for i in family.IDIOMS)
COMPILED: Compiled = compile_table(TABLE)

__all__ = ["COMPILED", "TABLE", "Compiled", "Idiom", "compile_table"]
