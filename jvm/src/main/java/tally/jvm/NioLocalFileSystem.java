package tally.jvm;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's checksummed local file system ({@code fs.file.impl}: the {@code .crc} side files,
 * verified on read, exactly as {@link LocalFileSystem} writes and reads them) over {@link
 * NioRawLocalFileSystem}, which starts no OS process for a chmod, a link read or a file's
 * owner. A subclass of {@link LocalFileSystem}, so {@code FileSystem.getLocal} and every {@code
 * instanceof LocalFileSystem} test (Spark's checkpoint file manager, Delta's log stores) see
 * the local file system they always saw.
 */
public class NioLocalFileSystem extends LocalFileSystem {
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
