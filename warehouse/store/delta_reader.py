"""A Delta table read from its log and Parquet files in Python (pyarrow), without Spark: what a
restarting warehouse reads (warehouse.store.delta_store, `load`), so that its restore waits for no
Spark job, and on Kubernetes for no executor pod (docs/kubernetes.md, "Recovery").

Of the Delta Transaction Log Protocol (delta-io/delta, PROTOCOL.md), it implements what the
store's own tables use, as delta-spark writes them:
- "Delta Log Entries": the commits `_delta_log/<version>.json`, one action per line;
- "Checkpoints": classic single-file checkpoints (`<version>.checkpoint.parquet`), the newest
  at or below the version read, then every commit after it (delta-spark writes a checkpoint of
  several parts only for tables of millions of files; the reader replays past one);
- "Action Reconciliation": the newest `protocol` and `metaData` win; the table's files are the
  `add` actions not undone by a later `remove` of the same path;
- "Add File and Remove File": relative paths, URI-encoded;
- "Per-file Statistics": `stats`, the bounds by which a read leaves a file out (`Snapshot.files`);
- "Commit Provenance Information": each commit's `commitInfo` (`history`: userMetadata, operation);
- "Protocol Evolution" and "Table Features": reader version 1 only.
Anything else -- a reader version above 1 (column mapping, deletion vectors, V2 checkpoints, any
reader feature), a partitioned table, a file with a deletion vector or outside the table, a log
whose commits after its checkpoint are missing, a file system other than a local one or s3a:// --
raises UnsupportedTable with one line saying what, and the caller reads through Spark instead.

Why not delta-rs (the `deltalake` package): a second Delta implementation in the image beside
delta-spark's, whose protocol support would have to be pinned and tested against it on its own,
for the few actions above. This reader is held to delta-spark by tests/test_delta_reader.py, on
tables delta-spark wrote.

On s3a:// it reaches the object store with pyarrow's S3 client and the S3A settings Spark has
(`s3_filesystem`: endpoint, region, path-style access, keys), whose credentials, when the settings
name none, come from the environment as S3A's default chain takes them.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

_COMMIT = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint\.parquet")
# Files and commits are fetched this many at a time: on an object store each is a request.
_FETCHES = 16


class UnsupportedTable(Exception):
    """The table, or where it lives, needs more of the Delta protocol than this reader implements."""


@dataclass(frozen=True)
class AddFile:
    """One data file of a snapshot: its path (relative to the table) and statistics."""

    path: str
    stats: dict | None   # "Per-file Statistics": numRecords, minValues, maxValues, nullCount


@dataclass(frozen=True)
class Snapshot:
    """A table at one version: its schema and its data files."""

    version: int
    schema: dict          # the metaData's schemaString, parsed
    adds: tuple[AddFile, ...]

    @property
    def columns(self) -> list[str]:
        return [f["name"] for f in self.schema["fields"]]

    def field_names(self, column: str) -> list[str]:
        """The names of a struct column's fields."""
        kind = next(f["type"] for f in self.schema["fields"] if f["name"] == column)
        return [f["name"] for f in kind["fields"]]

    def files(self, column: str | None = None, at_least: int | None = None) -> list[AddFile]:
        """The files, less those whose statistics say every value of `column` is below
        `at_least` (a file without bounds for it is kept, as Delta's data skipping keeps it)."""
        if column is None:
            return list(self.adds)
        kept = []
        for add in self.adds:
            top = (add.stats or {}).get("maxValues", {}).get(column)
            if top is None or top >= at_least:
                kept.append(add)
        return kept


