# syntax=docker/dockerfile:1
# One image for both roles: `gpugraph agent` (DaemonSet) and `gpugraph serve` (Deployment).
# Everything installed is pure Python or ships manylinux wheels for amd64 and arm64,
# so `docker buildx build --platform linux/amd64,linux/arm64 .` needs no cross-compiler.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG NODE_IMAGE=node:20.19.5-bookworm-slim

# --- GraphiQL's and the cluster map's browser bundles, baked in because clusters
# are often air-gapped. Plain JavaScript for any platform: built once, natively,
# not under emulation.
FROM --platform=$BUILDPLATFORM ${NODE_IMAGE} AS web
WORKDIR /src/web
COPY web/package.json web/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY web/build.mjs ./
RUN node build.mjs /src/api/static/graphiql
COPY web/map ./map
RUN node map/build.mjs /src/api/static/map

# --- The Python application and its pinned dependencies, in a virtualenv.
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/gpugraph
WORKDIR /src
COPY pyproject.toml constraints.txt README.md LICENSE ./
# The pins reach the isolated build environment (setuptools) too: older pip reads
# PIP_CONSTRAINT there, pip >= 25.3 PIP_BUILD_CONSTRAINT.
ENV PIP_CONSTRAINT=/src/constraints.txt \
    PIP_BUILD_CONSTRAINT=/src/constraints.txt
COPY api ./api
COPY graph_schema ./graph_schema
COPY node_resolver ./node_resolver
COPY --from=web /src/api/static/graphiql ./api/static/graphiql
COPY --from=web /src/api/static/map ./api/static/map
RUN /opt/gpugraph/bin/pip install -c constraints.txt . \
    && /opt/gpugraph/bin/gpugraph --help \
    && /opt/gpugraph/bin/gpugraph --version

# --- Runtime: the virtualenv on a slim base, no compilers, no npm.
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="gpugraph" \
      org.opencontainers.image.description="Which pod, and which process inside it, is using this GPU." \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 gpugraph \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin gpugraph
COPY --from=builder /opt/gpugraph /opt/gpugraph
ENV PATH=/opt/gpugraph/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root by default (the server). The agent's DaemonSet runs it as uid 0 with
# every capability dropped, to read the host's /proc and the containerd socket.
USER 10001:10001
EXPOSE 8000 50051
ENTRYPOINT ["gpugraph"]
CMD ["--help"]
