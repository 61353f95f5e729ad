"""Class data sharing for the driver JVM (tally.driver_cds): which options a driver gets, when an
archive is written, adopted or left alone, and that a bad archive never stops a JVM."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tally import driver_cds
from tally.driver_cds import CdsPlan, adopt, archive_key, plan, plan_for_run, prepare_training
from tally.spark import driver_java_options

KEY = "0123456789abcdef0123"


def test_first_run_writes_the_archive_at_exit_into_a_part_file(tmp_path: Path) -> None:
    p = plan(tmp_path, "tally-stream", KEY, now=1000.0, pid=42)
    assert p.archive == tmp_path / f"driver-tally-stream-{KEY}.jsa"
    assert p.part == tmp_path / f"driver-tally-stream-{KEY}.jsa.42.part"
    assert f"-XX:ArchiveClassesAtExit={p.part}" in p.options.split()
    assert "-XX:SharedArchiveFile" not in p.options


def test_an_archive_in_place_is_mapped_with_sharing_auto(tmp_path: Path) -> None:
    archive = tmp_path / f"driver-tally-reconcile-{KEY}.jsa"
    archive.write_bytes(b"x")
    p = plan(tmp_path, "tally-reconcile", KEY, now=1000.0, pid=42)
    assert p.part is None
    assert {f"-XX:SharedArchiveFile={archive}", "-Xshare:auto"} <= set(p.options.split())
    assert "-XX:ArchiveClassesAtExit" not in p.options
    # another key (other jars, another JDK): that archive is not used, a new one is trained
    other = plan(tmp_path, "tally-reconcile", "f" * 20, now=1000.0, pid=42)
    assert other.part is not None and "SharedArchiveFile" not in other.options


def test_an_empty_archive_is_never_mapped(tmp_path: Path) -> None:
    (tmp_path / f"driver-tally-stream-{KEY}.jsa").touch()
    assert "SharedArchiveFile" not in plan(tmp_path, "tally-stream", KEY, 1000.0, 1).options


def test_a_recent_attempt_means_no_options_until_it_is_a_day_old(tmp_path: Path) -> None:
    first = plan(tmp_path, "tally-dag", KEY, now=time.time(), pid=7)
    prepare_training(first)
    again = plan(tmp_path, "tally-dag", KEY, now=time.time(), pid=8)
    assert again == CdsPlan(first.archive, "")
    later = plan(tmp_path, "tally-dag", KEY, now=time.time() + driver_cds.RETRY_S + 1, pid=9)
    assert later.part is not None


def test_training_removes_what_older_runs_of_the_same_command_left(tmp_path: Path) -> None:
    stale_part = tmp_path / f"driver-tally-stream-{KEY}.jsa.3.part"
    old_key = tmp_path / f"driver-tally-stream-{'a' * 20}.jsa"
    other_command = tmp_path / f"driver-tally-report-{'a' * 20}.jsa"
    for f in (stale_part, old_key, other_command):
        f.write_bytes(b"x")
    p = plan(tmp_path, "tally-stream", KEY, now=1000.0, pid=4)
    prepare_training(p)
    assert not stale_part.exists() and not old_key.exists()
    assert other_command.exists()
    assert (tmp_path / f"driver-tally-stream-{KEY}.jsa.attempt").exists()


def test_an_unusable_directory_means_no_archive_options_not_a_failure(tmp_path: Path) -> None:
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"1")
    blocked = tmp_path / "not-a-directory"
    blocked.write_bytes(b"")
    assert plan_for_run(blocked / "cds", "tally-stream", [jar], time.time(), 5) is None
    usable = plan_for_run(tmp_path / "cds", "tally-stream", [jar], time.time(), 5)
    assert usable is not None and usable.part is not None
    assert usable.archive.name == f"driver-tally-stream-{archive_key([jar])}.jsa"
    assert (tmp_path / "cds" / f"{usable.archive.name}.attempt").is_file()


def test_a_profile_name_cannot_leave_the_directory(tmp_path: Path) -> None:
    p = plan(tmp_path, "../x y", KEY, now=0.0, pid=1)
    assert p.archive.parent == tmp_path and p.archive.name == f"driver-.._x_y-{KEY}.jsa"


def test_the_key_follows_sizes_times_and_presence_of_the_files(tmp_path: Path) -> None:
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"1")
    missing = tmp_path / "b.jar"
    key = archive_key([jar, missing])
    assert key == archive_key([jar, missing]) and len(key) == 20
    jar.write_bytes(b"12")
    assert archive_key([jar, missing]) != key
    changed = archive_key([jar, missing])
    missing.write_bytes(b"")
    assert archive_key([jar, missing]) != changed


def _writer(part: Path, code: int) -> subprocess.Popen[bytes]:
    """A process that, like the driver JVM, writes the archive once its stdin closes."""
    script = (
        f"import sys; sys.stdin.read(); open({str(part)!r}, 'wb').write(b'x'); sys.exit({code})"
    )
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


@pytest.mark.parametrize("code", [0, 1])
def test_the_part_becomes_the_archive_only_after_a_clean_exit(tmp_path: Path, code: int) -> None:
    p = plan(tmp_path, "tally-stream", KEY, now=time.time(), pid=os.getpid())
    prepare_training(p)
    assert p.part is not None
    assert adopt(p, _writer(p.part, code)) is (code == 0)
    assert p.archive.exists() is (code == 0)
    assert not p.part.exists()
    # a clean exit also clears the attempt, so nothing waits a day for the next try
    assert (tmp_path / f"{p.archive.name}.attempt").exists() is (code != 0)


def test_driver_options_carry_the_archive_options_after_the_others() -> None:
    options = "-XX:SharedArchiveFile=/c/a.jsa -Xshare:auto"
    assert driver_java_options(False, options).split() == [
        "-Duser.timezone=UTC",
        "-XX:SharedArchiveFile=/c/a.jsa",
        "-Xshare:auto",
    ]
    assert driver_java_options(False, "") == "-Duser.timezone=UTC"


def test_a_broken_archive_lets_the_jvm_run_and_keeps_stdout_clean(tmp_path: Path) -> None:
    """A real JVM given a file that is no archive (or one from other jars): it runs on
    without it, and says nothing on stdout (a command's output)."""
    archive = tmp_path / f"driver-tally-show-{KEY}.jsa"
    archive.write_bytes(b"not an archive")
    p = plan(tmp_path, "tally-show", KEY, now=0.0, pid=1)
    assert "SharedArchiveFile" in p.options
    run = subprocess.run(
        ["java", *p.options.split(), "-version"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0
    assert run.stdout == ""
    assert "openjdk version" in run.stderr.lower() or "java version" in run.stderr.lower()


@pytest.mark.parametrize(
    ("app_name", "profile"),
    [
        ("tally-stream", "tally-stream"),  # the stream has its own archive
        ("tally-reconcile", "tally-batch"),  # every batch command shares one
        ("tally-report", "tally-batch"),
        ("tally-dag", "tally-batch"),  # Airflow's tasks map the archive the commands wrote
    ],
)
def test_commands_share_two_archives(app_name: str, profile: str) -> None:
    from tally.spark import cds_profile

    assert cds_profile(app_name) == profile


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        # no variables: Spark's own conf directory (absent in pip's PySpark)
        ({}, ["/spark/conf"]),
        # SPARK_CONF_DIR replaces it; Hadoop's and YARN's directories follow
        (
            {"SPARK_CONF_DIR": "/etc/spark", "HADOOP_CONF_DIR": "/etc/hadoop"},
            ["/etc/spark", "/etc/hadoop"],
        ),
        # an empty variable counts as unset
        ({"SPARK_CONF_DIR": "", "YARN_CONF_DIR": "/etc/yarn"}, ["/spark/conf", "/etc/yarn"]),
    ],
)
def test_the_launchers_conf_directories(environ: dict[str, str], expected: list[str]) -> None:
    assert driver_cds.launcher_conf_dirs(environ, Path("/spark")) == [Path(e) for e in expected]


def test_only_a_non_empty_directory_blocks_the_archive(tmp_path: Path) -> None:
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    full.mkdir()
    (full / "spark-defaults.conf").write_text("spark.master local[2]\n")
    assert driver_cds.blocking_dir([tmp_path / "missing", empty]) is None
    assert driver_cds.blocking_dir([tmp_path / "missing", empty, full]) == full


def test_a_conf_directory_on_the_class_path_means_no_archive_for_the_driver(
    tmp_path: Path,
) -> None:
    """Java 17 cannot write an archive for a class path with a non-empty directory ahead of
    the jars (the training JVM exits 1 at exit, every day): no plan, nothing prepared."""
    conf, jar = tmp_path / "conf", tmp_path / "a.jar"
    conf.mkdir()
    jar.write_bytes(b"jar")
    assert plan_for_run(tmp_path / "cds", "tally-stream", [jar], time.time(), 5, [conf])
    (conf / "log4j2.properties").write_text("rootLogger.level = warn\n")
    cds = tmp_path / "cds2"
    assert plan_for_run(cds, "tally-stream", [jar], time.time(), 5, [conf]) is None
    assert not cds.exists()