class TableLog:
    """The Delta table at `path` on the pyarrow file system `fs` (`open_table` makes both from a URI)."""

    def __init__(self, fs: pafs.FileSystem, path: str):
        self.fs, self.path = fs, path.rstrip("/")
        self._log = f"{self.path}/_delta_log"

    def _listing(self) -> tuple[dict[int, str], dict[int, str]]:
        """The log's commits and checkpoints, {version: path} each."""
        commits, checkpoints = {}, {}
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self._log, allow_not_found=True))
        except NotADirectoryError:
            infos = []
        for info in infos:
            name = info.base_name
            if match := _COMMIT.fullmatch(name):
                commits[int(match[1])] = info.path
            elif match := _CHECKPOINT.fullmatch(name):
                checkpoints[int(match[1])] = info.path
        return commits, checkpoints

    def exists(self) -> bool:
        """Whether the table has a commit or a checkpoint (a log folder alone is no table yet)."""
        commits, checkpoints = self._listing()
        return bool(commits or checkpoints)

    def history(self, limit: int) -> list[tuple[int, dict]]:
        """(version, commitInfo) of the newest `limit` versions whose commit the log still holds,
        newest first, as DESCRIBE HISTORY ... LIMIT gives them."""
        commits, checkpoints = self._listing()
        latest = max([*commits, *checkpoints], default=-1)
        wanted = [v for v in range(latest, latest - limit, -1) if v in commits]
        return [(v, next((a["commitInfo"] for a in actions if "commitInfo" in a), {}))
                for v, actions in zip(wanted, self._commits([commits[v] for v in wanted]))]

    def snapshot(self, version: int | None = None) -> Snapshot:
        """The table at `version` (default: its newest), replayed from the newest checkpoint at
        or below it and the commits after it ("Action Reconciliation")."""
        commits, checkpoints = self._listing()
        newest = max([*commits, *checkpoints], default=None)
        if newest is None:
            raise UnsupportedTable(f"{self.path} has no Delta log")
        version = newest if version is None else version
        start = max((v for v in checkpoints if v <= version), default=-1)
        missing = [v for v in range(start + 1, version + 1) if v not in commits]
        if missing:
            raise UnsupportedTable(f"{self.path}: the log lacks commit {missing[0]} after checkpoint {start}")
        protocol = metadata = None
        files: dict[str, dict] = {}
        if start >= 0:
            protocol, metadata, files = _checkpoint(self.fs, checkpoints[start])
        for actions in self._commits([commits[v] for v in range(start + 1, version + 1)]):
            for action in actions:
                if "add" in action:
                    files[action["add"]["path"]] = action["add"]
                elif "remove" in action:
                    files.pop(action["remove"]["path"], None)
                elif "protocol" in action:
                    protocol = action["protocol"]
                elif "metaData" in action:
                    metadata = action["metaData"]
        if protocol is None or metadata is None:
            raise UnsupportedTable(f"{self.path}: no protocol or metaData up to version {version}")
        _check_supported(self.path, protocol, metadata)
        return Snapshot(version, json.loads(metadata["schemaString"]), tuple(_add_file(self.path, a) for a in files.values()))

    def read(self, files: list[AddFile], columns: list[str]) -> pa.Table | None:
        """The rows of `files`, their `columns` only, in one table (None: no files)."""
        def one(add: AddFile) -> pa.Table:
            return pq.read_table(f"{self.path}/{add.path}", filesystem=self.fs, columns=columns)
        with ThreadPoolExecutor(_FETCHES) as pool:
            tables = list(pool.map(one, files))
        return pa.concat_tables(tables, promote_options="permissive") if tables else None

    def _commits(self, paths: list[str]) -> list[list[dict]]:
        """Each commit's actions, in the order of `paths`."""
        def one(path: str) -> list[dict]:
            with self.fs.open_input_stream(path) as stream:
                return [json.loads(line) for line in stream.read().splitlines() if line.strip()]
        with ThreadPoolExecutor(_FETCHES) as pool:
            return list(pool.map(one, paths))


