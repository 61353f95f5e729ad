"""Class data sharing (AppCDS) for the driver JVM: a dynamic archive of the classes a command's
driver loaded, written by its first run and mapped by the next ones (Java 17:
`-XX:ArchiveClassesAtExit`, then `-XX:SharedArchiveFile`).

A Spark driver loads ~24k classes (Spark, Scala, Hadoop, Delta) before and during its first
queries; loading, parsing and verifying them is a large share of a short process's JVM CPU.
With the archive they are mapped ready-made. The archive belongs to one JDK and one class
path: its name carries a hash of both (`archive_key`), so a new JDK or other jars lead to a new
archive, and the JVM checks the jars' sizes and times again itself (a mismatch: it warns and
runs without the archive, `-Xshare:auto`).

A half-written archive crashes the JVM that maps it (SIGBUS, checked on Java 17), so the
training run writes `<archive>.<pid>.part` and only a clean exit of that JVM, waited for by the
Python process that started it (`adopt_at_exit`), renames it into place. A run that never gets
there (killed, `os._exit`) leaves the part behind; the next attempt removes it, and attempts
are made at most once per `RETRY_S` per command, so a command that never exits cleanly does not
write a ~200 MB archive on every run.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("tally.spark")

RETRY_S = 86_400
# The JVM prints CDS warnings on stdout by default, which is a command's output: stderr (the
# JVM log in quiet mode) instead. Dumping warns once for each class it cannot archive (signed
# jars, old class files): errors only while training.
_LOG_TO_STDERR = "-Xlog:cds=off,cds+dynamic=off -Xlog:cds=warning,cds+dynamic=warning:stderr"
_LOG_TRAINING = "-Xlog:cds=off,cds+dynamic=off -Xlog:cds=error,cds+dynamic=error:stderr"


@dataclass(frozen=True)
class CdsPlan:
    """What a driver JVM about to start does with class data sharing: `options` for its
    command line (empty: nothing), and `part` when it writes the archive at exit."""

    archive: Path
    options: str
    part: Path | None = None


def archive_key(files: Iterable[Path]) -> str:
    """A hash of the files' paths, sizes and modification times (a missing file counts as
    missing): the JDK's own files and the driver's class path."""
    digest = hashlib.sha256()
    for path in files:
        try:
            st = path.stat()
            digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{path}\0missing\n".encode())
    return digest.hexdigest()[:20]


def plan(directory: Path, profile: str, key: str, now: float, pid: int) -> CdsPlan:
    """The archive of `profile` (the command, e.g. tally-stream) for `key`: map it when it is
    there; else write it at exit, unless an attempt was made less than `RETRY_S` ago (then no
    option at all). Pure decisions on the directory's listing; files are touched by
    `prepare_training`."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", profile)
    archive = directory / f"driver-{name}-{key}.jsa"
    if archive.is_file() and archive.stat().st_size > 0:
        return CdsPlan(archive, f"-XX:SharedArchiveFile={archive} -Xshare:auto {_LOG_TO_STDERR}")
    attempt = _attempt_marker(archive)
    if attempt.is_file() and now - attempt.stat().st_mtime < RETRY_S:
        return CdsPlan(archive, "")
    part = archive.with_name(f"{archive.name}.{pid}.part")
    return CdsPlan(archive, f"-XX:ArchiveClassesAtExit={part} {_LOG_TRAINING}", part)


def _attempt_marker(archive: Path) -> Path:
    return archive.with_name(archive.name + ".attempt")


def prepare_training(cds_plan: CdsPlan) -> None:
    """Before a training JVM starts: note the attempt and remove what earlier archives of the
    same command left (other keys' archives, parts of runs that never finished)."""
    if cds_plan.part is None:
        return
    directory = cds_plan.archive.parent
    directory.mkdir(parents=True, exist_ok=True)
    prefix = cds_plan.archive.name.rsplit("-", 1)[0] + "-"
    for old in directory.glob(prefix + "*"):
        rest = old.name[len(prefix) :]
        if old != cds_plan.archive and re.fullmatch(r"[0-9a-f]{20}\.jsa.*", rest):
            with contextlib.suppress(OSError):
                old.unlink()
    _attempt_marker(cds_plan.archive).touch()


