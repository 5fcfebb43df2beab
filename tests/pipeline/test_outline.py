"""Outline: which lines of source code count as definitions, in the languages agents read."""

from __future__ import annotations

import pytest

from proxy.pipeline.compact.outline import choose, definitions

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
