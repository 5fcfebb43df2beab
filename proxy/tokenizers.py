"""Loading tiktoken encodings from a cache directory, offline, and handing out counters.

Boundary: the files are read from the cache directory the caller resolved (this module never
reads the environment or settings), verified by SHA-256, and built into encodings with a copy of
tiktoken's own constructors. When a file is missing it never reaches for the network unless told
to: the counter falls back to the labelled estimate of proxy.tokens, and says so once.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import tiktoken
import tiktoken.load

from proxy.pieces import CL100K_PATTERN, O200K_PATTERN
from proxy.tokens import CL100K, ESTIMATE, O200K, CacheInfo, TokenCounter, encoding_for_model

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class _Spec:
    """Where an encoding's BPE file lives and how to build it: a copy of the constructor in
    tiktoken_ext.openai_public, so the file is read from *our* cache dir (tiktoken's own loader
    reads the environment and downloads on a miss). tests/test_tokens.py checks the copy."""

    url: str
    sha256: str
    pat_str: str
    special_tokens: Mapping[str, int]


_SPECS: dict[str, _Spec] = {
    CL100K: _Spec(
        url="https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=CL100K_PATTERN,
        special_tokens={
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    O200K: _Spec(
        url="https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=O200K_PATTERN,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
}


# --- loading --------------------------------------------------------------------------------------


class Tokenizers:
    """One per process (on the app state): loads each encoding lazily, once, and hands out one
    shared `TokenCounter` per encoding.

    `cache_dir` is tiktoken's cache directory as the caller resolved it (TIKTOKEN_CACHE_DIR, else
    DATA_GYM_CACHE_DIR, else `<tmpdir>/data-gym-cache`: see `resolve_cache_dir`). Files there are
    named `sha1(blob url)`. With a directory, loading is a file read or, when the file is absent,
    the estimate (or, with `allow_download`, a download bounded by `load_timeout`).

    `cache_dir=None` means unknown: tiktoken (0.14) has no helper that resolves the directory
    without downloading, so tiktoken's own loader is tried, bounded by `load_timeout` seconds (it
    resolves the directory itself and may go to the network). `cache_dir=""` is tiktoken's
    "caching disabled": nothing is available offline.
    """

    def __init__(
        self,
        override: str | None = None,
        cache_dir: str | None = None,
        cache_size: int = 20_000,
        allow_download: bool = False,
        load_timeout: float = 10.0,
    ) -> None:
        if override and override != ESTIMATE and override not in _SPECS:
            if override not in tiktoken.list_encoding_names():
                override = encoding_for_model(override)  # SHRINK_TOKENIZER=gpt-4o: a model name
        self._override = override or None
        self._cache_dir = cache_dir
        self._cache_size = cache_size
        self._allow_download = allow_download
        self._load_timeout = load_timeout
        self._counters: dict[str, TokenCounter] = {}
        self._estimate: TokenCounter | None = None
        self._lock = threading.Lock()

    def cache_info(self) -> CacheInfo:
        """Hits, misses and entries of every loaded counter's cache, summed (for metrics)."""
        infos = [c.cache_info() for c in list(self._counters.values())]
        return CacheInfo(*(sum(i[k] for i in infos) for k in range(3)))

    def for_model(self, model: str | None) -> TokenCounter:
        """The counter for `model` (the override wins); loads its encoding on first use."""
        return self.for_encoding(self.encoding_name(model))

    def encoding_name(self, model: str | None) -> str:
        return self._override or encoding_for_model(model)

    def loaded(self, model: str | None) -> bool:
        """Whether `for_model(model)` returns at once (no file to read and build first)."""
        return self.encoding_name(model) in self._counters

    def startup_encodings(self, models: list[str]) -> list[str]:
        """What to load before serving: the override alone, or cl100k_base (every model we do
        not know) and the encodings of the models the settings name. Others load on first use,
        off the event loop; each costs 40-70 MB of memory, so none is loaded for nothing."""
        if self._override:
            return [self._override]
        return sorted({CL100K, *(encoding_for_model(m) for m in models)})

    def for_encoding(self, name: str) -> TokenCounter:
        counter = self._counters.get(name)
        if counter is not None:
            return counter
        # Loading o200k_base takes ~0.5 s: do it once, not once per request waiting for it.
        with self._lock:
            counter = self._counters.get(name)
            if counter is None:
                counter = self._load(name)
                self._counters[name] = counter
        return counter

    def _load(self, name: str) -> TokenCounter:
        if name == ESTIMATE:  # asked for explicitly: no warning
            return self._estimate_counter()
        try:
            encoding = self._load_encoding(name)
        except Exception as e:  # missing file, timeout, bad download, unknown name: all alike
            logger.warning(
                "tiktoken encoding %s is not available (%s); counting tokens as an estimate, "
                "ceil(utf-8 bytes / 4). Fix: put its file in TIKTOKEN_CACHE_DIR%s.",
                name,
                e,
                self._expected_path_hint(name),
            )
            return self._estimate_counter()
        return TokenCounter(name, encoding, cache_size=self._cache_size)

    def _estimate_counter(self) -> TokenCounter:
        # Shared by every encoding that failed: the estimate does not depend on the encoding.
        if self._estimate is None:
            self._estimate = TokenCounter(
                ESTIMATE,
                None,
                cache_size=self._cache_size,
                note="token counts are estimates (ceil(utf-8 bytes / 4)): no tiktoken encoding "
                "file available offline; set TIKTOKEN_CACHE_DIR",
            )
        return self._estimate

    def _expected_path_hint(self, name: str) -> str:
        spec = _SPECS.get(name)
        if spec is None or not self._cache_dir:
            return ""
        return f" (expected {os.path.join(self._cache_dir, _cache_key(spec.url))})"

    def _load_encoding(self, name: str) -> tiktoken.Encoding:
        spec = _SPECS.get(name)
        if spec is not None and self._cache_dir:
            path = os.path.join(self._cache_dir, _cache_key(spec.url))
            data = _read_verified(path, spec.sha256)
            if data is None:
                if not self._allow_download:
                    raise FileNotFoundError(f"{path} is missing or corrupt; downloads are off")
                data = _bounded(lambda: tiktoken.load.read_file(spec.url), self._load_timeout)
                if hashlib.sha256(data).hexdigest() != spec.sha256:
                    raise ValueError(f"downloaded {spec.url} does not match its sha256")
                _write_atomic(path, data)
            encoding = tiktoken.Encoding(
                name,
                pat_str=spec.pat_str,
                mergeable_ranks=_parse_bpe(data),
                special_tokens=dict(spec.special_tokens),
            )
            # The Rust core holds its own copy of the ranks; tiktoken keeps the Python dict only
            # to pickle the encoding, which we never do. Dropping it frees 13 MB (cl100k_base)
            # and 26 MB (o200k_base) per process.
            encoding._mergeable_ranks = {}
            return encoding
        if self._cache_dir is not None and not self._allow_download:
            if spec is None:
                raise LookupError(f"no offline loader for encoding {name!r}")
            raise FileNotFoundError(
                "tiktoken caching is disabled (cache dir ''); downloads are off"
            )
        # Unknown cache dir, or a download is allowed: let tiktoken try, but never wait forever.
        return _bounded(lambda: tiktoken.get_encoding(name), self._load_timeout)


