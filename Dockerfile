# syntax=docker/dockerfile:1
# Container image of the processor: `processor worker`, the follower, the CLI.
#
#   docker build -t kafka-tiered-processor .                          # worker + CLI
#   docker build --build-arg EXTRAS=spark -t kafka-tiered-processor:spark .   # + Spark sources, Parquet
#
# Two stages: the builder has the compilers (for any dependency without a wheel for this platform)
# and installs everything into a virtual environment; the final image copies only that environment
# onto a clean slim base, so no compiler, header or pip cache ships. Runs as a non-root user with a
# read-only root file system in mind: everything it writes goes to /data (PROCESSOR_DATA_DIR) or /tmp.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
# Extras to install: "" (default) or "spark" (pyspark, pyarrow, pandas; also needs a JRE at run time,
# see JAVA below).
ARG EXTRAS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY processor ./processor
RUN pip install --upgrade pip \
 && if [ -n "$EXTRAS" ]; then pip install ".[${EXTRAS}]"; else pip install .; fi \
 && processor --version

FROM ${PYTHON_IMAGE} AS runtime
ARG EXTRAS=""
# Spark needs a Java runtime (not a compiler); installed only with EXTRAS=spark.
RUN if [ "$EXTRAS" = "spark" ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
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
