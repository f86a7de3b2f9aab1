#!/bin/bash
# Entrypoint of the fedlab image (every role: source, warehouse, load, chaos, check, Ray head,
# Spark executor). The root filesystem is read-only at run time; /tmp is a writable emptyDir.
#
#   fedlab-entrypoint executor      a Spark executor (Spark on Kubernetes starts executor pods
#                                   with this argument and its settings in SPARK_* variables)
#   fedlab-entrypoint CMD [ARGS]    any command (fedlab ..., ray ..., sh -c ...)
#
# Delta's jars come from $FEDLAB_JARS_DIR (filled when the image was built, see
# prefetch_delta_jars.py). The process runs under tini, which forwards signals and reaps
# orphans (Ray daemons, Spark).
set -euo pipefail

# Spark's scratch space (spark.local.dir) on the writable /tmp.
if [ -w /tmp ]; then
  mkdir -p /tmp/spark-local
fi

if [ "${1:-}" = "executor" ]; then
  shift
  # An executor copies the jars and files the driver serves into its working directory.
  cd /tmp/spark-local
  java_opts=()
  i=0
  while var="SPARK_JAVA_OPT_${i}"; [ -n "${!var+x}" ]; do
    java_opts+=("${!var}")
    i=$((i + 1))
  done
  classpath="${SPARK_HOME}/jars/*"
  if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then
    classpath="${classpath}:${SPARK_EXTRA_CLASSPATH}"
  fi
  exec tini -g -- "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
    -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
    -cp "${classpath}" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "${SPARK_DRIVER_URL}" \
    --executor-id "${SPARK_EXECUTOR_ID}" \
    --cores "${SPARK_EXECUTOR_CORES}" \
    --app-id "${SPARK_APPLICATION_ID}" \
    --hostname "${SPARK_EXECUTOR_POD_IP}" \
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
    --podName "${SPARK_EXECUTOR_POD_NAME}" \
    "$@"
fi

if [ "$#" -eq 0 ]; then
  set -- fedlab --help
fi
exec tini -g -- "$@"
