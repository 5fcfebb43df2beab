"""Outline: which lines of source code count as definitions, in the languages agents read."""

from __future__ import annotations

import pytest

from proxy.pipeline.compact.outline import (
    choose,
    definitions,
    document_headings,
    headings,
    is_source,
)
from proxy.pipeline.compact.scoring import signal_lines

SOURCES = {
    "python": (
        "import os\n\nLIMIT: int = 3\n\n\nclass Cart:\n    def total(self):\n"
        "        if self.items:\n            return sum(self.items)\n\n"
        "async def fetch(url):\n    return await get(url)\n",
        ["LIMIT: int = 3", "class Cart:", "    def total(self):", "async def fetch(url):"],
    ),
    "typescript": (
        "import { x } from './x';\n\nexport interface Item {\n  id: number;\n}\n"
        "export const add = (a: number, b: number): number => a + b;\n"
        "export default function render(items: Item[]) {\n  return items.map(add);\n}\n"
        "export class Store<T> {\n  private items: T[] = [];\n}\n",
        [
            "export interface Item {",
            "export const add = (a: number, b: number): number => a + b;",
            "export default function render(items: Item[]) {",
            "export class Store<T> {",
        ],
    ),
    "go": (
        "package codec\n\ntype Header struct {\n\tVersion int\n}\n\n"
        "func (h *Header) Decode(b []byte) error {\n\treturn nil\n}\n\nfunc New() *Header {\n"
        "\tif true {\n\t\treturn nil\n\t}\n}\n",
        [
            "type Header struct {",
            "func (h *Header) Decode(b []byte) error {",
            "func New() *Header {",
        ],
    ),
    "rust": (
        "use std::io;\n\npub struct Ring {\n    cap: usize,\n}\n\nimpl Ring {\n"
        "    pub fn push(&mut self, v: u8) -> bool {\n        true\n    }\n}\n\n"
        "fn main() {\n    let r = Ring { cap: 4 };\n}\n",
        [
            "pub struct Ring {",
            "impl Ring {",
            "    pub fn push(&mut self, v: u8) -> bool {",
            "fn main() {",
        ],
    ),
    "c": (
        "#include <stdlib.h>\n\nstatic int count;\n\nint rb_push(struct rb *r, int v)\n{\n"
        "    if (r->len == r->cap)\n        return -1;\n    return 0;\n}\n\n"
        "int rb_len(struct rb *r);\n",
        ["int rb_push(struct rb *r, int v)"],
    ),
    "java": (
        "package acme;\n\npublic class App {\n    private static final int N = 3;\n\n"
        "    public static void main(String[] args) {\n        System.out.println(N);\n    }\n\n"
        "    private List<String> names(Map<String, Integer> m) {\n        return null;\n"
        "    }\n}\n",
        [
            "public class App {",
            "    public static void main(String[] args) {",
            "    private List<String> names(Map<String, Integer> m) {",
        ],
    ),
    "ruby": (
        "module Billing\n  class Ledger\n    def balance\n      @entries.sum\n    end\n"
        "  end\nend\n",
        ["module Billing", "  class Ledger", "    def balance"],
    ),
}


@pytest.mark.parametrize("language", SOURCES)
def test_each_languages_definitions_are_found(language: str) -> None:
    source, expected = SOURCES[language]
    lines = source.split("\n")
    assert [lines[i] for i, _ in definitions(lines)] == expected


def test_cat_n_numbers_are_read_past_and_prose_has_none() -> None:
    lines = [f"{i:6d}\t{line}" for i, line in enumerate(SOURCES["python"][0].split("\n"), 1)]
    assert [i for i, _ in definitions(lines)] == [2, 5, 6, 10]
    prose = "The cart class keeps items.\nIf the total is zero, return early.\nDone: it works."
    assert definitions(prose.split("\n")) == []


def test_top_level_definitions_come_before_names_and_methods() -> None:
    lines = SOURCES["python"][0].split("\n")
    found = definitions(lines)  # LIMIT (a name), Cart, Cart.total (a method), fetch
    cost = [10] * len(lines)
    assert choose(found, cost, 20) == [5, 10]  # class Cart, async def fetch
    assert choose(found, cost, 30) == [2, 5, 10]  # then the module-level name
    assert choose(found, cost, 40) == [2, 5, 6, 10]


# Unnumbered source files, as `cat` and most agents' read_file tools return them: functions
# whose bodies are full of the words a log's errors are made of.
PROGRAMS = {
    "python": lambda f: [
        f"def check_{f}(value):",
        f'    """Reject what batch {f} cannot take."""',
        "    if value is None:",
        f"        raise ValueError('invalid value: missing field {f}')",
        "    return value",
        "",
    ],
    "javascript": lambda f: [
        f"export function check{f}(value) {{",
        "  if (value == null) {",
        f"    throw new Error('invalid value: missing field {f}');",
        "  }",
        "  return value;",
        "}",
        "",
    ],
    "go": lambda f: [
        f"func check{f}(value *Item) error {{",
        "\tif value == nil {",
        f'\t\treturn fmt.Errorf("invalid value: missing field {f}")',
        "\t}",
        "\treturn nil",
        "}",
        "",
    ],
    "rust": lambda f: [
        f"pub fn check_{f}(value: Option<u8>) -> Result<u8, Error> {{",
        f"    // Batch {f} has no default to fall back on.",
        f'    value.ok_or(Error::new("invalid value: missing field {f}"))',
        "}",
        "",
    ],
    "c": lambda f: [
        f"int check_{f}(struct item *value)",
        "{",
        "    if (value == NULL) {",
        f'        fprintf(stderr, "error: invalid value, missing field {f}\\n");',
        "        return -1;",
        "    }",
        "    return 0;",
        "}",
        "",
    ],
    "java": lambda f: [
        f"    public Item check{f}(Item value) {{",
        "        if (value == null) {",
        f'            throw new IllegalArgumentException("invalid value: missing field {f}");',
        "        }",
        "        return value;",
        "    }",
        "",
    ],
}


