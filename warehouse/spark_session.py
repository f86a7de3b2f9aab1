"""The warehouse's Spark session, with Delta Lake enabled from delta-spark's own JVM jars.

pyspark ships no Delta jar, so the session needs `io.delta:delta-spark_<spark>_<scala>:<version>`
(the coordinate `delta.configure_spark_with_delta_pip` would ask for) and its dependencies.
Where they come from, first hit wins:

1. the fedlab jar cache (`~/.cache/fedlab/jars/<artifact>-<version>/`, or under
   `$FEDLAB_JARS_DIR`), filled by `ensure_delta_jars()` (`python -m fedlab.warehouse.spark_session`):
   passed as `spark.jars`, no resolver is asked, so a warmed machine starts offline;
2. Ivy, through `with_ivy_packages` (the coordinate in `spark.jars.packages`, cached in
   ~/.ivy2.5.2);
3. if Ivy fails (a resolver host unreachable), Maven fetches the same artifacts into the fedlab
   jar cache (`ensure_delta_jars`) and the session starts from those jars.

`FEDLAB_DELTA_JARS=ivy|maven` forces one route (for tests of the fallback and for debugging).

A session for Delta tables under s3a:// (`spark_session(object_store=True)`, `on_object_store`)
gets the object-store packages too, by the same route, into a folder of the same cache
(`jar_sets`): hadoop-aws at the Hadoop version pyspark ships, and the AWS SDK modules S3A runs
on. hadoop-aws declares the whole SDK instead (software.amazon.awssdk:bundle, 686 MB: every AWS
service, with shaded copies of its libraries). The s3, s3-transfer-manager and sts modules with
their dependencies are 13 MB (37 jars), less the libraries pyspark ships (netty, Apache
HttpClient, commons-codec, slf4j), so that one copy of each, pyspark's, is on the class path.
Other sessions go without: 37 more jars cost 0.4 s of a session's start (3.5 -> 4.2 s, the median
of six fresh processes each, with their class data archives; measured 2026-12-06).

The session is sized for a laptop: 2 shuffle partitions, no UI, WARN logs, and the JVM's JIT
stopped at its first tier (C1). The warehouse runs many small, short Spark jobs (a Delta commit
a batch) whose code never gets hot enough for C2 to pay back: on 2 cores, C2's compiler threads
took 11 of the JVM's 23 CPU seconds over a 20 s load at 500 txn/s and C1 takes 1 of 15 (the
whole JVM: 23.4 -> 15.3 s, start-up 72 -> 64 s). Two hooks for tuning without code changes:
`FEDLAB_SPARK_CONF="key=value,key=value"` (extra Spark settings) and `FEDLAB_JAVA_OPTS` (driver
JVM options, replacing the default `JAVA_OPTS`).

The local file system is fedlab's own (warehouse/jvm, `local_fs_jar()`): Hadoop's, without its
native library, starts a `chmod` or `readlink` process for nearly every file a Delta commit
writes or renames (24 per warehouse batch). The jar is compiled once with the JDK's javac into
the jar cache; without javac the session keeps Hadoop's file system and says so in the log, and
so does a session whose executors run elsewhere (Kubernetes), which would need the jar too.

The JVM starts from a class data archive (`class_archive()`: the classes a Delta session loads,
dumped once by `python -m fedlab.warehouse.spark_session` into the jar cache, which `make` runs at
install): a session's start 9.2 -> 4.3-5.0 s and its first job 3.3 -> 1.4 s on this machine. A
session whose archive is missing or stale (another JDK, other jars) starts without one, as before.

The JVM runs at a lower CPU priority (nice `JVM_NICE`, `FEDLAB_JVM_NICE` overrides, 0 keeps it):
its Delta batches are pipelined behind the core, while the sources and the warehouse's Python
are on every transaction's path. On a saturated machine the scheduler then serves those first,
and a Delta batch that takes longer simply holds more transactions. Measured at 800 txn/s
offered (SF 0.1 Q3, 2 cores): 648 -> 794 txn/s achieved, sub-query retries 4,598 -> 127.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SCALA_VERSION = "2.13"
# C1 alone reserves a 48 MB code cache, which Spark and Delta fill within minutes; the JIT then
# stops and the code cache sweeper runs (measured: 20% more JVM CPU per Delta batch).
JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"

_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Delta reconstructs table snapshots with this many partitions (default 50): one is plenty.
    "spark.databricks.delta.snapshotPartitions": "2",
    # No checksum file (_delta_log/N.crc) per commit: no reader needs it, and writing it was 17%
    # of the JVM's samples at 100 txn/s; per batch 14.6-21.1 -> 12.2-18.8 ms of JVM CPU
    # (fedlab bench --profile, three trials each; docs/results.md).
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
    # The initial materialisation hands Spark the sources' snapshots as Arrow batches: at SF 1
    # (6M lineitem rows) the default 1 GB heap ran out reading them.
    "spark.driver.memory": "4g",
}


JVM_NICE = 10
# hadoop-aws must be the Hadoop version of pyspark's jars/hadoop-client-api-*.jar (a test pins it)
# and the SDK modules the version of the bundle it declares (its POM's dependency).
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"
AWS_SDK_VERSION = "2.35.4"
OBJECT_STORE_PACKAGES = (HADOOP_AWS, *(f"software.amazon.awssdk:{module}:{AWS_SDK_VERSION}"
                                       for module in ("s3", "s3-transfer-manager", "sts")))
OBJECT_STORE_EXCLUDES = ("software.amazon.awssdk:bundle", "io.netty:*", "org.apache.httpcomponents:*",
                         "commons-codec:*", "org.slf4j:*")
_JVM_SOURCES = Path(__file__).resolve().parent / "jvm"
LOCAL_FS_CONF = {"spark.hadoop.fs.file.impl": "fedlab.hadoop.LocalFileSystem",
                 "spark.hadoop.fs.AbstractFileSystem.file.impl": "fedlab.hadoop.LocalFs",
                 # S3A buffers uploads on disk through Hadoop's LocalFileSystem class, which
                 # fedlab's is not (FileSystem.getLocal casts to it): in memory instead.
                 "spark.hadoop.fs.s3a.fast.upload.buffer": "bytebuffer"}


def delta_coordinate() -> str:
    """The Maven coordinate of delta-spark for the installed pyspark and delta-spark wheels.

    Mirrors `configure_spark_with_delta_pip`: io.delta:delta-spark_<spark major.minor>_2.13:<ver>.
    """
    import pyspark

    spark_mm = ".".join(pyspark.__version__.split(".")[:2])
    version = importlib.metadata.version("delta_spark")
    return f"io.delta:delta-spark_{spark_mm}_{SCALA_VERSION}:{version}"


@dataclass(frozen=True)
class JarSet:
    """Maven artifacts fetched together, with their runtime dependencies less `excludes`
    (group:artifact, `*` for any artifact), into one folder of the jar cache."""

    coordinates: tuple[str, ...]
    excludes: tuple[str, ...] = ()

    @property
    def folder(self) -> Path:
        """<artifact>-<version> of the first coordinate, and a hash of the rest when there is more,
        so that a changed set is fetched anew."""
        base = Path(os.environ.get("FEDLAB_JARS_DIR") or Path.home() / ".cache" / "fedlab" / "jars")
        _, artifact, version = self.coordinates[0].split(":")
        rest = " ".join(self.coordinates[1:] + self.excludes)
        return base / (f"{artifact}-{version}" + (f"-{hashlib.sha256(rest.encode()).hexdigest()[:8]}" if rest else ""))

    def cached(self) -> list[str]:
        """The jars of its completed Maven fetch (listed in the COMPLETE marker), or [] if none."""
        marker = self.folder / "COMPLETE"
        found = [str(self.folder / name) for name in marker.read_text().split()] if marker.is_file() else []
        return found if found and all(os.path.isfile(j) for j in found) else []


def jar_sets(object_store: bool = False) -> list[JarSet]:
    """Delta's jars, and with `object_store` the object-store packages'."""
    delta = JarSet((delta_coordinate(),))
    return [delta, JarSet(OBJECT_STORE_PACKAGES, OBJECT_STORE_EXCLUDES)] if object_store else [delta]


def on_object_store(path: str) -> bool:
    """Whether Delta tables at `path` need the object-store packages (an s3a:// URI)."""
    return str(path).startswith("s3a://")


def jar_cache_dir() -> Path:
    """Where Maven-fetched Delta jars live, one folder per coordinate (those of the object-store
    packages beside it)."""
    return jar_sets()[0].folder


def cached_delta_jars(object_store: bool = False) -> list[str]:
    """The jars of completed Maven fetches (each listed in its folder's COMPLETE marker) of Delta's
    set, and the object-store packages' with `object_store`; [] unless every one is there."""
    found = [jar_set.cached() for jar_set in jar_sets(object_store)]
    return [jar for jars in found for jar in jars] if all(found) else []


def ensure_delta_jars(object_store: bool = False, timeout: float = 600.0) -> list[str]:
    """Fetches delta-spark (and with `object_store` the object-store packages) with its runtime
    dependencies with Maven into the jar cache (idempotent).

    Returns the jar paths. Spark's own artifacts and Scala are excluded: pyspark ships them, as
    Spark's Ivy resolution excludes them too. Each folder is filled in a temporary sibling and
    renamed into place, so an interrupted fetch never leaves a half-filled cache behind.
    """
    for jar_set in jar_sets(object_store):
        if not jar_set.cached():
            _fetch(jar_set, timeout)
    return cached_delta_jars(object_store)


def _fetch(jar_set: JarSet, timeout: float) -> None:
    if shutil.which("mvn") is None:
        raise RuntimeError("Delta jars are not cached and `mvn` is not on PATH to fetch them")
    wanted = [f"{artifact}-{version}.jar" for _, artifact, version in (c.split(":") for c in jar_set.coordinates)]
    target = jar_set.folder
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(_pom(jar_set))
        out = Path(tmp) / "jars"
        cmd = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
               f"-DoutputDirectory={out}", "-DincludeScope=runtime",
               "-DexcludeGroupIds=org.apache.spark,org.scala-lang"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or not out.is_dir():
            tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
            raise RuntimeError(f"mvn could not fetch {', '.join(jar_set.coordinates)}:\n" + "\n".join(tail))
        names = sorted(p.name for p in out.glob("*.jar"))
        if set(wanted) - set(names):
            raise RuntimeError(f"mvn finished but {sorted(set(wanted) - set(names))} are not among {names}")
        (out / "COMPLETE").write_text("\n".join(names) + "\n")
        if not jar_set.cached():  # another process may have finished first: keep its copy
            shutil.rmtree(target, ignore_errors=True)
            out.rename(target)


def local_fs_jar() -> str | None:
    """The jar of fedlab's local file system (warehouse/jvm), compiled once against pyspark's
    Hadoop API into the jar cache under a name that carries its sources' hash; None, with a
    warning, where no javac is found (Hadoop's own local file system then serves)."""
    sources = sorted(_JVM_SOURCES.rglob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    jar = jar_cache_dir().parent / f"fedlab-local-fs-{digest}.jar"
    if jar.is_file():
        return str(jar)
    java_home = os.environ.get("JAVA_HOME")
    javac = shutil.which("javac") or (str(Path(java_home) / "bin" / "javac") if java_home else None)
    if javac is None or not Path(javac).exists():
        log.warning("javac not found: Delta commits use Hadoop's local file system, which starts a process "
                    "for most files it writes (install a JDK to avoid it)")
        return None
    import pyspark

    hadoop_api = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as tmp:
        done = subprocess.run([javac, "--release", "17", "-nowarn", "-cp", os.pathsep.join(map(str, hadoop_api)),
                               "-d", tmp, *map(str, sources)], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"javac could not compile {_JVM_SOURCES}: {done.stderr.strip()[-2000:]}")
        partial = Path(tmp) / "local-fs.jar"
        with zipfile.ZipFile(partial, "w") as out:   # a jar is a zip; no manifest is needed
            for cls in sorted(Path(tmp).rglob("*.class")):
                out.write(cls, cls.relative_to(tmp).as_posix())
        os.replace(partial, jar)   # another process may have finished first: the same bytes
    return str(jar)


def _pom(jar_set: JarSet) -> str:
    """The POM whose runtime dependencies _fetch copies: the set's coordinates, less its excludes."""
    rules = "".join(f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
                    for g, a in (e.split(":") for e in jar_set.excludes))
    dependencies = "\n".join(
        f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>"
        f"{f'<exclusions>{rules}</exclusions>' if rules else ''}</dependency>"
        for group, artifact, version in (c.split(":") for c in jar_set.coordinates))
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>fedlab</groupId><artifactId>delta-jars</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""


def spark_session(warehouse_dir: str | None = None, master: str = "local[2]", object_store: bool = False):
    """Returns the active SparkSession if there is one, else starts one with Delta enabled, and
    with `object_store` the object-store packages (for Delta tables under s3a://, on_object_store).

    `warehouse_dir` becomes spark.sql.warehouse.dir (the store itself uses path-based Delta
    tables, so nothing else lands there). Logs are cut to WARN once the JVM is up.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if SparkContext._active_spark_context is not None:  # started in another thread
        return SparkSession.builder.getOrCreate()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    route = os.environ.get("FEDLAB_DELTA_JARS", "auto").lower()
    jars = cached_delta_jars(object_store) if route in ("auto", "maven") else []
    if not jars and route in ("auto", "ivy"):
        try:
            return _start(with_ivy_packages(_builder(warehouse_dir, master, []), object_store))
        except Exception as err:  # resolver unreachable, JVM exited before the gateway came up
            if route == "ivy":
                raise
            log.warning("Ivy could not resolve %s (%s); fetching it with Maven",
                        delta_coordinate(), str(err).splitlines()[0] if str(err) else type(err).__name__)
    if not jars:
        jars = ensure_delta_jars(object_store)
    return _start(_with_jars(_builder(warehouse_dir, master, jars), master, jars))


def start_beside(**arguments) -> Future:
    """`spark_session(**arguments)` on a thread of its own, as a Future of the session: a
    restarting warehouse restores from Delta without Spark (warehouse.store.delta_reader) while
    the JVM starts, and what needs the session waits for it (`started`)."""
    future: Future = Future()

    def start() -> None:
        try:
            future.set_result(spark_session(**arguments))
        except BaseException as err:   # the caller waiting on the Future gets it, whatever it is
            future.set_exception(err)
    threading.Thread(target=start, name="spark-start", daemon=True).start()
    return future


def started(spark):
    """The session `spark` is, or that it gives once up when it is a Future of one (`start_beside`)."""
    return spark.result() if isinstance(spark, Future) else spark


def hadoop_settings(environ=os.environ) -> dict[str, str]:
    """The Hadoop settings a session started here gets from Spark's configuration file
    ($SPARK_CONF_DIR/spark-defaults.conf: the chart's) and from FEDLAB_SPARK_CONF, the
    `spark.hadoop.` prefix dropped: how the Delta log reader reaches s3a:// before the session
    is up (warehouse.store.delta_reader.s3_filesystem).

    >>> hadoop_settings({"FEDLAB_SPARK_CONF": "spark.hadoop.fs.s3a.endpoint=http://h:1,spark.ui.enabled=false"})
    {'fs.s3a.endpoint': 'http://h:1'}
    """
    found = {}
    folder = environ.get("SPARK_CONF_DIR")
    defaults = Path(folder) / "spark-defaults.conf" if folder else None
    lines = defaults.read_text().splitlines() if defaults is not None and defaults.is_file() else []
    for line in lines:   # Java properties, as Spark reads the file: "key value" or "key=value"
        match = re.match(r"([^\s=:#!]+)\s*[=:\s]\s*(.*)", line.strip())
        if match:
            found[match[1]] = match[2].strip()
    for item in filter(None, environ.get("FEDLAB_SPARK_CONF", "").split(",")):
        key, _, value = item.partition("=")
        found[key.strip()] = value.strip()
    return {key.removeprefix("spark.hadoop."): value for key, value in found.items() if key.startswith("spark.hadoop.")}


def _with_jars(builder, master: str, jars: list[str]):
    """The builder with the cached jars. Locally the driver serves them to its executors. On
    Kubernetes every executor runs the driver's image with the jars at the same paths, so they go
    as `local:` URIs, which an executor reads from its own disk instead of fetching from the driver
    (a cold executor spent 12 s fetching its 60 jars before its first task). Not on the class
    paths: those come before Spark's own jars, and Delta's Jackson would shadow Spark's."""
    scheme = "local://" if master.startswith("k8s://") else ""
    return builder.config("spark.jars", ",".join(scheme + jar for jar in jars))


def _builder(warehouse_dir: str | None, master: str, jars: list[str]):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("fedlab-warehouse")
    for key, value in _CONF.items():
        builder = builder.config(key, value)
    if master.startswith("local"):
        # Embedded default: keep the driver on loopback. On Kubernetes the executors must reach
        # the driver at its pod address, which the chart sets; nothing here may override it.
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if warehouse_dir:
        builder = builder.config("spark.sql.warehouse.dir", str(warehouse_dir))
    local_fs = local_fs_jar() if master.startswith("local") else None
    builder = builder.config("spark.driver.extraJavaOptions", driver_java_options(jars, local_fs))
    if local_fs:
        # Embedded only: executors on Kubernetes would need the jar too, and keep Hadoop's.
        builder = builder.config("spark.driver.extraClassPath", local_fs)
        for key, value in LOCAL_FS_CONF.items():
            builder = builder.config(key, value)
    for item in filter(None, os.environ.get("FEDLAB_SPARK_CONF", "").split(",")):
        key, _, value = item.partition("=")
        builder = builder.config(key.strip(), value.strip())
    return builder


def with_ivy_packages(builder, object_store: bool = False, sets: list[JarSet] | None = None):
    """The builder resolving the jar sets (default: jar_sets(object_store)) through Ivy at start
    (spark.jars.packages, cached in ~/.ivy2.5.2), without their excludes (Ivy applies them to
    every package: Delta's own dependencies lose only a second copy of slf4j-api)."""
    sets = jar_sets(object_store) if sets is None else sets
    builder = builder.config("spark.jars.packages", ",".join(c for s in sets for c in s.coordinates))
    excludes = [e for s in sets for e in s.excludes]
    return builder.config("spark.jars.excludes", ",".join(excludes)) if excludes else builder


def _start(builder):
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    _lower_priority(jvm_pid(session), int(os.environ.get("FEDLAB_JVM_NICE", JVM_NICE)))
    return session


def class_archive(jars: list[str], local_fs: str | None) -> Path:
    """Where the class data archive of a driver JVM with these jars lives: named by a hash of the
    java binary, pyspark (its version and where it is installed: the JVM's class path starts with
    its jars, and an archive serves only the class path it was dumped with), the jars and the JVM
    options, so that a change of any makes a new one."""
    import pyspark

    java = os.path.realpath(shutil.which("java") or "java")
    stamp = os.stat(java).st_mtime_ns if os.path.exists(java) else 0
    key = "|".join([java, str(stamp), pyspark.__version__, os.path.realpath(pyspark.__file__), *jars,
                    local_fs or "", JAVA_OPTS])
    return jar_cache_dir().parent / f"spark-classes-{hashlib.sha256(key.encode()).hexdigest()[:12]}.jsa"


def driver_java_options(jars: list[str], local_fs: str | None) -> str:
    """The driver JVM's options: FEDLAB_JAVA_OPTS as given, else JAVA_OPTS, with the class data
    archive when there is one."""
    if "FEDLAB_JAVA_OPTS" in os.environ:
        return os.environ["FEDLAB_JAVA_OPTS"]
    archive = class_archive(jars, local_fs)
    return f"{JAVA_OPTS} -XX:SharedArchiveFile={archive}" if archive.is_file() else JAVA_OPTS


def build_class_archive(object_store: bool = False, timeout: float = 300.0) -> Path | None:
    """Dumps the classes a Delta session (with the object-store packages, or not) loads into its
    archive (idempotent), from a session in a process of its own that writes, reads and stops;
    None where the JVM wrote none.

    The JVM writes the archive as it exits, after its Python process has; it is written under a
    temporary name and renamed into place once that JVM is gone, so a half-written one is never used."""
    jars = cached_delta_jars(object_store)
    archive = class_archive(jars, local_fs_jar())
    if archive.is_file() or not jars:
        return archive if archive.is_file() else None
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.part")
    env = {**os.environ, "FEDLAB_JAVA_OPTS": f"{JAVA_OPTS} -XX:ArchiveClassesAtExit={partial}",
           "FEDLAB_DELTA_JARS": "maven"}
    done = subprocess.run([sys.executable, "-m", "fedlab.warehouse.spark_session", "--exercise",
                           *(["object-store"] if object_store else [])], env=env,
                          capture_output=True, text=True, timeout=timeout)
    said = re.search(r"^jvm-pid (\d+)$", done.stdout, re.M) if done.returncode == 0 else None
    pid = int(said[1]) if said else None   # the JVM's own output shares the stream
    deadline = time.monotonic() + timeout
    while pid is not None and Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid is None or Path(f"/proc/{pid}").exists() or not partial.is_file():
        partial.unlink(missing_ok=True)
        log.warning("no class data archive for the Spark JVM: %s", (done.stderr or "").strip()[-500:])
        return None
    os.replace(partial, archive)
    return archive


def _exercise(object_store: bool) -> int:
    """A session that writes and reads a Delta table, for build_class_archive; prints its JVM's pid."""
    with tempfile.TemporaryDirectory() as tmp:
        spark = spark_session(warehouse_dir=tmp, object_store=object_store)
        table = f"{tmp}/t"
        spark.range(10).selectExpr("id", "id % 3 AS g").write.format("delta").save(table)
        spark.read.format("delta").load(table).groupBy("g").count().collect()
        pid = jvm_pid(spark)
        spark.stop()
    print(f"jvm-pid {pid}", flush=True)
    return 0


def jvm_pid(spark) -> int | None:
    """The process id of the session's driver JVM when this process started it (None otherwise)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    return proc.pid if proc is not None else None


def _lower_priority(pid: int, nice: int) -> None:
    """Renices every thread of the JVM: Linux keeps a nice value per thread, and a new thread
    takes its creator's, so threads started later inherit it."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            os.setpriority(os.PRIO_PROCESS, int(task.name), max(nice, os.getpriority(os.PRIO_PROCESS, int(task.name))))
        except (ProcessLookupError, PermissionError):  # a thread that ended, or one we may not renice
            pass


if __name__ == "__main__":
    # `python -m fedlab.warehouse.spark_session`: warm the jar cache and the class data archives;
    # `--class-archive`: the archives only, where the jars are cached (make runs it; never fails).
    if sys.argv[1:2] == ["--exercise"]:
        sys.exit(_exercise(sys.argv[2:] == ["object-store"]))
    if sys.argv[1:] != ["--class-archive"]:
        print("\n".join(ensure_delta_jars(object_store=True)))
    for with_object_store in (False, True):   # a local warehouse's session; the suite's and an s3a one's
        try:
            built = build_class_archive(with_object_store)
        except (OSError, subprocess.SubprocessError) as err:
            built = None
            log.warning("no class data archive for the Spark JVM: %s", err)
        print(built or "no class data archive: the Spark JVM starts without one")
