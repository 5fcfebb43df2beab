"""The shared folder beside the project (`<project root>/../shared`): tiktoken's files, the corpus.

Tests and benchmarks find it here, from the project root, so a plain `python -m pytest` or
`python -m bench.quality` works without make and without a machine's absolute path written in
the project. It imports nothing from the proxy: the environment must be set before the proxy's
settings read it.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
TIKTOKEN_CACHE = SHARED / "tiktoken-cache"
DEV_CORPUS = SHARED / "corpus" / "dev"
# Tests may be pointed at another corpus (benchmarks take theirs as an argument).
CORPUS = Path(os.environ.get("SHRINK_CORPUS_DIR", DEV_CORPUS))


def use_offline_encodings(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Point TIKTOKEN_CACHE_DIR at the shared tiktoken files when it is unset and they exist
    (tiktoken would otherwise try to download them); returns the folder now in use, if any."""
    if "TIKTOKEN_CACHE_DIR" not in environ and TIKTOKEN_CACHE.is_dir():
        environ["TIKTOKEN_CACHE_DIR"] = str(TIKTOKEN_CACHE)
    return environ.get("TIKTOKEN_CACHE_DIR")