def resolve_cache_dir(environ: Mapping[str, str]) -> str:
    """tiktoken's own resolution (tiktoken.load.read_file_cached), for the caller that reads the
    environment (settings.py) to pass in as `Tokenizers(cache_dir=...)`."""
    if "TIKTOKEN_CACHE_DIR" in environ:
        return environ["TIKTOKEN_CACHE_DIR"]
    if "DATA_GYM_CACHE_DIR" in environ:
        return environ["DATA_GYM_CACHE_DIR"]
    import tempfile

    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _cache_key(url: str) -> str:
    return hashlib.sha1(url.encode()).hexdigest()  # tiktoken's naming; not a security use


def _read_verified(path: str, sha256: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != sha256:
        logger.warning("ignoring %s: its sha256 does not match the expected encoding file", path)
        return None
    return data


def _write_atomic(path: str, data: bytes) -> None:
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.{uuid.uuid4()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:  # a read-only cache dir costs a download next start, nothing more
        logger.warning("could not write %s to the tiktoken cache: %s", path, e)


def _parse_bpe(data: bytes) -> dict[bytes, int]:
    # tiktoken.load.load_tiktoken_bpe's format: "<base64 token> <rank>" per line.
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _bounded(fn: Callable[[], T], timeout: float) -> T:
    """Run `fn` in a daemon thread and give up after `timeout` seconds (the thread is abandoned: a
    hung download must not hold the proxy's startup or a request)."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as e:  # handed to the caller's thread below
            error.append(e)

    thread = threading.Thread(target=run, name="tokens-load", daemon=True)
    thread.start()
    thread.join(timeout)
    if error:
        raise error[0]
    if not result:
        raise TimeoutError(f"gave up after {timeout:g} s")
    return result[0]
