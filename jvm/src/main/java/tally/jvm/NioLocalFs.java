package tally.jvm;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * The {@code AbstractFileSystem} of {@code file:} paths for FileContext's users ({@code
 * fs.AbstractFileSystem.file.impl}: Delta's HDFSLogStore commits, Spark's streaming checkpoint
 * files), built as Hadoop's {@code org.apache.hadoop.fs.local.LocalFs} is: {@link ChecksumFs}
 * (the {@code .crc} side files) over a {@link DelegateToFileSystem} of the raw local file system
 * ({@link Raw}, Hadoop's {@code RawLocalFs}), here {@link NioRawLocalFileSystem}, so that a
 * rename's link statuses and a create's chmod start no OS process.
 *
 * <p>Hadoop's two classes have package-private constructors, so these are siblings, not
 * subclasses: an {@code instanceof LocalFs} test is false for them. Spark 4.1's only one is
 * {@code CheckpointFileManager.isLocal}, which nothing in Spark or Delta calls.
 */
public class NioLocalFs extends ChecksumFs {
  /** The constructor {@code AbstractFileSystem.createFileSystem} calls; like LocalFs, the URI is
   * always {@code file:///}. */
  public NioLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(FsConstants.LOCAL_FS_URI, conf));
  }

  /** Hadoop's {@code RawLocalFs} over {@link NioRawLocalFileSystem}: the same overrides. */
  public static class Raw extends DelegateToFileSystem {
    public Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(
          uri, new NioRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1; // No default port for file:///
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      // Different local file systems have different validation rules, as in Hadoop's RawLocalFs.
      return true;
    }
  }
}
