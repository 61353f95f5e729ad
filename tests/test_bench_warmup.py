"""bench.warmup: which class data archives are missing, and forgetting a recent attempt so the
warm-up's processes train (pure file decisions; the warm-up itself runs in the full bench)."""

from __future__ import annotations

import time
from pathlib import Path

from bench.warmup import PROFILES, forget_attempts, missing_archives
from tally import driver_cds

KEY = "0123456789abcdef0123"


def _archive(directory: Path, profile: str, key: str = KEY) -> Path:
    return driver_cds.plan(directory, profile, key, now=time.time(), pid=1).archive


def test_every_profile_is_missing_in_an_empty_directory(tmp_path: Path) -> None:
    assert missing_archives(tmp_path, KEY) == list(PROFILES)


def test_a_written_archive_counts_only_for_its_own_key(tmp_path: Path) -> None:
    _archive(tmp_path, "tally-stream").write_bytes(b"x")
    # the stream's archive is there for KEY; a new JDK or jar set (another key) needs both again
    assert missing_archives(tmp_path, KEY) == ["tally-batch"]
    assert missing_archives(tmp_path, "f" * 20) == list(PROFILES)


def test_an_empty_archive_file_is_missing(tmp_path: Path) -> None:
    _archive(tmp_path, "tally-batch").touch()  # a crashed rename leaves nothing to map
    assert "tally-batch" in missing_archives(tmp_path, KEY)


def test_forgetting_an_attempt_lets_the_next_run_train(tmp_path: Path) -> None:
    archive = _archive(tmp_path, "tally-batch")
    archive.with_name(archive.name + ".attempt").touch()
    # a recent attempt: the next run would go without an archive, and not write one
    assert driver_cds.plan(tmp_path, "tally-batch", KEY, time.time(), 2).options == ""
    forget_attempts(tmp_path, KEY, ["tally-batch"])
    assert driver_cds.plan(tmp_path, "tally-batch", KEY, time.time(), 2).part is not None