def program(language: str, functions: int = 12) -> str:
    return "\n".join(line for f in range(functions) for line in PROGRAMS[language](f))


@pytest.mark.parametrize("language", PROGRAMS)
def test_unnumbered_source_files_are_source(language: str) -> None:
    text = program(language)
    assert is_source(text, text.split("\n"), signal_lines)


def long_failures(tests: int = 6) -> str:
    """`pytest --tb=long`: each failing test's whole source, with its `>` and `E` lines."""
    out = []
    for f in range(tests):
        out += [f"________________ test_check_{f} ________________", ""]
        out += [f"    def test_check_{f}():"]
        out += [f"        item_{k} = load({k}, strict=True)" for k in range(18)]
        out += [f">       assert check_{f}(item_0) == 3", "E       assert 2 == 3"]
        out += [f"E        +  where 2 = check_{f}(<Item>)", ""]
        out += [f"tests/test_c.py:{f}: AssertionError"]
    return "\n".join(out)


def pip_resolving(packages: int = 20) -> str:
    """`Collecting x (from y)` reads like a C function's head, and its other lines are indented
    or end in a bracket, like code."""
    out = []
    for f in range(packages):
        out += [
            f"Collecting pkg{f} (from app==1.0)",
            f"  Downloading pkg{f}-1.{f}.0-py3-none-any.whl ({f + 3} kB)",
            f"     {'━' * 40} {f + 3}/{f + 3} kB 8.1 MB/s eta 0:00:00",
            f"Requirement already satisfied: dep{f} in ./venv/lib (from pkg{f}) (2.{f})",
        ]
    return "\n".join(out)


# Each is shaped like code nearly everywhere and defines enough; one test tells it from source.
LOGS = {"pytest --tb=long": long_failures, "pip": pip_resolving}


@pytest.mark.parametrize("name", LOGS)
def test_logs_that_quote_code_are_not_source(name: str) -> None:
    text = LOGS[name]()
    assert not is_source(text, text.split("\n"), signal_lines)


def test_prose_and_a_table_of_names_are_not_source() -> None:
    prose = "\n".join(["The cart class keeps items.", "If the total is zero, return early."] * 20)
    names = "\n".join(f"def f{i}(): pass" for i in range(40))  # every line a definition
    for text in (prose, names):
        assert not is_source(text, text.split("\n"), signal_lines)


def readme(sections: int = 12) -> str:
    """A project's README: a title, sections of prose that talk about errors and failures,
    fenced examples with shell comments and a traceback, a setext-underlined section."""
    out = ["# ledger", "", "Settle batches of entries without losing a cent.", ""]
    for s in range(sections):
        out += [f"## Section {s}", ""]
        out += [
            f"If settling batch {s} fails with an invalid entry, the error names the field that "
            "is missing; retry after fixing it."
        ] * 3
        out += ["", "```bash", "# install, then run", f"ledger settle --batch {s}", "```", ""]
        out += ["```", "Traceback (most recent call last):", "ValueError: invalid entry", "```"]
    out += ["", "Changes", "=======", "", "Nothing failed in 1.0.", ""]
    return "\n".join(out)


def test_headings_are_atx_and_setext_outside_fences() -> None:
    lines = readme(3).split("\n")
    found = [(lines[i], rank) for i, rank in headings(lines)]
    assert found == [
        ("# ledger", 0),
        ("## Section 0", 1),
        ("## Section 1", 1),
        ("## Section 2", 1),
        ("Changes", 0),
    ]  # `# install, then run` is a shell comment in a fenced block
    diff = ["@@ -1,4 +1,3 @@", " text", "-", "-   ", "+---"]
    assert headings(diff) == []  # a removed blank line is no setext underline


def test_a_readme_is_a_document() -> None:
    text = readme()
    lines = text.split("\n")
    # Only lines outside the fences count as errors: the traceback is an example.
    errors = [i for i, line in enumerate(lines) if line.startswith(("Traceback", "ValueError"))]
    found = document_headings(text, lines, errors, signal_lines)
    assert found is not None and len(found) == 14


def test_a_log_with_a_few_heading_like_lines_is_no_document() -> None:
    text = readme()
    lines = text.split("\n")
    # Outside any fence, an error line (the caller's scoring says which) makes it a log.
    assert document_headings(text, lines, [2], signal_lines) is None
    steps = [
        f"# step {k}\n" + "\n".join(f"compiling unit {k}.{u}" for u in range(9)) for k in range(6)
    ]
    log = "\n".join([*steps, "error: linker failed"])
    log_lines = log.split("\n")
    assert document_headings(log, log_lines, [len(log_lines) - 1], signal_lines) is None
