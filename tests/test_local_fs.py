"""tally's local file systems (jvm/.../NioRawLocalFileSystem.java, `tally.spark.local_fs_conf`):
Hadoop's raw local file system without the OS processes it starts for chmod, readlink and
`ls -ld`. Each operation here runs through Hadoop's own class and through tally's on twin trees
of a tmp directory, through the session's JVM, and the results (files, modes, statuses, link
statuses, errors, .crc side files) must be the same."""

from __future__ import annotations

import os
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

from tally import spark as tally_spark
from tally.spark import LOCAL_ABSTRACT_FS_CLASS, LOCAL_FS_CLASS, jvm_class

HADOOP_RAW = "org.apache.hadoop.fs.RawLocalFileSystem"
OURS_RAW = "tally.jvm.NioRawLocalFileSystem"


@pytest.fixture(scope="module")
def jvm_fs(spark) -> Callable[[str], Any]:
    def new(name: str) -> Any:
        return jvm_class(spark, name)

    return new


def raw_fs(spark, jvm_fs: Callable[[str], Any], class_name: str) -> Any:
    fs = jvm_fs(class_name)()
    fs.initialize(jvm_fs("java.net.URI").create("file:///"), hadoop_conf(spark))
    return fs


def hadoop_conf(spark) -> Any:
    return spark.sparkContext._jsc.hadoopConfiguration()


def hadoop_local_conf(spark, jvm_fs: Callable[[str], Any]) -> Any:
    """A copy of the session's Hadoop configuration with Hadoop's own local file systems."""
    conf = jvm_fs("org.apache.hadoop.conf.Configuration")(hadoop_conf(spark))
    conf.set("fs.file.impl", "org.apache.hadoop.fs.LocalFileSystem")
    conf.set("fs.AbstractFileSystem.file.impl", "org.apache.hadoop.fs.local.LocalFs")
    return conf


def java_error(call: Callable[[], Any]) -> str:
    """The class of the Java exception `call` raises."""
    with pytest.raises(Py4JJavaError) as raised:
        call()
    return str(raised.value.java_exception.getClass().getName())


def status_fields(status: Any) -> dict[str, Any]:
    fields = {
        "path": status.getPath().toString(),
        "len": status.getLen(),
        "dir": status.isDirectory(),
        "file": status.isFile(),
        "symlink": status.isSymlink(),
        "replication": status.getReplication(),
        "block": status.getBlockSize(),
        "mtime": status.getModificationTime(),
        "atime": status.getAccessTime(),
        "permission": status.getPermission().toString(),
        "owner": status.getOwner(),
        "group": status.getGroup(),
    }
    if status.isSymlink():
        fields["target"] = status.getSymlink().toString()
    return fields


def tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under `root` (links not followed): its mode and a file's bytes."""
    found: dict[str, tuple[int, bytes | None]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
        found[str(path.relative_to(root))] = (st.st_mode, data)
    return found


def test_sessions_use_tally_local_file_systems(spark, jvm_fs) -> None:
    uri = jvm_fs("java.net.URI").create("file:///")
    fs = jvm_fs("org.apache.hadoop.fs.FileSystem").get(uri, hadoop_conf(spark))
    assert fs.getClass().getName() == LOCAL_FS_CLASS
    assert fs.getRaw().getClass().getName() == OURS_RAW
    # Still the local file system to everything that tests for it (Spark, Delta).
    assert jvm_fs("org.apache.hadoop.fs.LocalFileSystem")._java_lang_class.isInstance(fs)
    context = jvm_fs("org.apache.hadoop.fs.FileContext").getFileContext(uri, hadoop_conf(spark))
    assert context.getDefaultFileSystem().getClass().getName() == LOCAL_ABSTRACT_FS_CLASS


def test_created_files_and_directories_get_hadoops_modes(spark, jvm_fs, tmp_path: Path) -> None:
    Path_ = jvm_fs("org.apache.hadoop.fs.Path")
    for name in (HADOOP_RAW, OURS_RAW):
        fs = raw_fs(spark, jvm_fs, name)
        base = tmp_path / name
        assert fs.mkdirs(Path_(str(base / "a" / "b")))
        out = fs.create(Path_(str(base / "a" / "b" / "f")), False)
        out.write(bytearray(b"one"))
        out.close()
        # Overwrite: the same file, new contents, the mode set again.
        os.chmod(base / "a" / "b" / "f", 0o600)
        out = fs.create(Path_(str(base / "a" / "b" / "f")), True)
        out.write(bytearray(b"two"))
        out.close()
        mode = jvm_fs("org.apache.hadoop.fs.permission.FsPermission")("640")
        out = fs.create(Path_(str(base / "g")), mode, False, 4096, 1, 1 << 25, None)
        out.close()
        assert fs.mkdirs(
            Path_(str(base / "d")), jvm_fs("org.apache.hadoop.fs.permission.FsPermission")("701")
        )
        # Not overwriting an existing file fails the same way.
        assert java_error(lambda fs=fs, base=base: fs.create(Path_(str(base / "g")), False)) == (
            "org.apache.hadoop.fs.FileAlreadyExistsException"
        )
    assert tree(tmp_path / HADOOP_RAW) == tree(tmp_path / OURS_RAW)
    assert tree(tmp_path / OURS_RAW)["a/b/f"][1] == b"two"


@pytest.mark.parametrize("mode", ["755", "700", "644", "1777", "000", "1700"])
def test_set_permission_is_chmod(spark, jvm_fs, tmp_path: Path, mode: str) -> None:
    """As `chmod NNNN`: rwx and sticky bits set; a directory keeps set-user/group-ID bits."""
    Path_ = jvm_fs("org.apache.hadoop.fs.Path")
    permission = jvm_fs("org.apache.hadoop.fs.permission.FsPermission")(mode)
    for name in (HADOOP_RAW, OURS_RAW):
        fs = raw_fs(spark, jvm_fs, name)
        base = tmp_path / name
        (base / "setgid").mkdir(parents=True)
        os.chmod(base / "setgid", 0o2775)
        (base / "plain").mkdir()
        (base / "f").write_bytes(b"x")
        os.chmod(base / "f", 0o4755)
        os.symlink(base / "f", base / "link")
        for child in ("setgid", "plain", "f", "link"):
            fs.setPermission(Path_(str(base / child)), permission)
    assert tree(tmp_path / HADOOP_RAW) == tree(tmp_path / OURS_RAW)


def test_set_permission_of_a_missing_file_fails(spark, jvm_fs, tmp_path: Path) -> None:
    Path_ = jvm_fs("org.apache.hadoop.fs.Path")
    permission = jvm_fs("org.apache.hadoop.fs.permission.FsPermission")("644")
    missing = Path_(str(tmp_path / "missing"))
    hadoop, ours = (raw_fs(spark, jvm_fs, name) for name in (HADOOP_RAW, OURS_RAW))
    # Hadoop: chmod's exit code (an IOException); ours: the IOException saying what is missing.
    assert java_error(lambda: hadoop.setPermission(missing, permission)).endswith(
        "ExitCodeException"
    )
    assert java_error(lambda: ours.setPermission(missing, permission)) == (
        "java.io.FileNotFoundException"
    )


def _links(base: Path) -> None:
    (base / "dir").mkdir(parents=True)
    (base / "dir" / "f").write_bytes(b"12345")
    os.chmod(base / "dir", 0o1750)
    os.symlink(base / "dir" / "f", base / "abs_link")
    os.symlink("dir/f", base / "rel_link")
    os.symlink("dir", base / "dir_link")
    os.symlink(base / "gone", base / "dangling")
    # Read the directories once, so that their access times (relatime) stay as they are while
    # the two file systems list them in turn.
    for directory in (base, base / "dir"):
        os.listdir(directory)


@pytest.mark.parametrize(
    "child", ["dir", "dir/f", "abs_link", "rel_link", "dir_link", "dangling", "missing"]
)
@pytest.mark.parametrize("qualified", [False, True])
def test_statuses_match_hadoop(spark, jvm_fs, tmp_path: Path, child: str, qualified: bool) -> None:
    """getFileStatus, getFileLinkStatus, getLinkTarget and listStatus of the same paths: the same
    fields, the same errors. A path with the scheme names no link to Hadoop (it reads the link of
    `new File(path.toString())`): its link status is the followed one, here too."""
    Path_ = jvm_fs("org.apache.hadoop.fs.Path")
    _links(tmp_path)
    path = Path_(("file:" if qualified else "") + str(tmp_path / child))
    results = []
    for name in (HADOOP_RAW, OURS_RAW):
        fs = raw_fs(spark, jvm_fs, name)
        found: dict[str, Any] = {}
        for op in ("getFileStatus", "getFileLinkStatus", "listStatus", "getLinkTarget"):
            try:
                value = getattr(fs, op)(path)
            except Py4JJavaError as error:
                found[op] = ("error", str(error.java_exception.getClass().getName()))
                continue
            if op == "getLinkTarget":
                found[op] = value.toString()
            elif op == "listStatus":
                found[op] = sorted(
                    (status_fields(s) for s in value), key=lambda fields: str(fields["path"])
                )
            else:
                found[op] = status_fields(value)
        results.append(found)
    assert results[0] == results[1]
    if child in ("abs_link", "rel_link", "dangling") and not qualified:
        assert results[1]["getFileLinkStatus"]["symlink"]


def test_file_context_create_and_rename_keep_checksums(spark, jvm_fs, tmp_path: Path) -> None:
    """FileContext's create and rename (Delta's log commits, Spark's checkpoint files): the same
    files and .crc side files as Hadoop's LocalFs, and each reads the other's with its
    checksums verified."""
    Path_ = jvm_fs("org.apache.hadoop.fs.Path")
    uri = jvm_fs("java.net.URI").create("file:///")
    FileContext = jvm_fs("org.apache.hadoop.fs.FileContext")
    CreateFlag = jvm_fs("org.apache.hadoop.fs.CreateFlag")
    EnumSet = jvm_fs("java.util.EnumSet")
    gateway = spark.sparkContext._gateway
    no_opts = gateway.new_array(jvm_fs("org.apache.hadoop.fs.Options$CreateOpts"), 0)
    Rename = jvm_fs("org.apache.hadoop.fs.Options$Rename")
    confs = {"hadoop": hadoop_local_conf(spark, jvm_fs), "ours": hadoop_conf(spark)}
    for name, conf in confs.items():
        context = FileContext.getFileContext(uri, conf)
        assert ("tally" in context.getDefaultFileSystem().getClass().getName()) == (name == "ours")
        base = tmp_path / name
        (base / "_log").mkdir(parents=True)  # as Delta makes _delta_log before its commits
        for file, data in (("tmp1", b"first"), ("tmp2", b"second"), ("tmp3", b"third")):
            out = context.create(
                Path_(str(base / "_log" / file)), EnumSet.of(CreateFlag.CREATE), no_opts
            )
            out.write(bytearray(data))
            out.close()
        none = gateway.new_array(Rename, 0)
        overwrite = gateway.new_array(Rename, 1)
        overwrite[0] = Rename.OVERWRITE
        context.rename(
            Path_(str(base / "_log" / "tmp1")), Path_(str(base / "_log" / "0.json")), none
        )
        context.rename(
            Path_(str(base / "_log" / "tmp2")), Path_(str(base / "_log" / "1.json")), none
        )
        # A rename onto an existing file without OVERWRITE fails; with it, replaces the file.
        assert java_error(
            lambda context=context, base=base, none=none: context.rename(
                Path_(str(base / "_log" / "tmp3")), Path_(str(base / "_log" / "1.json")), none
            )
        ) == ("org.apache.hadoop.fs.FileAlreadyExistsException")
        context.rename(
            Path_(str(base / "_log" / "tmp3")), Path_(str(base / "_log" / "1.json")), overwrite
        )
    hadoop_tree, ours_tree = tree(tmp_path / "hadoop"), tree(tmp_path / "ours")
    assert hadoop_tree == ours_tree
    assert sorted(ours_tree) == [
        "_log",
        "_log/.0.json.crc",
        "_log/.1.json.crc",
        "_log/0.json",
        "_log/1.json",
    ]
    # Each reads the other's files through its checksummed FileSystem, checksums verified.
    IOUtils = jvm_fs("org.apache.commons.io.IOUtils")
    FileSystem = jvm_fs("org.apache.hadoop.fs.FileSystem")
    readers = {
        "hadoop": FileSystem.newInstance(uri, confs["hadoop"]),
        "ours": FileSystem.get(uri, confs["ours"]),
    }
    assert readers["hadoop"].getClass().getName() == "org.apache.hadoop.fs.LocalFileSystem"
    for reader, written in (("hadoop", "ours"), ("ours", "hadoop")):
        for file, data in (("0.json", b"first"), ("1.json", b"third")):
            stream = readers[reader].open(Path_(str(tmp_path / written / "_log" / file)))
            assert bytes(IOUtils.toByteArray(stream)) == data
            stream.close()
    # A damaged file fails the checksum for both.
    (tmp_path / "ours" / "_log" / "0.json").write_bytes(b"fixst")
    for reader in readers.values():
        stream = reader.open(Path_(str(tmp_path / "ours" / "_log" / "0.json")))
        assert java_error(lambda stream=stream: IOUtils.toByteArray(stream)) == (
            "org.apache.hadoop.fs.ChecksumException"
        )
        stream.close()
    readers["hadoop"].close()


def test_file_system_create_overwrite_rename_delete(spark, jvm_fs, tmp_path: Path) -> None:
    """The checksummed FileSystem (Spark's and Delta's data files): the same tree as Hadoop's."""
    Path_ = jvm_fs("org.apache.hadoop.fs.Path")
    uri = jvm_fs("java.net.URI").create("file:///")
    FileSystem = jvm_fs("org.apache.hadoop.fs.FileSystem")
    systems = {
        "hadoop": FileSystem.newInstance(uri, hadoop_local_conf(spark, jvm_fs)),
        "ours": FileSystem.get(uri, hadoop_conf(spark)),
    }
    answers = {}
    for name, fs in systems.items():
        base = tmp_path / name
        for file, data in (("a/part-0", b"zero"), ("a/part-1", b"one"), ("a/part-0", b"again")):
            out = fs.create(Path_(str(base / file)), True)
            out.write(bytearray(data))
            out.close()
        answers[name] = [
            fs.rename(Path_(str(base / "a" / "part-1")), Path_(str(base / "b" / "part-1"))),
            fs.mkdirs(Path_(str(base / "c"))),
            fs.rename(Path_(str(base / "b" / "part-1")), Path_(str(base / "c"))),
            fs.delete(Path_(str(base / "a" / "part-0")), False),
            fs.delete(Path_(str(base / "a" / "missing")), False),
            sorted(s.getPath().getName() for s in fs.listStatus(Path_(str(base / "c")))),
        ]
    assert answers["hadoop"] == answers["ours"]
    assert answers["ours"][-1] == ["part-1"]
    assert tree(tmp_path / "hadoop") == tree(tmp_path / "ours")
    systems["hadoop"].close()


def test_local_fs_conf_needs_the_classes_in_the_jar(tmp_path: Path, monkeypatch) -> None:
    """Without tally's jar, or with one built before these classes, sessions keep Hadoop's."""
    monkeypatch.setattr(tally_spark, "jars_dir", lambda: tmp_path)
    assert tally_spark.local_fs_conf() == {}
    with zipfile.ZipFile(tmp_path / "tally-jvm.jar", "w") as jar:
        jar.writestr("tally/jvm/ScanEventLine.class", b"")
    assert tally_spark.local_fs_conf() == {}
    with zipfile.ZipFile(tmp_path / "tally-jvm.jar", "a") as jar:
        jar.writestr("tally/jvm/NioLocalFileSystem.class", b"")
        jar.writestr("tally/jvm/NioLocalFs.class", b"")
    conf = tally_spark.local_fs_conf()
    assert conf["spark.hadoop.fs.file.impl"] == LOCAL_FS_CLASS
    assert conf["spark.hadoop.fs.AbstractFileSystem.file.impl"] == LOCAL_ABSTRACT_FS_CLASS
    assert conf["spark.driver.extraClassPath"] == str(tmp_path / "tally-jvm.jar")
