# syntax=docker/dockerfile:1.7
# The swerollout image: the operator, the agent runner, and the portable swerex
# bundle that rollout pods' init container copies into any task image.
#
#   docker build -t ghcr.io/swerollout/swerollout:0.1.0 .
#
# Stage 1 builds the bundle: a relocatable CPython (python-build-standalone's
# "install_only" build, statically linked against musl so it runs on any task
# image's libc) with swe-rex and its dependencies installed into it.
# Stage 2 builds the wheels of swerollout itself from the pinned lock.
# Stage 3 is the runtime image, non-root, with the bundle at /opt/swerex-bundle.

ARG PYTHON_VERSION=3.11
ARG PBS_RELEASE=20251014
ARG PBS_PYTHON=3.11.14

FROM python:${PYTHON_VERSION}-slim-bookworm AS bundle
ARG PBS_RELEASE
ARG PBS_PYTHON
ARG TARGETARCH=amd64
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl && rm -rf /var/lib/apt/lists/*
# musl builds have no dynamic dependency on the task image's glibc version.
RUN case "${TARGETARCH}" in \
      amd64) triple=x86_64-unknown-linux-musl ;; \
      arm64) triple=aarch64-unknown-linux-musl ;; \
      *) echo "unsupported arch ${TARGETARCH}" >&2; exit 1 ;; \
    esac \
 && curl -fsSL -o /tmp/python.tar.gz \
      "https://github.com/astral-sh/python-build-standalone/releases/download/${PBS_RELEASE}/cpython-${PBS_PYTHON}+${PBS_RELEASE}-${triple}-install_only.tar.gz" \
 && mkdir -p /opt/swerex-bundle \
 && tar -xzf /tmp/python.tar.gz -C /opt/swerex-bundle \
 && rm /tmp/python.tar.gz
COPY requirements.lock /tmp/requirements.lock
# Only swe-rex's runtime closure goes into the bundle (not torch, not kopf).
RUN /opt/swerex-bundle/python/bin/python3 -m pip install --no-cache-dir --no-compile \
      -c /tmp/requirements.lock swe-rex \
 && find /opt/swerex-bundle -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/swerex-bundle/python/bin/python3 -c "import swerex.server, uvicorn"

FROM python:${PYTHON_VERSION}-slim-bookworm AS wheels
RUN pip install --no-cache-dir uv==0.13.8
WORKDIR /src
COPY pyproject.toml requirements.lock README.md ./
COPY swerollout ./swerollout
COPY agent_runner ./agent_runner
COPY operator ./operator
# The runtime image needs neither torch (tiny-lm is a dev-mode policy) nor the
# dev tools; everything else comes from the lock so builds are reproducible.
RUN grep -vE '^(torch|nvidia-|cuda-|triton|pytest|mypy|moto|import-linter)' requirements.lock > /tmp/runtime.lock \
 && uv pip install --system --no-cache -r /tmp/runtime.lock \
 && uv pip install --system --no-cache --no-deps .

FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
LABEL org.opencontainers.image.title="swerollout" \
      org.opencontainers.image.description="Kubernetes operator and agent runner for agentic RL rollouts"
RUN apt-get update && apt-get install -y --no-install-recommends git patch && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin swerollout
COPY --from=wheels /usr/local/lib/python3.11/site-packages /usr/local/lib/python3.11/site-packages
COPY --from=wheels /usr/local/bin /usr/local/bin
COPY --from=bundle /opt/swerex-bundle /opt/swerex-bundle
ENV SWEROLLOUT_BUNDLE_SRC=/opt/swerex-bundle \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
ENTRYPOINT []
CMD ["python", "-m", "swerollout_operator"]
