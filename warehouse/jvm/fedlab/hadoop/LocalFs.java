package fedlab.hadoop;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;

/**
 * The same local file system for FileContext (fs.AbstractFileSystem.file.impl), which Delta's
 * log store renames its commit files through.
 */
public class LocalFs extends DelegateToFileSystem {
  public LocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(uri, new LocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
  }

  @Override
  public int getUriDefaultPort() {
    return -1;
  }
}
