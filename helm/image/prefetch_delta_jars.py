"""Image build step: put Delta Lake's jars, and hadoop-aws with the AWS SDK modules it needs
(warehouse.spark_session.OBJECT_STORE_PACKAGES), where warehouse.spark_session looks first.

warehouse.spark_session starts Spark with `spark.jars` from the fedlab jar cache
($FEDLAB_JARS_DIR/<artifact>-<version>-s3a-<hash>/, listed in its COMPLETE marker) when it is
filled, so a container starts with no resolver, no network and a read-only root filesystem; the
Spark driver then serves the jars to its executors. This resolves them once with Spark's own Ivy
resolution (warehouse.spark_session.with_ivy_packages, as a session without the cache does) and
lays the jars out in that cache, leaving out Spark's and Scala's artifacts, which pyspark ships.
With Maven on PATH it uses warehouse.spark_session.ensure_delta_jars instead, which fills the same
cache.
"""

import shutil
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from warehouse.spark_session import cached_delta_jars, ensure_delta_jars, jar_cache_dir, with_ivy_packages


def main() -> int:
    if cached_delta_jars():
        return 0
    if shutil.which("mvn"):
        print("Delta jars:", ", ".join(Path(j).name for j in ensure_delta_jars()))
        return 0
    ivy = Path(tempfile.mkdtemp(prefix="ivy-"))
    builder = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
               .config("spark.jars.ivy", str(ivy)))
    with_ivy_packages(builder).getOrCreate().stop()
    target = jar_cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    names = []
    for jar in sorted((ivy / "jars").glob("*.jar")):
        if jar.name.startswith(("org.scala-lang_", "org.apache.spark_")):
            continue
        shutil.copy(jar, target / jar.name)
        names.append(jar.name)
    if not any("delta-spark" in n for n in names):
        print(f"no delta-spark jar among {names}", file=sys.stderr)
        return 1
    (target / "COMPLETE").write_text("\n".join(names) + "\n")
    shutil.rmtree(ivy, ignore_errors=True)
    print("Delta jars:", ", ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
