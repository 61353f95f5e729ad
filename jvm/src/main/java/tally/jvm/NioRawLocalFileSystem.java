package tally.jvm;

import java.io.DataOutput;
import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.lang.reflect.Field;
import java.net.URI;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.GroupPrincipal;
import java.nio.file.attribute.UserPrincipal;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSLinkResolver;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;
import org.apache.hadoop.util.Shell;
import org.apache.hadoop.util.StringUtils;

/**
 * Hadoop's raw local file system (3.4) without the OS processes it starts where it has no native
 * library (pip's PySpark ships none): the same files, modes, statuses and errors, read and set
 * through {@code java.nio} system calls instead.
 *
 * <p>Without libhadoop, {@link RawLocalFileSystem} runs {@code chmod} for every file and
 * directory it creates ({@code setPermission}), {@code readlink} for every {@code
 * getFileLinkStatus} / {@code getLinkTarget} (FileContext's renames: two for each, for the file
 * and its {@code .crc}; Delta's log commits and Spark's checkpoint files go that way), and {@code
 * ls -ld} when a status's permission, owner or group is read. Each is a fork and exec of the
 * JVM (~4 ms of its CPU); a stream's micro-batch made ~150 of them. The overrides here:
 *
 * <ul>
 *   <li>{@link #setPermission}: {@code chmod(2)} of the mode, as {@code chmod NNNN} does it (a
 *       directory keeps its set-user-ID and set-group-ID bits, the sticky bit is set or cleared);
 *   <li>{@link #getFileLinkStatus} and {@link #getLinkTarget}: the link read with {@code
 *       readlink(2)} of the same path Hadoop hands to {@code readlink} (its {@code toString()},
 *       so a path with a scheme names no link and the status is the followed one, as in Hadoop),
 *       the result built the same way, the target qualified the same way;
 *   <li>{@link #getFileStatus} and {@link #listStatus}: statuses as Hadoop builds them (length,
 *       times, block size, qualified path), their permission, owner and group read on first use
 *       from {@code stat(2)} of the followed path, as {@code ls -ld} of the canonical path gives
 *       them (rwx bits and the sticky bit; names, or the number for an id without one).
 * </ul>
 *
 * <p>Everything else is Hadoop's. Where Hadoop would not start a process (a native library is
 * loaded, Windows, no POSIX attributes) or uses another status path ({@code Stat}, tests only),
 * the overrides call Hadoop's own methods. {@code setOwner} and {@code createSymlink} (rare, never
 * on a write path) stay Hadoop's too.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {
  /** The overrides apply: a POSIX file system, no native library and not Windows. */
  static final boolean SHELL_FREE =
      !Shell.WINDOWS
          && !NativeIO.isAvailable()
          && FileSystems.getDefault().supportedFileAttributeViews().contains("unix");

  private static final int S_IFMT = 0170000;
  private static final int S_IFDIR = 0040000;
  private static final int SET_ID_BITS = 06000;
  /** What {@link FsPermission#toShort()} carries: the sticky bit and the rwx bits. */
  private static final int PERMISSION_BITS = 01777;

  /** Hadoop's switch between its status paths (false only after {@code useStatIfAvailable()}). */
  private static final Field DEPRECATED_STATUS = hadoopStatusSwitch();

  private long blockSize;

  private static Field hadoopStatusSwitch() {
    try {
      Field field = RawLocalFileSystem.class.getDeclaredField("useDeprecatedFileStatus");
      field.setAccessible(true);
      return field;
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  /** Whether Hadoop builds statuses from java.io.File (its default), where the overrides apply. */
  static boolean overridesApply() {
    if (!SHELL_FREE || DEPRECATED_STATUS == null) {
      return false;
    }
    try {
      return DEPRECATED_STATUS.getBoolean(null);
    } catch (IllegalAccessException e) {
      return false;
    }
  }

  @Override
  public void initialize(URI uri, Configuration conf) throws IOException {
    super.initialize(uri, conf);
    blockSize = getDefaultBlockSize(new Path(uri));
  }

  /**
   * Hadoop: {@code chmod %04o <canonical path>} (an {@code ExitCodeException} when it fails).
   * Here: {@code chmod(2)} of the path (followed, like the canonical path), with the mode GNU
   * chmod gives a four-digit octal mode: the permission's rwx and sticky bits, and a directory's
   * set-user-ID and set-group-ID bits kept. A missing file: {@link FileNotFoundException}; other
   * failures: the {@link IOException} of the system call.
   */
  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (!SHELL_FREE) {
      super.setPermission(p, permission);
      return;
    }
    java.nio.file.Path file;
    try {
      file = pathToFile(p).toPath();
    } catch (InvalidPathException e) {
      super.setPermission(p, permission);
      return;
    }
    int mode = permission.toShort() & PERMISSION_BITS;
    try {
      int current = (Integer) Files.getAttribute(file, "unix:mode");
      if ((current & S_IFMT) == S_IFDIR) {
        mode |= current & SET_ID_BITS;
      }
      Files.setAttribute(file, "unix:mode", mode);
    } catch (NoSuchFileException e) {
      FileNotFoundException missing = new FileNotFoundException("File " + p + " does not exist");
      missing.initCause(e);
      throw missing;
    }
  }

  /**
   * Hadoop's {@code FileUtil.readLink}: what {@code readlink <f>} prints, trimmed; empty when
   * {@code f} is not a symbolic link or cannot be read.
   */
  static String readLink(File f) {
    try {
      return Files.readSymbolicLink(f.toPath()).toString().trim();
    } catch (IOException | InvalidPathException | UnsupportedOperationException e) {
      return "";
    }
  }

  @Override
  public FileStatus getFileStatus(Path f) throws IOException {
    if (!overridesApply()) {
      return super.getFileStatus(f);
    }
    File path = pathToFile(f);
    if (path.exists()) {
      return new NioLocalFileStatus(path, blockSize, this);
    }
    throw new FileNotFoundException("File " + f + " does not exist");
  }

  @Override
  public FileStatus[] listStatus(Path f) throws IOException {
    if (!overridesApply()) {
      return super.listStatus(f);
    }
    File local = pathToFile(f);
    if (!local.exists()) {
      throw new FileNotFoundException("File " + f + " does not exist");
    }
    if (local.isDirectory()) {
      // Hadoop lists the names and asks getFileStatus (this class's) for each.
      return super.listStatus(f);
    }
    return new FileStatus[] {new NioLocalFileStatus(local, blockSize, this)};
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (!overridesApply()) {
      return super.getFileLinkStatus(f);
    }
    FileStatus status = linkStatus(f);
    if (status.isSymlink()) {
      status.setSymlink(
          FSLinkResolver.qualifySymlinkTarget(getUri(), status.getPath(), status.getSymlink()));
    }
    return status;
  }

  @Override
  public Path getLinkTarget(Path f) throws IOException {
    if (!overridesApply()) {
      return super.getLinkTarget(f);
    }
    return linkStatus(f).getSymlink();
  }

  /**
   * The status of {@code f} itself, a link not followed, built as Hadoop's default path builds
   * it: the link read from {@code new File(f.toString())}; a link's status carries the followed
   * file's length, times and permission, not a directory; a dangling link a status of zeros with
   * the default permission; a missing path {@link FileNotFoundException}.
   */
  private FileStatus linkStatus(Path f) throws IOException {
    String target = readLink(new File(f.toString()));
    try {
      FileStatus followed = getFileStatus(f);
      if (target.isEmpty()) {
        return followed;
      }
      return new FileStatus(
          followed.getLen(),
          false,
          followed.getReplication(),
          followed.getBlockSize(),
          followed.getModificationTime(),
          followed.getAccessTime(),
          followed.getPermission(),
          followed.getOwner(),
          followed.getGroup(),
          new Path(target),
          f);
    } catch (FileNotFoundException e) {
      if (!target.isEmpty()) {
        return new FileStatus(
            0, false, 0, 0, 0, 0, FsPermission.getDefault(), "", "", new Path(target), f);
      }
      throw e;
    }
  }

  /**
   * Hadoop's {@code DeprecatedRawLocalFileStatus}, the same fields from {@code java.io.File}, with
   * the permission, owner and group read on first use from the file's POSIX attributes instead
   * of {@code ls -ld}.
   */
  static final class NioLocalFileStatus extends FileStatus {
    private static final long serialVersionUID = 1L;

    NioLocalFileStatus(File f, long defaultBlockSize, FileSystem fs) throws IOException {
      super(
          f.length(),
          f.isDirectory(),
          1,
          defaultBlockSize,
          f.lastModified(),
          lastAccessTime(f),
          null,
          null,
          null,
          new Path(f.getPath()).makeQualified(fs.getUri(), fs.getWorkingDirectory()));
    }

    private static long lastAccessTime(File f) throws IOException {
      try {
        return Files.readAttributes(f.toPath(), BasicFileAttributes.class)
            .lastAccessTime()
            .toMillis();
      } catch (NoSuchFileException e) {
        throw new FileNotFoundException("File " + f + " does not exist");
      }
    }

    /** Hadoop's test: the owner is empty until the attributes were read. */
    private boolean loaded() {
      return !super.getOwner().isEmpty();
    }

    private void loadOnce() {
      if (!loaded()) {
        load();
      }
    }

    @Override
    public FsPermission getPermission() {
      loadOnce();
      return super.getPermission();
    }

    @Override
    public String getOwner() {
      loadOnce();
      return super.getOwner();
    }

    @Override
    public String getGroup() {
      loadOnce();
      return super.getGroup();
    }

    @Override
    public void write(DataOutput out) throws IOException {
      loadOnce();
      super.write(out);
    }

    /**
     * {@code ls -ld} of the canonical path, without the process: mode, owner and group of the
     * followed path. A failure is a {@link RuntimeException}, as Hadoop's is.
     */
    private synchronized void load() {
      if (loaded()) {
        return;
      }
      try {
        Map<String, Object> attributes =
            Files.readAttributes(new File(getPath().toUri()).toPath(), "unix:mode,owner,group");
        int mode = (Integer) attributes.get("mode");
        setPermission(new FsPermission((short) (mode & PERMISSION_BITS)));
        setOwner(((UserPrincipal) attributes.get("owner")).getName());
        setGroup(((GroupPrincipal) attributes.get("group")).getName());
      } catch (IOException e) {
        throw new RuntimeException(
            "Error while reading file permissions : " + StringUtils.stringifyException(e));
      }
    }
  }
}
