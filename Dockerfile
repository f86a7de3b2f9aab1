# syntax=docker/dockerfile:1
# One image for every fedlab role on Kubernetes (helm/federation): Ray head and source nodes,
# the warehouse (Spark driver) and its Spark executors, the load generator, chaos and the checker.
#
#   docker build -t fedlab:0.1.0 .
#   kind load docker-image fedlab:0.1.0          # or push it to your registry
#
# It runs as the unprivileged user 10001 and works with a read-only root filesystem (the chart
# mounts an emptyDir on /tmp).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: the project and its dependencies in a virtual environment ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/fedlab/venv
ENV PATH=/opt/fedlab/venv/bin:$PATH
COPY pyproject.toml README.m[d] ./
COPY proto ./proto
COPY fedlab ./fedlab
COPY fedmodel ./fedmodel
COPY fedio ./fedio
COPY source_node ./source_node
COPY warehouse ./warehouse
COPY loadgen ./loadgen
COPY checker ./checker
COPY simulation ./simulation
COPY bench ./bench
COPY live ./live
COPY roles ./roles
COPY nemesis ./nemesis
COPY setup.py ./
# The install generates the gRPC stubs from proto/ (setup.py), so the installed package carries them.
RUN pip install . \
 && python -c "import fedlab.fedmodel.wire, fedlab.cli"

# ---- jars: Delta Lake's jars and hadoop-aws's for s3a:// (with the AWS SDK modules it needs, 13 MB),
# fetched once with Maven into the jar cache that warehouse.spark_session reads first (no resolver,
# no network at run time) ----
FROM ${PYTHON_IMAGE} AS jars
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/fedlab/venv /opt/fedlab/venv
COPY helm/image/prefetch_delta_jars.py /tmp/prefetch_delta_jars.py
ENV PATH=/opt/fedlab/venv/bin:$PATH FEDLAB_JARS_DIR=/opt/fedlab/jars
RUN python /tmp/prefetch_delta_jars.py && chmod -R a+rX /opt/fedlab/jars

# ---- the clock shim: the node nemesis's wrong wall clock (helm/image/clock_offset.c) ----
FROM ${PYTHON_IMAGE} AS shim
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
COPY helm/image/clock_offset.c /tmp/clock_offset.c
RUN gcc -O2 -Wall -shared -fPIC -o /tmp/clock_offset.so /tmp/clock_offset.c -ldl

# ---- runtime ----
FROM ${PYTHON_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java \
 && groupadd --gid 10001 fedlab \
 && useradd --uid 10001 --gid 10001 --home-dir /home/fedlab --create-home --shell /usr/sbin/nologin fedlab
COPY --from=build /opt/fedlab/venv /opt/fedlab/venv
COPY --from=jars /opt/fedlab/jars /opt/fedlab/jars
COPY --chmod=0755 helm/image/fedlab-entrypoint.sh /usr/local/bin/fedlab-entrypoint
COPY --chmod=0755 --from=shim /tmp/clock_offset.so /opt/fedlab/lib/clock_offset.so
ENV PATH=/opt/fedlab/venv/bin:$PATH \
    JAVA_HOME=/opt/java \
    SPARK_HOME=/opt/fedlab/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/fedlab/venv/bin/python \
    FEDLAB_JARS_DIR=/opt/fedlab/jars \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RAY_USAGE_STATS_ENABLED=0
USER 10001:10001
WORKDIR /home/fedlab
ENTRYPOINT ["fedlab-entrypoint"]
CMD ["fedlab", "--help"]