def plan_for_run(
    directory: Path,
    profile: str,
    files: list[Path],
    now: float,
    pid: int,
    conf_dirs: Iterable[Path] = (),
) -> CdsPlan | None:
    """`plan` for the JDK and class path `files`, with a training run's files prepared; None
    when one of `conf_dirs` (`launcher_conf_dirs`) is a non-empty directory or the directory
    cannot be used (a run never fails for its archive)."""
    blocking = blocking_dir(conf_dirs)
    if blocking is not None:
        log.info(
            "no class data sharing for the driver JVM: %s, a non-empty directory, is on its "
            "class path",
            blocking,
        )
        return None
    try:
        cds_plan = plan(directory, profile, archive_key(files), now, pid)
        prepare_training(cds_plan)
    except OSError as exc:
        log.warning("no class data sharing for the driver JVM: %s", exc)
        return None
    return cds_plan


def adopt(cds_plan: CdsPlan, jvm_process: subprocess.Popen[bytes]) -> bool:
    """Close the JVM's stdin (PySpark's signal for the driver JVM to exit), wait for it to
    finish writing the archive and rename the archive into place if the JVM exited cleanly
    (else remove the part). Never raises: a failure only means no archive this time."""
    part, archive = cds_plan.part, cds_plan.archive
    if part is None:
        return False
    try:
        log.info("writing the driver JVM's class data archive (once): %s", archive)
        started = time.monotonic()
        if jvm_process.stdin is not None:
            jvm_process.stdin.close()
        code = jvm_process.wait(timeout=600)
        if code == 0 and part.is_file() and part.stat().st_size > 0:
            os.replace(part, archive)
            _attempt_marker(archive).unlink(missing_ok=True)
            log.info("class data archive written in %.1f s", time.monotonic() - started)
            return True
        part.unlink(missing_ok=True)
    except Exception:  # never fail a command on its way out for an optimisation
        log.warning("no class data archive written", exc_info=True)
    return False


def adopt_at_exit(cds_plan: CdsPlan, jvm_process: subprocess.Popen[bytes] | None) -> None:
    """`adopt` when this Python process exits (a training run only)."""
    if cds_plan.part is not None and jvm_process is not None:
        atexit.register(adopt, cds_plan, jvm_process)


def java_home() -> Path | None:
    """The JDK that spark-submit runs: JAVA_HOME's, else `java` on the PATH (symlinks
    resolved)."""
    home = os.environ.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else shutil.which("java")
    return Path(java).resolve().parent.parent if java else None


def launcher_conf_dirs(environ: Mapping[str, str], spark_home: Path) -> list[Path]:
    """The directories Spark's launcher puts on the driver's class path ahead of or among its
    jars: the configuration directory (SPARK_CONF_DIR, else SPARK_HOME/conf), HADOOP_CONF_DIR
    and YARN_CONF_DIR."""
    conf = environ.get("SPARK_CONF_DIR") or str(spark_home / "conf")
    extra = [environ.get(name) for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")]
    return [Path(conf), *(Path(d) for d in extra if d)]


def blocking_dir(dirs: Iterable[Path]) -> Path | None:
    """The first non-empty directory of `dirs`: Java 17 writes no archive for a class path with
    one before a jar its classes came from (at exit: "Cannot have non-empty directory in
    paths", exit code 1), so a driver with such a class path gets no class data sharing."""
    for directory in dirs:
        with contextlib.suppress(OSError):
            if directory.is_dir() and any(directory.iterdir()):
                return directory
    return None


def jdk_files(home: Path | None) -> list[Path]:
    """The files that identify a JDK build (its module image, its VM, its release file)."""
    if home is None:
        return []
    return [home / "release", home / "lib" / "modules", home / "lib" / "server" / "libjvm.so"]
