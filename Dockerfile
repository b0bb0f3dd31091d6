# syntax=docker/dockerfile:1
# Container image of the processor: `processor worker`, the follower, the CLI.
#
#   docker build -t kafka-tiered-processor .                                  # worker + CLI (+ MSK IAM)
#   docker build --build-arg EXTRAS=spark -t kafka-tiered-processor:spark .   # + Spark sources, the audit
#   (to run it from a cluster, tag it REGISTRY/kafka-tiered-processor:TAG, push it, and set the Helm
#   chart's image.repository and image.tag: the chart has no default image)
#   (release builds also pass --build-arg VERSION=... REVISION=$(git rev-parse HEAD) CREATED=<RFC 3339>)
#
# Two stages: the builder has the compilers (for any dependency without a wheel for this platform)
# and installs everything into a virtual environment; the final image copies only that environment
# onto a clean slim base, so no compiler, header or pip cache ships. Runs as a non-root user with a
# read-only root file system in mind: everything it writes goes to /data (PROCESSOR_DATA_DIR) or /tmp.
#
# Dependencies come from the hash-pinned locks in requirements/ (`make lock` writes them from
# pyproject.toml), installed in a layer of their own before the source is copied: a change to the
# code rebuilds only the last layers, and every build of a commit gets the same packages.

# The base, pinned by digest: the tag says which Python and which Debian release (trixie, 13), the
# digest makes the build repeatable. The digest is the multi-arch index digest of
# python:3.11-slim-trixie (Python 3.11.16) as docker resolved it in public build logs; it was not
# read from the registry itself (unreachable where this file was written). Check or move it with
#   docker buildx imagetools inspect python:3.11-slim-trixie --format '{{json .Manifest.Digest}}'
# and keep the tag's release and the JRE package below in step.
ARG PYTHON_IMAGE=python:3.11-slim-trixie@sha256:da047cb8f9d1d98e5c070f5300ba9f7274e33b8fc0e5be5ed88740aed1b95ba9

FROM ${PYTHON_IMAGE} AS builder
# Extras to install: "" (default) or "spark" (pyspark, pyarrow, pandas; also needs a JRE at run time,
# see the runtime stage). Each has its lock: requirements/worker.txt or requirements/spark.txt. Both
# locks include the msk extra (aws-msk-iam-sasl-signer-python), so either image authenticates to
# Amazon MSK with IAM (the chart's kafka.sasl.oauthTokenProvider=aws-msk-iam) without a build of its own,
# the gcs and azure extras (each cloud's storage client and credential chain: PROCESSOR_STORAGE=gcs
# or azure), and what requirements/image.in adds (cryptography, which `processor` imports at start).
ARG EXTRAS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# 1. The locked dependencies only (this layer is reused until a lock changes); the build backend goes
#    into a venv of its own, so it never mixes with what ships.
COPY requirements ./requirements
RUN lock="requirements/${EXTRAS:-worker}.txt" \
 && if [ ! -f "$lock" ]; then echo "no lock $lock for EXTRAS=$EXTRAS (worker or spark)" >&2; exit 2; fi \
 && pip install --require-hashes --no-deps -r "$lock" \
 && python -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes --no-deps -r requirements/build.txt
# 2. The project itself: a wheel built with the locked backend, installed with no further downloads.
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY processor ./processor
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/dist . \
 && pip install --no-deps /tmp/dist/*.whl \
 && pip check \
 && processor --version

FROM ${PYTHON_IMAGE} AS runtime
ARG EXTRAS=""
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
# where the image was built from (your repository's URL: --build-arg SOURCE=...)
ARG SOURCE=unknown
ARG PYTHON_IMAGE
# Open Container Initiative annotations (https://specs.opencontainers.org/image-spec/annotations/).
LABEL org.opencontainers.image.title="kafka-tiered-processor" \
      org.opencontainers.image.description="Tiered storage for Apache Kafka as a stream processor: offload workers, read-only followers, the CLI and (EXTRAS=spark) the audit" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.vendor="platform-team" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
# Spark needs a Java runtime (not a compiler); installed only with EXTRAS=spark. Debian 13 (trixie),
# the base's release, ships OpenJDK 21 (17 is gone from it); pyspark 4 supports Java 17 and 21.
# tests/deploy/test_dockerfile.py checks the package name against trixie's package list.
RUN if [ "$EXTRAS" = "spark" ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends openjdk-21-jre-headless \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && groupadd --system --gid 10001 processor \
 && useradd --system --uid 10001 --gid processor --home-dir /data --shell /usr/sbin/nologin processor \
 && mkdir -p /data \
 && chown processor:processor /data
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PROCESSOR_DATA_DIR=/data \
    PROCESSOR_WEB_HOST=0.0.0.0 \
    PROCESSOR_WEB_PORT=6066
WORKDIR /data
VOLUME ["/data"]
EXPOSE 6066
USER 10001:10001
ENTRYPOINT ["processor"]
CMD ["worker"]
