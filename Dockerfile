# syntax=docker/dockerfile:1.7
# The swerollout image: the operator, the agent runner, and the portable swerex
# bundle that rollout pods' init container copies into any task image.
#
#   docker build -t ghcr.io/swerollout/swerollout:0.1.0 .
#
# Offline (no registry, no GitHub), as `swerollout cluster build-image` does it with buildah
# from a local Debian base made by mmdebstrap (docs/real-node.md):
#
#   buildah bud --network=host --pull-never \
#     --build-arg BASE_IMAGE=swerollout.local/base-python:bookworm \
#     --build-arg BUNDLE_PYTHON=base -t swerollout.local/swerollout:dev .
#
# Stage 1 builds the bundle: a relocatable CPython with swe-rex and its
# dependencies installed into it. BUNDLE_PYTHON=pbs (default) downloads
# python-build-standalone's "install_only" build, statically linked against musl
# so it runs on any task image's libc; BUNDLE_PYTHON=base relocates the base
# image's own Debian CPython instead (offline; it needs glibc >= 2.36 and libz,
# libexpat, libssl3, libffi8 in the task image).
# Stage 2 installs swerollout and its runtime lock into a venv at /opt/swerollout
# (a venv works on any base, whatever its Python's layout).
# Stage 3 is the runtime image, non-root, with the bundle at /opt/swerex-bundle.

ARG BASE_IMAGE=python:3.11-slim-bookworm
ARG BUNDLE_PYTHON=pbs
ARG PBS_RELEASE=20251014
ARG PBS_PYTHON=3.11.14

FROM ${BASE_IMAGE} AS bundle-python-pbs
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

# CPython finds its prefix from where its executable lies (the lib/python3.X/os.py
# landmark), so the interpreter and its stdlib copied side by side run from there.
FROM ${BASE_IMAGE} AS bundle-python-base
RUN exe="$(readlink -f "$(command -v python3)")" \
 && stdlib="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')" \
 && mkdir -p /opt/swerex-bundle/python/bin /opt/swerex-bundle/python/lib \
 && cp "$exe" /opt/swerex-bundle/python/bin/ \
 && ln -s "$(basename "$exe")" /opt/swerex-bundle/python/bin/python3 \
 && cp -a "$stdlib" /opt/swerex-bundle/python/lib/ \
 && /opt/swerex-bundle/python/bin/python3 -c "import sys; assert sys.prefix == '/opt/swerex-bundle/python', sys.prefix"

FROM ${BASE_IMAGE} AS venv
RUN python3 -m venv /opt/swerollout && /opt/swerollout/bin/pip install --no-cache-dir uv==0.13.8

FROM venv AS wheels
WORKDIR /src
COPY pyproject.toml requirements-runtime.lock README.md ./
# Exactly the locked runtime set (the `image` extra, `make lock`), with --no-deps: nothing
# is resolved here, so no package or version the lock does not name can come in, and
# `uv pip check` fails the build if the lock misses a dependency. The dependencies go in
# before our sources, so a source change reuses this layer.
# Bytecode is compiled here: the runtime user cannot write it (and PYTHONDONTWRITEBYTECODE
# says not to), so without it every operator and runner start compiled all it imported
# from source (about 1.8 and 0.8 CPU-s a start).
RUN /opt/swerollout/bin/uv pip install --python /opt/swerollout/bin/python --no-cache --no-deps --compile-bytecode -r requirements-runtime.lock \
 && /opt/swerollout/bin/uv pip check --python /opt/swerollout/bin/python
COPY swerollout ./swerollout
COPY agent_runner ./agent_runner
COPY operator ./operator
# Our packages only (uv's --compile-bytecode would rewrite every dependency's too, into this layer).
RUN /opt/swerollout/bin/uv pip install --python /opt/swerollout/bin/python --no-cache --no-deps . \
 && site="$(/opt/swerollout/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
 && /opt/swerollout/bin/python -m compileall -q "$site/swerollout" "$site/agent_runner" "$site/swerollout_operator"
# The runner's tokenizers, compiled (swerollout/runner_tokenizer.py): a runner then loads its
# tokenizer with `tokenizers` alone instead of importing transformers (about 2 CPU-s a cold
# start). About 9 MB each; a tokenizer not listed loads with transformers at run time.
ARG RUNNER_TOKENIZERS="qwen-2.5 qwen-3 glm-4 deepseek-v3"
# From / : the installed package, not this stage's /src copy of it.
RUN cd / && SWEROLLOUT_CACHE=/tmp/tokenizer-cache /opt/swerollout/bin/python -m swerollout.runner_tokenizer \
      /opt/swerollout/share/swerollout/tokenizers ${RUNNER_TOKENIZERS} \
 && rm -rf /tmp/tokenizer-cache

FROM bundle-python-${BUNDLE_PYTHON} AS bundle
COPY --from=venv /opt/swerollout /opt/swerollout
COPY requirements-runtime.lock /tmp/requirements-runtime.lock
# Only swe-rex's runtime closure goes into the bundle (not kopf), into the bundle
# interpreter's own site directory, at the runtime lock's pins (it holds that closure).
RUN site="$(/opt/swerex-bundle/python/bin/python3 -c 'import site; print(site.getsitepackages()[0])')" \
 && /opt/swerollout/bin/uv pip install --no-cache --python /opt/swerex-bundle/python/bin/python3 \
      --target "$site" -c /tmp/requirements-runtime.lock swe-rex \
 && find /opt/swerex-bundle -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/swerex-bundle/python/bin/python3 -c "import swerex.server, uvicorn"

FROM ${BASE_IMAGE} AS runtime
LABEL org.opencontainers.image.title="swerollout" \
      org.opencontainers.image.description="Kubernetes operator and agent runner for agentic RL rollouts"
RUN apt-get update && apt-get install -y --no-install-recommends git patch && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin swerollout
COPY --from=wheels /opt/swerollout /opt/swerollout
COPY --from=bundle /opt/swerex-bundle /opt/swerex-bundle
ENV PATH=/opt/swerollout/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SWEROLLOUT_BUNDLE_SRC=/opt/swerex-bundle \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
ENTRYPOINT []
CMD ["python", "-m", "swerollout_operator"]
