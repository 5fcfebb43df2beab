# shrink-proxy container image: slim Python, non-root, tiktoken encodings baked in.
#   docker build -t shrink-proxy .
#   docker run --rm -p 127.0.0.1:8080:8080 -e SHRINK_UPSTREAM_URL=http://host.docker.internal:11434/v1 shrink-proxy
# Every setting comes from the environment (SHRINK_*), e.g. `docker run --env-file config/vllm.env`.
# Offline builds: see docker/tiktoken-cache/README.md.

ARG PYTHON_VERSION=3.12

# --- build: install the package into a venv, and fetch the encodings -------------------------
FROM python:${PYTHON_VERSION}-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv

WORKDIR /src
# Only what the package needs (no tests, no test extras): edits elsewhere keep this layer cached.
# The redis extra (redis-py, pure Python, no dependencies) lets the same image run as one of
# several replicas sharing state (SHRINK_STORE_URL, compose profile `replicas`).
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN /opt/venv/bin/pip install ".[redis]"

# Files already in docker/tiktoken-cache/ are used as they are; missing ones are downloaded.
COPY docker/tiktoken-cache/ /opt/tiktoken-cache/
COPY docker/bake_tiktoken.py ./
RUN /opt/venv/bin/python bake_tiktoken.py /opt/tiktoken-cache \
    && rm -f /opt/tiktoken-cache/README.md

# --- runtime -----------------------------------------------------------------------------------
FROM python:${PYTHON_VERSION}-slim

RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin shrink

COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/tiktoken-cache /opt/tiktoken-cache

# SHRINK_HOST=0.0.0.0: inside a container the proxy must listen on the container's interface;
# who can reach it is decided by the port publishing (compose publishes on 127.0.0.1 only).
# DL3064 takes the TOKEN in TIKTOKEN_CACHE_DIR for a secret; it is a folder name.
# hadolint ignore=DL3064
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TIKTOKEN_CACHE_DIR=/opt/tiktoken-cache \
    SHRINK_HOST=0.0.0.0 \
    SHRINK_PORT=8080

# An empty working directory: the settings also read ./.env, and nothing should be found there
# unless it is mounted on purpose.
WORKDIR /app
# Numeric, so runtimes that check runAsNonRoot can tell without reading /etc/passwd.
USER 10001:10001
EXPOSE 8080

# slim has no curl: ask /healthz with the standard library, on whatever port is configured.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('SHRINK_PORT', '8080') + '/healthz', timeout=4)"]

CMD ["shrink-proxy", "serve"]
