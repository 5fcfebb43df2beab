"""Node.js: npm, pnpm, yarn, Jest and Vitest, Mocha, tsc, ESLint, pino."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "node.npm.packages",
        r"(?:added|removed|changed|audited|up to date)\b[^\n]*\bpackages?\b",
        SUMMARY,
        examples=("added 132 packages, and audited 133 packages in 4s",),
        why="npm install's closing line",
    ),
    Idiom(
        "node.npm.packages.fact",
        r"(?:added|removed|changed|updated) \d+ packages?\b",
        fact="successes",
        examples=("added 132 packages in 4s",),
    ),
    Idiom(
        "node.npm.error",
        r"npm (?:ERR!|error)\b",
        STRONG,
        examples=("npm ERR! code ERESOLVE", "npm error code ERESOLVE"),
    ),
    Idiom(
        "node.npm.error.fact",
        r"npm (?:ERR!|error) +\S",
        fact="errors",
        examples=("npm ERR! code ERESOLVE",),
    ),
    Idiom(
        "node.npm.pointer",
        r"npm (?:ERR!|error) (?:(?:A complete log of this run|For a full report see)\b|/\S*$)",
        fact="veto",
        examples=("npm ERR! A complete log of this run can be found in:",),
        why="npm's closing pointers to its log and report files: on every failure, about none",
    ),
    Idiom(
        "node.pnpm.error",
        r"ERR_PNPM_\w",
        STRONG,
        examples=("ERR_PNPM_PEER_DEP_ISSUES  Unmet peer dependencies",),
    ),
    Idiom("node.npm.lifecycle", r"ELIFECYCLE\b", STRONG, examples=("ELIFECYCLE  Command failed.",)),
    Idiom(
        "node.pnpm.error.fact",
        r"\bERR_PNPM_\w|\bELIFECYCLE\b",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=(" ERR_PNPM_PEER_DEP_ISSUES  Unmet peer dependencies",),
    ),
    Idiom(
        "node.yarn.error",
        r"error (?:Command failed|An unexpected error)\b",
        STRONG,
        examples=("error Command failed with exit code 1.",),
    ),
    Idiom(
        "node.yarn.error.fact",
        r"error (?:Command failed|An unexpected error)",
        fact="errors",
        examples=("error Command failed with exit code 1.",),
    ),
    Idiom(
        "node.jest.totals",
        r"(?:Tests|Test Suites|Test Files|Snapshots):[ \t]+\d",
        SUMMARY,
        examples=("Tests:       1 failed, 41 passed, 42 total",),
        why="Jest's and Vitest's closing totals",
    ),
    Idiom(
        "node.jest.totals.fact",
        r"(?:Test Suites|Test Files|Tests):?\s+\d+ (?:failed|passed)\b",
        fact="outcomes",
        examples=("Tests:       1 failed, 41 passed, 42 total",),
    ),
    Idiom(
        "node.jest.failed_mark",
        # A failed test's mark in Jest's, Vitest's and other runners' listings (`✕ adds (4 ms)`).
        r"[✕✗✘] \S",
        STRONG,
        examples=("    ✕ adds two numbers (4 ms)",),
    ),
    Idiom(
        "node.jest.failure_header",
        # Jest's header of each failure's report (`● suite › test`), mocha's (`1) suite`).
        r"● \S|\d+\) \S",
        MEDIUM,
        examples=("  ● math › adds two numbers", "  1) math"),
    ),
    Idiom(
        "node.jest.failure_header.fact",
        r"● (?!Console$)\S|(?:Expected|Received)(?: \w+)?: +\S",
        fact="errors",
        examples=("● math › adds two numbers", "Expected: 4"),
        why="a failing test and its values; Jest's `● Console` heads logged output",
    ),
    Idiom(
        "node.assert.sides",
        # An assertion's two sides (Jest, Vitest, Chai, JUnit and others print them on own lines).
        r"(?:Expected|Received|Actual)(?: value)?:|(?:left|right): ",
        MEDIUM,
        examples=("    Expected: 4", "    Received: 3"),
    ),
    Idiom(
        "node.mocha.totals",
        r"\d+ (?:passing|failing|pending)\b",
        SUMMARY,
        examples=("  41 passing (120ms)", "  1 failing"),
    ),
    Idiom(
        "node.mocha.totals.fact",
        r"\d+ (?:passing|failing|pending)\b",
        fact="outcomes",
        examples=("1 failing",),
    ),
    Idiom(
        "node.tsc.found",
        r"Found \d+ errors?\b",
        SUMMARY,
        examples=("Found 3 errors in 2 files.",),
    ),
    Idiom(
        "node.tsc.found.fact",
        r"(?:\[[\d:]+(?: [AP]M)?\] )?Found \d+ errors?\b",
        fact="outcomes",
        examples=("Found 3 errors in 2 files.", "[12:01:33 PM] Found 1 error. Watching for file"),
    ),
    Idiom(
        "node.tsc.error_code.fact",
        r"\berror [A-Z]{1,4}\d+ ?:",
        fact="errors",
        at="anywhere",
        cased=True,
        examples=("src/a.ts(3,5): error TS2322: Type 'string' is not assignable",),
        why="tsc, C#, MSVC and MSBuild: `error TS2322:`, `error CS0103:`, `error MSB3073:`",
    ),
    Idiom(
        "node.eslint.problems",
        r"[✖✕×] \d+ problems?\b",
        SUMMARY,
        examples=("✖ 12 problems (3 errors, 9 warnings)",),
    ),
    Idiom(
        "node.eslint.problems.fact",
        r"✖ \d+ problems?\b",
        fact="outcomes",
        examples=("✖ 12 problems (3 errors, 9 warnings)",),
    ),
    Idiom(
        "node.eslint.error.fact",
        r"\d+:\d+\s+error\s+\S",
        fact="errors",
        examples=("77:9  error  'x' is not defined  no-undef",),
        why="ESLint's stylish format",
    ),
)
