package fedlab.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system without a process per call.
 *
 * <p>Without Hadoop's native library (which pyspark does not ship), RawLocalFileSystem runs
 * `chmod` for every file it creates and `readlink` for every rename through FileContext: 24
 * processes per Delta batch, measured, most of the JVM's CPU for a Delta commit once the Spark
 * job is gone (warehouse/store/delta_append.py). The JDK does both in-process.
 */
public class LocalFileSystem extends RawLocalFileSystem {
  // FsPermission.toShort()'s bits, lowest first.
  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ
  };

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    short mode = permission.toShort();
    for (int i = 0; i < BITS.length; i++) {
      if ((mode & (1 << i)) != 0) {
        set.add(BITS[i]);
      }
    }
    Files.setPosixFilePermissions(pathToFile(p).toPath(), set);
  }

  /** A path that is not a symbolic link has the status of the file it is; a link, as Hadoop says. */
  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (Files.isSymbolicLink(pathToFile(f).toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f);
  }
}
