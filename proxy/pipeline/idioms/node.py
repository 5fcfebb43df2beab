"""Node.js: npm, pnpm, yarn, Jest and Vitest, Mocha, tsc, ESLint."""

from __future__ import annotations

from proxy.pipeline.idioms.record import MEDIUM, STRONG, SUMMARY, Idiom

IDIOMS = (
    Idiom(
        "node.npm.packages",
        r"(?:added|removed|changed|updated|audited) \d+ packages?\b"
        r"|up to date\b[^\n]*\bpackages?\b",
        SUMMARY,
        "successes",
        examples=(
            "added 132 packages, and audited 133 packages in 4s",
            "up to date, audited 134 packages in 1s",
        ),
        counter=("added a cache for the packages",),
        why="npm install's closing line",
    ),
    Idiom(
        "node.npm.audit",
        r"\b\d+ vulnerabilit",
        SUMMARY,
        at="anywhere",
        examples=("found 0 vulnerabilities", "3 vulnerabilities (1 low, 2 high)"),
        why="npm's audit note closes most installs: ranked, but the install's own line "
        "(node.npm.packages) is the fact",
    ),
    Idiom(
        "node.npm.error",
        r"npm (?:ERR!|error) +\S",
        STRONG,
        "errors",
        examples=("npm ERR! code ERESOLVE", "npm error code ERESOLVE"),
        counter=("npm ERR! ",),
        why="npm's error lines (npm 7-9 `ERR!`, npm 10 `error`); the bare `npm ERR!` lines that "
        "space them say nothing",
    ),
    Idiom(
        "node.npm.pointer",
        r"npm (?:ERR!|error) (?:(?:A complete log of this run|For a full report see)\b|/\S*$)",
        fact="veto",
        examples=("npm ERR! A complete log of this run can be found in:",),
        why="npm's closing pointers to its log and report files: on every failure, about none; "
        "stage 1 keeps them with the error they close",
    ),
    Idiom(
        "node.pnpm.error",
        r"\bERR_PNPM_\w",
        STRONG,
        "errors",
        at="anywhere",
        cased=True,
        examples=(" ERR_PNPM_PEER_DEP_ISSUES  Unmet peer dependencies",),
    ),
    Idiom(
        "node.npm.lifecycle",
        r"\bELIFECYCLE\b",
        STRONG,
        "errors",
        at="anywhere",
        cased=True,
        examples=("npm ERR! code ELIFECYCLE", " ELIFECYCLE  Command failed with exit code 1."),
        why="npm's and pnpm's failed script",
    ),
    Idiom(
        "node.yarn.error",
        r"error (?:Command failed|An unexpected error)\b",
        STRONG,
        "errors",
        examples=("error Command failed with exit code 1.",),
    ),
    Idiom(
        "node.jest.totals",
        r"(?:Test Suites|Test Files|Tests):?[^\S\n]+\d+ (?:failed|passed)\b",
        SUMMARY,
        "outcomes",
        examples=("Tests:       1 failed, 41 passed, 42 total", "Test Files  2 passed (2)"),
        counter=("Tests: see below",),
        why="Jest's and Vitest's closing totals",
    ),
    Idiom(
        "node.jest.snapshots",
        r"Snapshots:[ \t]+\d",
        SUMMARY,
        examples=("Snapshots:   0 total",),
        why="Jest's snapshot count ranks with its totals; it says nothing of the run's verdict",
    ),
    Idiom(
        "node.jest.failed_suite",
        r"FAIL[^\S\n]+\S",
        STRONG,
        "errors",
        examples=("FAIL  src/math.test.js",),
        counter=("FAIL",),
        why="Jest's failed test file (and go test's failed package, which its own idiom lists "
        "as the run's outcome)",
    ),
    Idiom(
        "node.jest.failed_mark",
        # A failed test's mark in Jest's, Vitest's and other runners' listings (`✕ adds (4 ms)`).
        r"[✕✗✘] \S",
        STRONG,
        examples=("    ✕ adds two numbers (4 ms)",),
        counter=("    ✓ adds two numbers (1 ms)",),
        why="Jest's report names each failed test again under `●` (node.jest.failure), with "
        "its suite: listed both ways, one test would take two of the facts' slots",
    ),
    Idiom(
        "node.jest.failure",
        # Jest's header of each failure's report (`● suite › test`); `● Console` heads what the
        # tests logged.
        r"● (?!Console$)\S",
        MEDIUM,
        "errors",
        examples=("  ● math › adds two numbers",),
        counter=("  ● Console",),
    ),
    Idiom(
        "node.mocha.failure",
        r"\d+\) \S",
        MEDIUM,
        examples=("  1) math",),
        why="mocha's header of a failure's report; a numbered list looks the same, so the "
        "assertion under it is the fact",
    ),
    Idiom(
        "node.assert.sides",
        # An assertion's two sides (Jest, Vitest, Chai, JUnit and others print them on own lines).
        r"(?:Expected|Received|Actual)(?: \w+)?:[ \t]+\S",
        MEDIUM,
        "errors",
        examples=("    Expected: 4", "    Received: 3", "Expected value: 4"),
        counter=("Expected:",),
    ),
    Idiom(
        "node.mocha.totals",
        r"\d+ (?:passing|failing|pending)\b",
        SUMMARY,
        "outcomes",
        examples=("  41 passing (120ms)", "  1 failing"),
    ),
    Idiom(
        "node.tsc.found",
        r"(?:\[[\d:]+(?: [AP]M)?\] )?Found \d+ errors?\b",
        SUMMARY,
        "outcomes",
        examples=("Found 3 errors in 2 files.", "[12:01:33 PM] Found 1 error. Watching for file"),
        why="tsc's verdict, and tsc --watch's",
    ),
    Idiom(
        "node.tsc.error_code",
        r"\berror [A-Z]{1,4}\d+ ?:",
        STRONG,
        "errors",
        at="anywhere",
        cased=True,
        examples=("src/a.ts(3,5): error TS2322: Type 'string' is not assignable",),
        why="tsc, C#, MSVC and MSBuild: `error TS2322:`, `error CS0103:`, `error MSB3073:`",
    ),
    Idiom(
        "node.eslint.problems",
        r"[✖✕×] \d+ problems?\b",
        SUMMARY,
        "outcomes",
        examples=("✖ 12 problems (3 errors, 9 warnings)",),
    ),
    Idiom(
        "node.eslint.error",
        r"\d+:\d+[^\S\n]+error[^\S\n]+\S",
        STRONG,
        "errors",
        examples=("  77:9  error  'x' is not defined  no-undef",),
        counter=("  77:9  warning  Unexpected console statement  no-console",),
        why="ESLint's stylish format: the file is the line heading the group",
    ),
)
