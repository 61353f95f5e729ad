"""The only place a SparkSession is built."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from tally import driver_cds
from tally.jvm_functions import JvmFunctionsMissing, register_jvm_functions

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from tally.settings import Settings

_T = TypeVar("_T")

DELTA_PACKAGE = "io.delta:delta-spark_4.1_2.13:4.3.1"
PROJECT_ROOT = Path(__file__).resolve().parent.parent


_jvm_log = {"path": ""}


def quiet_logs(verbose: bool = False) -> Path | None:
    """Decide, at an entry point, where logs go. Quiet (the command line's default): the JVM
    that a session starts afterwards writes its stderr (Spark's log4j output, the JVM's own
    warnings, Python workers' stderr) to `<tmp>/tally-logs/tally.log`, py4j's connection
    messages are silenced and its errors go to the same file, so a command prints its result
    and its one-line errors only; returns the log file. Verbose: everything on stderr, tally's
    INFO lines included."""
    logging.getLogger("py4j").setLevel(logging.INFO if verbose else logging.ERROR)
    if verbose:
        _jvm_log["path"] = ""
        _py4j_errors_to(None)
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        return None
    path = Path(tempfile.gettempdir()) / "tally-logs" / "tally.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    _jvm_log["path"] = str(path)
    _py4j_errors_to(path)
    return path


class _LogFile(logging.FileHandler):
    """The log file's handler on py4j's logger (told apart from any other handler)."""


def _py4j_errors_to(path: Path | None) -> None:
    """py4j logs an error raised in Python inside a JVM callback (a stream's micro-batch) with
    its whole traceback: to the log file at `path`, not on stderr where the command prints its
    one line (Python's last-resort handler would); None: to the root logger's handlers."""
    py4j = logging.getLogger("py4j")
    for handler in [h for h in py4j.handlers if isinstance(h, _LogFile)]:
        py4j.removeHandler(handler)
        handler.close()
    py4j.propagate = path is None
    if path is not None:
        handler = _LogFile(path, delay=True)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        py4j.addHandler(handler)


def log_file() -> str:
    """Where this process's JVM writes its log (`quiet_logs`); "" when logs go to stderr."""
    return _jvm_log["path"]


@contextlib.contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """Point file descriptor 2 at `path` while a child process (the JVM) is started: the child
    keeps it, this process gets its own stderr back."""
    if not path:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log_fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log_fd)


def jars_dir() -> Path:
    return PROJECT_ROOT / ".cache" / "jars"


def delta_jars() -> list[str]:
    """The jars `make jars` fetched once; empty when they are not there."""
    directory = jars_dir()
    return sorted(str(p) for p in directory.glob("*.jar")) if directory.is_dir() else []


# Hadoop's local file system starts an OS process for small operations where it has no native
# library (pip's PySpark ships none): `chmod` for every file and directory it creates, `readlink`
# for each link status (FileContext's renames: every Delta log commit and every streaming
# checkpoint file), `ls -ld` for a status's owner. A 20k-line micro-batch made ~150 of them,
# ~4 ms of JVM CPU each. tally's jar has the same file systems with those calls made through
# java.nio (jvm/src/main/java/tally/jvm/NioRawLocalFileSystem.java): the checksummed layer and
# its .crc side files are Hadoop's own, so tables and checkpoints read and write as before.
LOCAL_FS_CLASS = "tally.jvm.NioLocalFileSystem"
LOCAL_ABSTRACT_FS_CLASS = "tally.jvm.NioLocalFs"


def local_fs_jar() -> Path | None:
    """tally's jar when it holds the local file system classes; None when it is missing or was
    built before them (then sessions keep Hadoop's own)."""
    jar = jars_dir() / "tally-jvm.jar"
    try:
        with zipfile.ZipFile(jar) as archive:
            names = set(archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return None
    wanted = {
        f"{name.replace('.', '/')}.class" for name in (LOCAL_FS_CLASS, LOCAL_ABSTRACT_FS_CLASS)
    }
    return jar if wanted <= names else None


def local_fs_conf() -> dict[str, str]:
    """The settings that give a session tally's local file systems (`file:` paths through
    `FileSystem` and through `FileContext`), or none without the jar. The jar also goes on the
    driver JVM's own class path: spark-submit opens `file:` paths (`spark.jars`) with these
    settings before the session's jars are loaded, and Hadoop keeps that first instance."""
    jar = local_fs_jar()
    if jar is None:
        return {}
    return {
        "spark.hadoop.fs.file.impl": LOCAL_FS_CLASS,
        "spark.hadoop.fs.AbstractFileSystem.file.impl": LOCAL_ABSTRACT_FS_CLASS,
        "spark.driver.extraClassPath": str(jar),
    }


# A short process (the nightly: ~200 distinct queries, each new code to compile) spent about a
# third of its JVM CPU in HotSpot's compiler threads on 2 cores (JFR: 40k compilations). C1
# alone cut the JVM's CPU by ~27% for a 200k-event day, but its code is slower (tasks took
# ~20% more CPU) and on a loaded machine the nightly did not finish sooner: opt-in
# (`quick_jit`) until a quiet machine says otherwise. A static JVM flag: given before the
# JVM starts.
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def driver_java_options(quick_jit: bool, cds_options: str = "") -> str:
    """The driver JVM's options: UTC, C1 only when `quick_jit`, and class data sharing's
    (`tally.driver_cds`)."""
    return " ".join(
        ["-Duser.timezone=UTC", *([QUICK_JIT] if quick_jit else []), *cds_options.split()]
    )


def cds_dir() -> Path:
    return PROJECT_ROOT / ".cache" / "cds"


def driver_class_path() -> list[Path]:
    """The jars a local driver JVM loads classes from: tally's on its class path
    (`local_fs_conf`), Spark's own and `spark.jars`'."""
    from pyspark.find_spark_home import _find_spark_home

    spark_jars = Path(_find_spark_home()) / "jars"
    own = local_fs_jar()
    return (
        ([own] if own is not None else [])
        + sorted(spark_jars.glob("*.jar"))
        + [Path(p) for p in delta_jars()]
    )


def driver_cds_plan(profile: str) -> driver_cds.CdsPlan | None:
    """Class data sharing for the driver JVM of command `profile` (a training run: its files
    prepared), or None when this process already runs a JVM (its options were fixed when it
    started), the launcher puts a non-empty configuration directory on its class path
    (`driver_cds.blocking_dir`) or the archive's directory cannot be used (a run never fails
    for it)."""
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        return None
    from pyspark.find_spark_home import _find_spark_home

    conf_dirs = driver_cds.launcher_conf_dirs(os.environ, Path(_find_spark_home()))
    files = driver_cds.jdk_files(driver_cds.java_home()) + driver_class_path()
    return driver_cds.plan_for_run(cds_dir(), profile, files, time.time(), os.getpid(), conf_dirs)


# Spark retries a failed task 4 times on a cluster (`spark.task.maxFailures`), but once only in
# local mode unless the master says otherwise (`local[N,F]`). A task that lost a race for
# execution memory to the other task's caching (SparkOutOfMemoryError under a small heap, more
# often on a loaded machine) then failed the whole micro-batch, where a retry passes.
LOCAL_TASK_ATTEMPTS = 4
_LOCAL_MASTER = re.compile(r"local(?:\[\s*(\*|[0-9]+)\s*\])?")


def with_task_retries(master: str, attempts: int = LOCAL_TASK_ATTEMPTS) -> str:
    """A local master URL with the task attempts of a cluster (`local[N]` -> `local[N,4]`);
    any other URL, and a local one that names its attempts, as given."""
    match = _LOCAL_MASTER.fullmatch(master.strip())
    if match is None:
        return master
    return f"local[{match.group(1) or 1},{attempts}]"


def build_session(
    master: str = "local[*]",
    app_name: str = "tally",
    shuffle_partitions: int | None = None,
    ui: bool = True,
    extra_conf: dict[str, str] | None = None,
    quick_jit: bool = False,
    cds_profile: str = "",
) -> SparkSession:
    """A Delta-enabled session on any master URL, UTC, with Python workers on this interpreter.
    `quick_jit`: the driver JVM (in local mode also the executor) compiles with C1 only, for a
    process that runs a few minutes (`QUICK_JIT`). `cds_profile`: the driver JVM maps the class
    data archive of that command, or writes it at exit (`tally.driver_cds`); empty: none."""
    # Workers must run this virtualenv's interpreter, or they import a pyarrow-less python3.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    cds_plan = driver_cds_plan(cds_profile) if cds_profile else None
    builder = (
        SparkSession.builder.master(with_task_retries(master))
        .appName(app_name)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.sql.session.timeZone", "UTC")
        .config(
            "spark.driver.extraJavaOptions",
            driver_java_options(quick_jit, cds_plan.options if cds_plan else ""),
        )
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.log.structuredLogging.enabled", "false")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        # Compiled code Spark keeps for reuse (default 100): a stream's micro-batch alone runs
        # ~130 distinct stages, so with 100 most of them were compiled again every batch
        # (Janino, on the driver; measured: ~90 compilations a batch -> ~20, and a 20k-line
        # batch 3.9 -> 3.1 s). A static setting: it must be given before the session starts.
        .config("spark.sql.codegen.cache.maxEntries", "1000")
        # PySpark's DataFrame debugging sends the Python call site of every Column and
        # DataFrame call to the JVM (three Py4J round trips and a stack walk each: `F.col`
        # took 1.7 ms). A micro-batch makes hundreds of such calls; errors keep their JVM
        # context and the stack trace of the Python call that failed.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # Our own foreachBatch writes are made idempotent with txnAppId/txnVersion.
        .config("spark.databricks.delta.schema.autoMerge.enabled", "false")
    )
    jars = delta_jars()
    if jars:
        # Fetched once by `make jars`; the driver ships them to executors on a cluster.
        builder = builder.config("spark.jars", ",".join(jars))
    else:
        builder = builder.config("spark.jars.packages", DELTA_PACKAGE)
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        # Delta replays a table's log with 50 tasks by default: far too many for the small
        # state and progress tables the stream rewrites every micro-batch.
        builder = builder.config(
            "spark.databricks.delta.snapshotPartitions", str(max(2, shuffle_partitions))
        )
    conf = {**local_fs_conf(), **(extra_conf or {})}
    if "spark.driver.extraClassPath" in (extra_conf or {}) and local_fs_jar() is not None:
        # A caller's driver class path keeps tally's jar first (`local_fs_conf`).
        conf["spark.driver.extraClassPath"] = os.pathsep.join(
            [str(local_fs_jar()), conf["spark.driver.extraClassPath"]]
        )
    for key, value in conf.items():
        builder = builder.config(key, value)
    with _stderr_to(_jvm_log["path"]):
        spark = builder.getOrCreate()
    if cds_plan is not None:
        driver_cds.adopt_at_exit(cds_plan, getattr(spark.sparkContext._gateway, "proc", None))
    spark.sparkContext.setLogLevel("WARN")
    pin_jvm_classes(spark)
    # Every session can call tally's JVM functions; without the jar the first parse says so.
    with contextlib.suppress(JvmFunctionsMissing):
        register_jvm_functions(spark)
    return spark


# The JVM classes PySpark classic resolves anew on every Column call: `F.col`, `F.lit`,
# `F.when` ... look up `org.apache.spark.sql.functions` (a string column name, `functions`)
# and every list of columns goes through `PythonUtils.toSeq`; lambdas (`F.transform_values`)
# go through `PythonSQLUtils`.
PINNED_JVM_CLASSES = (
    "org.apache.spark.sql.functions",
    "functions",
    "PythonUtils",
    "PythonSQLUtils",
)


def pin_jvm_classes(spark: SparkSession) -> None:
    """Resolve `PINNED_JVM_CLASSES` once for the session's JVM and keep each on its JVM view,
    with its static methods kept as they are first looked up.

    Py4J resolves a class name (a class lookup in the JVM) and then the member (a reflection
    call) on every use, before the call itself: a `functions` call was three round trips,
    and a 20k-line micro-batch made ~1,000 such lookups, a third of its Py4J round trips.
    A static method reference stays valid for its JVM's life; fields are still read each
    time. Idempotent."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pinned = vars(jvm)
    for name in PINNED_JVM_CLASSES:
        if not isinstance(pinned.get(name), _static_methods_kept()):
            found = getattr(jvm, name)
            pinned[name] = _static_methods_kept()(found._fqn, found._gateway_client)


def jvm_cached(spark: SparkSession, key: tuple[Any, ...], build: Callable[[], _T]) -> _T:
    """`build()` once per JVM for `key`, then the kept value: for `Column`s a micro-batch
    builds the same every batch (a Spark 4 Column is an unresolved expression tree, turned into
    a new Catalyst expression at each use, so one Column may serve any DataFrame of the JVM's
    sessions). Each Column built is a few Py4J round trips and, once Python drops it, one more
    to release it; a kept one costs neither again. Kept on the session's JVM view, like
    `pin_jvm_classes`: a new JVM starts empty."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    kept: dict[tuple[Any, ...], Any] = vars(jvm).setdefault("_tally_cached", {})
    if key not in kept:
        kept[key] = build()
    return cast(_T, kept[key])


def kept_select(
    df: DataFrame, key: tuple[Any, ...], build: Callable[[], list[Column]]
) -> DataFrame:
    """`df.select(*build())` with the list built once a JVM (`jvm_cached`) and kept as the
    JVM's own list: PySpark hands a select's columns over one at a time (a new list, a call
    per column, a conversion), a kept list goes in the select's one call."""
    from pyspark.sql.classic.column import _to_seq

    spark = df.sparkSession
    columns = jvm_cached(spark, key, lambda: _to_seq(spark.sparkContext, [c._jc for c in build()]))
    frame: DataFrame = type(df)(df._jdf.select(columns), spark)  # type: ignore[call-arg]
    return frame


@functools.cache
def _static_methods_kept() -> type:
    """A Py4J `JavaClass` that keeps each static method it looks up (on the instance: the
    next use finds it without a call to the JVM)."""
    from py4j.java_gateway import JavaClass, JavaMember

    class StaticMethodsKept(JavaClass):  # type: ignore[misc]
        def __getattr__(self, name: str) -> Any:
            member = super().__getattr__(name)
            if isinstance(member, JavaMember):
                setattr(self, name, member)
            return member

    return StaticMethodsKept


def object_store_conf(endpoint: str, region: str, path_style: bool) -> dict[str, str]:
    """Spark settings for s3a:// paths on an S3-compatible store. Credentials are not among
    them: Hadoop's default provider chain reads AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or an
    instance role; not ~/.aws profiles). On a cluster Spark also copies the driver's AWS_*
    keys into the Hadoop configuration it ships with the tasks, so executors get them too:
    enable spark.authenticate and network encryption where the cluster is not loopback."""
    conf: dict[str, str] = {}
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint.rstrip("/")
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            endpoint.startswith("https://")
        ).lower()
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    if path_style:
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
    return conf


def cluster_conf(executor_memory: str, cores_max: int) -> dict[str, str]:
    """What an application asks a cluster manager for, when told: each executor's heap and
    (standalone) the cores it may hold in all. Nothing by default, so local mode and Spark's
    own defaults (`$SPARK_CONF_DIR/spark-defaults.conf`, spark-submit's flags) stay as they are."""
    conf: dict[str, str] = {}
    if executor_memory:
        conf["spark.executor.memory"] = executor_memory
    if cores_max > 0:
        conf["spark.cores.max"] = str(cores_max)
    return conf


def session_for(settings: Settings, app_name: str, *, short_lived: bool = False) -> SparkSession:
    """The session an entry point runs with: the settings' master, shuffle partitions, object
    store and executor resources (getOrCreate: inside a process that already runs Spark, that
    session). `short_lived` (a batch command, not the stream): the driver compiles with C1
    only when the settings' `quick_jit` is on."""
    return build_session(
        settings.spark_master,
        app_name=app_name,
        shuffle_partitions=settings.shuffle_partitions,
        extra_conf={
            **object_store_conf(settings.s3_endpoint, settings.s3_region, settings.s3_path_style),
            **cluster_conf(settings.spark_executor_memory, settings.spark_cores_max),
        },
        quick_jit=short_lived and settings.quick_jit,
        cds_profile=cds_profile(app_name) if settings.driver_cds else "",
    )


def cds_profile(app_name: str) -> str:
    """Which class data archive a command's driver maps (`tally.driver_cds`): the stream's own,
    and one for every batch command (reconcile, report, the DAGs' tasks ...), which load
    mostly the same Spark and Delta classes: two archives of ~200 MB, not one per command."""
    return "tally-stream" if app_name == "tally-stream" else "tally-batch"


def jvm_class(spark: SparkSession, name: str) -> Any:
    """The JVM class `name` (fully qualified) in one Py4J call. Py4J resolves
    `jvm.org.apache.hadoop.fs.Path` one segment at a time, each segment a failed class lookup
    across the whole classpath in the JVM (~0.8 ms for that name, ~0.03 ms this way)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return getattr(jvm, name)


@contextlib.contextmanager
def session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """Run the block with these runtime SQL settings, then restore the ones before."""
    before = {key: spark.conf.get(key) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


# A batch job's persisted frames (the nightly's: a day of events for its checks, the
# reconciliation rows for its report) are built once and read a few times. Compressing Spark's
# in-memory columns cost about as much CPU as building them, for ~30 % less memory: a 5M-event
# day's checked events cached in 3.4 s to 220 MB compressed, in 1.6 s to 306 MB not. The
# stream sets it for its whole session (a micro-batch's frames live for one batch).
UNCOMPRESSED_CACHE = {"spark.sql.inMemoryColumnarStorage.compressed": "false"}


def batch_caching(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """Run the block with Spark's in-memory columns uncompressed (`UNCOMPRESSED_CACHE`, read
    when a persisted frame is first computed: the block holds the stage, not one persist)."""
    return session_conf(spark, UNCOMPRESSED_CACHE)


# Dates one micro-batch's `events` may span with a writer open per date (more fall back to
# Delta's sort of every task's rows by event_date): a batch spans one or two.
CONCURRENT_DATE_WRITERS = 4
# How long a broadcast join's build may take (Spark's default: 300 s), see `STREAM_CONF`.
BROADCAST_TIMEOUT_S = 3600

# The stream's runtime SQL settings, set on its session for its whole run before its query
# starts (`streaming.run`). The measurements behind them: docs/development.md, "The stream's
# Spark settings".
STREAM_CONF = {
    # The stream commits small appends every batch: replaying a table's Delta log with one
    # task instead of several makes each commit cheaper.
    "spark.databricks.delta.snapshotPartitions": "1",
    # A batch's cached frames live for one batch: building them uncompressed costs a third
    # less, memory is not the limit.
    **UNCOMPRESSED_CACHE,
    # A batch's events span one or two dates: a writer per date open side by side instead of
    # Delta's sort of every task's rows by event_date (more dates than this fall back to it).
    "spark.sql.maxConcurrentOutputFileWriters": str(CONCURRENT_DATE_WRITERS),
    # Every Spark SQL execution (a micro-batch runs ~17, plus one per adaptive re-plan) renders
    # its physical plan for the UI and event log; the default "formatted" rendering was ~10 % of
    # the driver's CPU in a small batch. The plain tree is enough to read a plan there.
    "spark.sql.ui.explainMode": "simple",
    # Delta's optional checksum file beside each commit (`<version>.crc`, a summary of the
    # table's state it validates against when present; Delta reads the log without it). On a
    # local file system each is one more atomic write, and several OS process starts.
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
    # `event_id` is unique per row: Parquet's dictionary for it (built for every page, then
    # dropped for plain encoding once it outgrows the page size) is wasted work. A SQL setting
    # reaches every write's Hadoop configuration, where Parquet reads per-column settings
    # (`key#column`): `events`, `late_events` and the dedup state files. Only the encoding of
    # new files changes; readers and old files are untouched.
    "parquet.enable.dictionary#event_id": "false",
    # A broadcast join's build waits for free task slots behind the batch's own tasks: on a
    # busy machine it can wait past Spark's 300 s. A slow batch is not a failed one.
    "spark.sql.broadcastTimeout": str(BROADCAST_TIMEOUT_S),
}


def release_local_checkpoint(checkpointed: DataFrame) -> bool:
    """Drop the blocks of a frame `localCheckpoint` made, now rather than whenever the JVM's
    garbage collector lets Spark's cleaner find its RDD (reading the frame afterwards fails).
    False, and nothing done, for a frame that is not a local checkpoint's."""
    plan = checkpointed._jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() != "LogicalRDD":
        return False
    plan.rdd().unpersist(False)
    return True


def without_adaptive_execution(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """Run the block's queries without adaptive query execution (`session_conf`).

    AQE runs each shuffle stage of a query as a Spark job of its own, to re-plan with its
    statistics: worth it where a join or a shuffle's size is unknown until run time, but on
    small tables and already persisted frames it only multiplies jobs (a 200k-event day: the
    report's reads of the summary, runs and validation rows took 24 jobs, 13 without)."""
    return session_conf(spark, {"spark.sql.adaptive.enabled": "false"})
