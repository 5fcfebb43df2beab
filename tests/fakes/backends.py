"""Fake upstreams that behave like each real backend, for discovery and overflow tests.

One Starlette app per flavour (vLLM, llama.cpp, Ollama, LM Studio, OpenRouter, oMLX, OpenAI),
each exposing the discovery endpoint that backend really has, in its real shape, and answering an
oversized chat request with that backend's exact overflow body (Ollama instead truncates
silently and reports the truncated `usage.prompt_tokens`, as its OpenAI route does). Every
request is counted by path, so tests can assert how often the proxy probed.

The prompt size is bytes/4 of the messages, or exactly `x-fake-prompt-tokens` when sent.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

FLAVOURS = ("vllm", "llamacpp", "ollama", "lmstudio", "openrouter", "omlx", "openai")


# --- the exact overflow bodies, as each backend writes them -----------------------------------


def vllm_overflow(limit: int, prompt: int) -> tuple[int, dict[str, Any]]:
    # vLLM >= 0.10 (ErrorResponse{error: ErrorInfo}), serving_engine._validate_input.
    message = (
        f"This model's maximum context length is {limit} tokens. However, your request has "
        f"{prompt} input tokens. Please reduce the length of the input messages."
    )
    return 400, {
        "error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}
    }


def llamacpp_overflow(limit: int, prompt: int) -> tuple[int, dict[str, Any]]:
    message = (
        f"request ({prompt} tokens) exceeds the available context size ({limit} tokens), "
        "try increasing it"
    )
    return 400, {
        "error": {
            "code": 400,
            "message": message,
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt,
            "n_ctx": limit,
        }
    }


def lmstudio_overflow(limit: int, prompt: int) -> tuple[int, dict[str, Any]]:
    message = (
        "The number of tokens to keep from the initial prompt is greater than the context "
        f"length (n_keep: {prompt}>= n_ctx: {limit}). Try to load the model with a larger "
        "context length, or provide a shorter input."
    )
    return 400, {"error": message}


def openrouter_overflow(limit: int, prompt: int) -> tuple[int, dict[str, Any]]:
    message = (
        f"This endpoint's maximum context length is {limit} tokens. However, you requested "
        f"about {prompt + 1000} tokens ({prompt} of text input, 1000 in the output). Please "
        'reduce the length of either one, or use the "middle-out" transform to compress your '
        "prompt automatically."
    )
    return 400, {"error": {"message": message, "code": 400}}


def omlx_overflow(limit: int, prompt: int) -> tuple[int, dict[str, Any]]:
    message = f"Prompt too long: {prompt} tokens exceeds max context window of {limit} tokens"
    return 400, {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    }


def openai_overflow(limit: int, prompt: int) -> tuple[int, dict[str, Any]]:
    message = (
        f"This model's maximum context length is {limit} tokens. However, your messages "
        f"resulted in {prompt} tokens. Please reduce the length of the messages."
    )
    return 400, {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


OVERFLOW_BODIES = {
    "vllm": vllm_overflow,
    "llamacpp": llamacpp_overflow,
    "lmstudio": lmstudio_overflow,
    "openrouter": openrouter_overflow,
    "omlx": omlx_overflow,
    "openai": openai_overflow,
}


@dataclass
class FakeBackend:
    """One backend flavour serving one model with a given served window."""

    flavour: str
    model: str = "test-model"
    window: int = 8192
    trained: int = 131072  # what /api/show, n_ctx_train and friends report: never the answer
    loaded: bool = True  # Ollama / LM Studio: is the model in memory?
    loaded_context: bool = True  # LM Studio: report loaded_context_length
    props_shape: str = "nested"  # llama.cpp /props: nested | top | slots
    delay: float = 0.0  # seconds before answering any discovery GET
    fail_status: int | None = None  # answer every discovery GET with this status
    hits: Counter[str] = field(default_factory=Counter)
    headers_seen: list[dict[str, str]] = field(default_factory=list)
    chat_bodies: list[dict[str, Any]] = field(default_factory=list)  # every chat request, parsed
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        assert self.flavour in FLAVOURS, self.flavour

    @property
    def prefix(self) -> str:
        """The path of the OpenAI base URL on this backend."""
        return "/api/v1" if self.flavour == "openrouter" else "/v1"

    def app(self) -> Starlette:
        p = self.prefix
        routes = [
            Route(p + "/models", self.get(self.models), methods=["GET"]),
            Route(p + "/chat/completions", self.chat, methods=["POST"]),
        ]
        if self.flavour == "llamacpp":
            routes.append(Route("/props", self.get(self.props), methods=["GET"]))
        if self.flavour == "ollama":
            routes.append(Route("/api/ps", self.get(self.ollama_ps), methods=["GET"]))
            routes.append(Route("/api/show", self.get(self.ollama_show), methods=["POST", "GET"]))
        if self.flavour == "lmstudio":
            routes.append(Route("/api/v0/models", self.get(self.lmstudio_models), methods=["GET"]))
        routes.append(Route("/{path:path}", self.not_found, methods=["GET", "POST"]))
        return Starlette(routes=routes)

    def count(self, request: Request) -> None:
        with self.lock:
            self.hits[request.url.path] += 1
            self.headers_seen.append({k.lower(): v for k, v in request.headers.items()})

    def get(self, build):
        async def handler(request: Request) -> Response:
            self.count(request)
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.fail_status is not None:
                return JSONResponse({"error": "broken"}, status_code=self.fail_status)
            return JSONResponse(build())

        return handler

    async def not_found(self, request: Request) -> Response:
        self.count(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        return JSONResponse({"error": "not found"}, status_code=404)

    # --- discovery endpoints, in each backend's real shape ------------------------------------

    def models(self) -> dict[str, Any]:
        created = int(time.time())
        if self.flavour == "vllm":  # vllm/entrypoints/openai/protocol.py ModelCard
            card = {
                "id": self.model,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": f"/models/{self.model}",
                "parent": None,
                "max_model_len": self.window,
                "permission": [{"id": "modelperm-1", "object": "model_permission"}],
            }
        elif self.flavour == "llamacpp":  # meta.n_ctx_train is the trained maximum
            card = {
                "id": self.model,
                "object": "model",
                "created": created,
                "owned_by": "llamacpp",
                "meta": {"vocab_type": 2, "n_vocab": 151936, "n_ctx_train": self.trained},
            }
        elif self.flavour == "openrouter":
            card = {
                "id": self.model,
                "canonical_slug": self.model,
                "name": "Test Model",
                "created": created,
                "context_length": self.window,
                "architecture": {"modality": "text->text", "tokenizer": "Other"},
                "pricing": {"prompt": "0.000001", "completion": "0.000002"},
                "top_provider": {
                    "context_length": self.window,
                    "max_completion_tokens": 4096,
                    "is_moderated": False,
                },
            }
        else:  # Ollama, LM Studio, oMLX, OpenAI: no window in the OpenAI model list
            name = self.model if ":" in self.model else self.model + ":latest"
            card = {
                "id": name if self.flavour == "ollama" else self.model,
                "object": "model",
                "created": created,
                "owned_by": "library" if self.flavour == "ollama" else "organization_owner",
            }
        return {"object": "list", "data": [card]}

    def props(self) -> Any:
        slot = {"id": 0, "n_ctx": self.window, "is_processing": False}
        if self.props_shape == "slots":
            return [slot, {**slot, "id": 1}]
        if self.props_shape == "top":
            return {"n_ctx": self.window, "total_slots": 1, "model_path": "/m.gguf"}
        return {
            "default_generation_settings": {"params": {"n_predict": -1}, "n_ctx": self.window},
            "total_slots": 1,
            "model_alias": self.model,
            "model_path": f"/models/{self.model}.gguf",
            "modalities": {"vision": False, "audio": False},
            "build_info": "b6000-abc1234",
        }

    def ollama_ps(self) -> dict[str, Any]:  # api/types.go ProcessModelResponse
        if not self.loaded:
            return {"models": []}
        name = self.model if ":" in self.model else self.model + ":latest"
        return {
            "models": [
                {
                    "name": name,
                    "model": name,
                    "size": 6_654_289_920,
                    "digest": "a80c4f17acd5" + "0" * 52,
                    "details": {"format": "gguf", "family": "llama", "parameter_size": "8.0B"},
                    "expires_at": "2030-01-01T00:00:00Z",
                    "size_vram": 6_654_289_920,
                    "context_length": self.window,
                }
            ]
        }

    def ollama_show(self) -> dict[str, Any]:  # the trained maximum: must never be used
        return {"model_info": {"llama.context_length": self.trained}, "parameters": ""}

    def lmstudio_models(self) -> dict[str, Any]:  # LM Studio REST API v0
        card: dict[str, Any] = {
            "id": self.model,
            "object": "model",
            "type": "llm",
            "publisher": "lmstudio-community",
            "arch": "qwen2",
            "compatibility_type": "gguf",
            "quantization": "Q4_K_M",
            "state": "loaded" if self.loaded else "not-loaded",
            "max_context_length": self.trained,
        }
        if self.loaded and self.loaded_context:
            card["loaded_context_length"] = self.window
        return {"object": "list", "data": [card]}

    # --- chat: the exact overflow body, or Ollama's silent truncation -------------------------

    async def chat(self, request: Request) -> Response:
        self.count(request)
        body = orjson.loads(await request.body())
        with self.lock:
            self.chat_bodies.append(body)
        forced = request.headers.get("x-fake-prompt-tokens")
        prompt = int(forced) if forced else len(orjson.dumps(body.get("messages"))) // 4
        if self.flavour == "ollama":
            self.loaded = True
            used = min(prompt, self.window)  # the tail that fit; the rest is dropped silently
            return JSONResponse(self.completion(used))
        if prompt >= self.window:
            status, error = OVERFLOW_BODIES[self.flavour](self.window, prompt)
            return JSONResponse(error, status_code=status)
        return JSONResponse(self.completion(prompt))

    def completion(self, prompt_tokens: int) -> dict[str, Any]:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 1,
                "total_tokens": prompt_tokens + 1,
            },
        }
