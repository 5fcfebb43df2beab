"""shrink-proxy: an OpenAI-compatible reverse proxy that shrinks prompts in flight."""

__version__ = "0.1.0"

from proxy.app import create_app  # noqa: E402
from proxy.settings import Settings  # noqa: E402

__all__ = ["Settings", "__version__", "create_app"]