def _checkpoint(fs: pafs.FileSystem, path: str) -> tuple[dict | None, dict | None, dict[str, dict]]:
    """A classic checkpoint's protocol, metaData and add actions by path (its remove actions are
    tombstones for VACUUM, not part of the snapshot)."""
    table = pq.read_table(path, filesystem=fs, columns=["add", "metaData", "protocol"])
    files = {add["path"]: add for add in table.column("add").to_pylist() if add is not None}
    metadata = next((m for m in table.column("metaData").to_pylist() if m is not None), None)
    protocol = next((p for p in table.column("protocol").to_pylist() if p is not None), None)
    return protocol, metadata, files


def _check_supported(path: str, protocol: Mapping, metadata: Mapping) -> None:
    """UnsupportedTable unless the table asks nothing of a reader beyond version 1 and is not partitioned."""
    if protocol.get("minReaderVersion", 1) > 1:
        features = ", ".join(protocol.get("readerFeatures") or []) or "none named"
        raise UnsupportedTable(f"{path} needs Delta reader version {protocol['minReaderVersion']} "
                               f"(reader features: {features})")
    if metadata.get("partitionColumns"):
        raise UnsupportedTable(f"{path} is partitioned by {metadata['partitionColumns']}")


def _add_file(table: str, add: Mapping) -> AddFile:
    if add.get("deletionVector"):
        raise UnsupportedTable(f"{table}: file {add['path']} has a deletion vector")
    path = unquote(add["path"])
    if "://" in path or path.startswith("/") or ":" in path.split("/", 1)[0]:
        raise UnsupportedTable(f"{table}: file {path} lies outside the table")
    stats = add.get("stats")
    return AddFile(path, json.loads(stats) if stats else None)


def open_table(uri: str, setting: Callable[[str], str | None] = lambda key: None) -> TableLog:
    """The Delta table at `uri`: a local path, or s3a://bucket/key reached with the S3A settings
    `setting(key)` gives (`s3_filesystem`); UnsupportedTable for any other scheme."""
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return TableLog(pafs.LocalFileSystem(), parts.path if parts.scheme else uri)
    if parts.scheme == "s3a":
        return TableLog(s3_filesystem(parts.netloc, setting), f"{parts.netloc}{parts.path}")
    raise UnsupportedTable(f"{uri}: no reader for {parts.scheme}:// here")


def s3_filesystem(bucket: str, setting: Callable[[str], str | None]) -> pafs.S3FileSystem:
    """pyarrow's S3 client for `bucket`, from Hadoop's S3A settings as `setting(key)` gives them
    (fs.s3a.bucket.<bucket>.<key> before fs.s3a.<key>): endpoint, endpoint.region,
    path.style.access, access.key and secret.key (none: the environment's AWS_* variables).

    >>> fs = s3_filesystem("b", {"fs.s3a.endpoint": "http://127.0.0.1:8333", "fs.s3a.access.key": "k",
    ...                          "fs.s3a.secret.key": "s", "fs.s3a.bucket.b.endpoint.region": "eu"}.get)
    >>> fs.region
    'eu'
    """
    def s3a(key: str) -> str | None:
        for name in (f"fs.s3a.bucket.{bucket}.{key}", f"fs.s3a.{key}"):
            value = setting(name)
            if value:
                return value.strip()
        return None

    options = {"region": s3a("endpoint.region") or "us-east-1"}
    endpoint = s3a("endpoint")
    if endpoint:
        scheme, _, host = endpoint.rpartition("://")
        secure = (s3a("connection.ssl.enabled") or "true").lower() == "true"
        # pyarrow addresses buckets by path on an endpoint of one's own unless told otherwise; S3A
        # by host unless told otherwise.
        options.update(endpoint_override=host, scheme=scheme or ("https" if secure else "http"),
                       force_virtual_addressing=(s3a("path.style.access") or "false").lower() != "true")
    access, secret = s3a("access.key"), s3a("secret.key")
    if access and secret:
        options.update(access_key=access, secret_key=secret)
    return pafs.S3FileSystem(**options)
