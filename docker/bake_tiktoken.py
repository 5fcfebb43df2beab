"""Fill a folder with tiktoken's encoding files at image build time, so the image never downloads.

Run by the Dockerfile as `python docker/bake_tiktoken.py DIR`. Files already in DIR (copied from
the build context for an offline build) are used as they are when tiktoken accepts them;
missing ones are downloaded, which needs the network at build time. Exits non-zero, naming
what is missing, when an encoding cannot be had: an image without them would fall back to the
bytes/4 estimate at run time, and that should fail the build, not surprise later.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# tiktoken names each cached file by the SHA-1 of its download URL.
FILES = {
    "cl100k_base": "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
    "o200k_base": "fb374d419588a4632f3f557e76b4b70aebbca790",
}


def bake(cache_dir: Path) -> list[str]:
    """Load every encoding through `cache_dir`; return the problems (empty when all is well)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    # tiktoken reads the variable on every load, so setting it here is enough.
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
    import tiktoken

    problems = []
    for name, file_name in FILES.items():
        try:
            encoding = tiktoken.get_encoding(name)
            encoding.encode("shrink-proxy")
        except Exception as exc:  # any failure means the encoding is not baked
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if not (cache_dir / file_name).is_file():
            problems.append(f"{name}: loaded, but {file_name} is not in {cache_dir}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: bake_tiktoken.py CACHE_DIR", file=sys.stderr)
        return 2
    cache_dir = Path(argv[1])
    problems = bake(cache_dir)
    for problem in problems:
        print(f"bake_tiktoken: {problem}", file=sys.stderr)
    if problems:
        print(
            "bake_tiktoken: build with network access, or put the files "
            f"({', '.join(FILES.values())}) in docker/tiktoken-cache/ first",
            file=sys.stderr,
        )
        return 1
    for name, file_name in FILES.items():
        size = (cache_dir / file_name).stat().st_size
        print(f"bake_tiktoken: {name} -> {cache_dir / file_name} ({size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
