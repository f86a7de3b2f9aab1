"""Image build step: put Delta Lake's jars, and the object-store packages (hadoop-aws with the
AWS SDK modules it needs, warehouse.spark_session.OBJECT_STORE_PACKAGES), where
warehouse.spark_session looks first.

warehouse.spark_session starts Spark with `spark.jars` from the fedlab jar cache (one folder per
jar set under $FEDLAB_JARS_DIR, each listed in its COMPLETE marker) when it is filled, so a
container starts with no resolver, no network and a read-only root filesystem; the Spark driver
then serves the jars to its executors. This resolves each set once with Spark's own Ivy
resolution (warehouse.spark_session.with_ivy_packages, as a session without the cache does) and
lays its jars out in its folder, leaving out Spark's and Scala's artifacts, which pyspark ships.
With Maven on PATH it uses warehouse.spark_session.ensure_delta_jars instead, which fills the
same folders.
"""

import shutil
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from fedlab.warehouse.spark_session import ensure_delta_jars, jar_sets, with_ivy_packages


def main() -> int:
    if shutil.which("mvn"):
        print("jars:", ", ".join(Path(j).name for j in ensure_delta_jars(object_store=True)))
        return 0
    for jar_set in jar_sets(object_store=True):
        if jar_set.cached():
            continue
        ivy = Path(tempfile.mkdtemp(prefix="ivy-"))
        builder = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                   .config("spark.jars.ivy", str(ivy)))
        with_ivy_packages(builder, sets=[jar_set]).getOrCreate().stop()
        jar_set.folder.mkdir(parents=True, exist_ok=True)
        names = []
        for jar in sorted((ivy / "jars").glob("*.jar")):
            if jar.name.startswith(("org.scala-lang_", "org.apache.spark_")):
                continue
            shutil.copy(jar, jar_set.folder / jar.name)
            names.append(jar.name)
        wanted = [c.split(":")[1] for c in jar_set.coordinates]
        if missing := [a for a in wanted if not any(f"_{a}-" in n for n in names)]:
            print(f"no jar of {missing} among {names}", file=sys.stderr)
            return 1
        (jar_set.folder / "COMPLETE").write_text("\n".join(names) + "\n")
        shutil.rmtree(ivy, ignore_errors=True)
        print("jars:", ", ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
