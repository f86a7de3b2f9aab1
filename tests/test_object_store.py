"""Delta on an object store, for real: the warehouse's Delta store (warehouse.store.delta_store)
under s3a:// on SeaweedFS's S3 gateway (helm/object_store.py, the shared `object_store` fixture),
through the jars warehouse.spark_session brings (hadoop-aws and the AWS SDK modules it needs).

Batches are committed, the store is stopped and started again on its data, and a new store object
restores the view, the version state, the change log and the notifications from it (its restart
reading the tables' logs with pyarrow's S3 client: warehouse.store.delta_reader); `fedlab view`
reads the view there. Expected contents are recomputed independently (tests/test_delta_store.py's
Counter of the batches). The suite's one Spark session reaches the store through per-bucket S3A
settings set on its Hadoop configuration (fs.s3a.bucket.<bucket>.*), before its first s3a:// path.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
from k8s_support import REPO
from object_store_support import BUCKET, object_store_module
from test_delta_reader import same_as_spark
from test_delta_store import BATCHES, COLUMNS, INITIAL, TYPES, commit, expected_view, notification, run_dir_for, state

from fedlab.warehouse.spark_session import AWS_SDK_VERSION, HADOOP_AWS
from fedlab.warehouse.store.delta_store import DeltaViewStore


def test_hadoop_aws_is_the_hadoop_of_pyspark():
    """hadoop-aws runs inside pyspark's Hadoop (hadoop-client-api): the two versions must be one."""
    shipped = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    assert [jar.name for jar in shipped] == [f"hadoop-client-api-{HADOOP_AWS.split(':')[2]}.jar"]


def test_the_session_carries_hadoop_aws_and_the_sdk_modules_not_the_bundle(spark):
    jars = [str(j).rsplit("/", 1)[-1] for j in spark.sparkContext._jsc.jars()]
    assert any(j.endswith(f"hadoop-aws-{HADOOP_AWS.split(':')[2]}.jar") for j in jars), jars
    assert any(j.endswith(f"s3-{AWS_SDK_VERSION}.jar") for j in jars), jars
    assert not [j for j in jars if "bundle-" in j or "netty-" in j.replace("netty-nio-client", "")], jars


def object_store_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "helm" / "object_store.py"), *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_without_go_the_build_says_what_is_missing_in_one_line(tmp_path):
    """As `make objectstore` runs it (--optional: make test goes on, and the tests that need weed
    say why they skip), and as a user would (exit 1)."""
    bare = {"PATH": "/nowhere", "FEDLAB_OBJECTSTORE_DIR": str(tmp_path)}
    optional, required = object_store_cli("build", "--optional", env=bare), object_store_cli("build", env=bare)
    assert optional.returncode == 0 and "not built: Go is needed to build SeaweedFS's weed" in optional.stderr
    assert required.returncode == 1 and required.stderr.startswith("object store: Go is needed")
    assert len(required.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_start_without_credentials_and_stop_without_a_store_say_so(tmp_path):
    no_keys = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    started = object_store_cli("start", "--data", str(tmp_path), env=no_keys)
    assert started.returncode == 1 and "an access key and a secret key are needed" in started.stderr
    assert not list(tmp_path.iterdir())
    stopped = object_store_cli("stop", "--data", str(tmp_path))
    assert stopped.returncode == 0 and "no store runs with its data in" in stopped.stderr


def test_the_store_answers_its_credentials_only(object_store):
    helper = object_store_module()
    assert helper._s3(object_store, "GET", "/", ok=(200,)) == 200
    assert helper._s3(object_store, "GET", f"/{BUCKET}", ok=(200,)) == 200
    stranger = helper.ObjectStore(**{**vars(object_store), "secret_key": "wrong"})
    with pytest.raises(helper.ObjectStoreError, match="answered HTTP 403"):
        helper._s3(stranger, "GET", "/", ok=(200,))


def test_a_second_store_on_the_same_data_is_refused(object_store):
    helper = object_store_module()
    with pytest.raises(helper.ObjectStoreError, match="a store already runs there"):
        helper.start(object_store.data, object_store.access_key, object_store.secret_key)


def test_a_store_killed_and_started_again_takes_writes_that_need_new_volumes(object_store, tmp_path):
    """weed keeps its master's state under the master's port: a store restarted on another one
    forgot its cluster, froze volume growth, and every write to a new bucket failed (HTTP 500).
    That is how a killed end-to-end run's store failed the next run's Delta commits. (A store of
    its own beside the shared one, whose fixture brings the marker and the skip without weed.)"""
    helper = object_store_module()
    store = helper.start(tmp_path, object_store.access_key, object_store.secret_key, bucket="before")
    assert helper._s3(store, "PUT", "/before/object", ok=(200,), body=b"x" * 1000) == 200
    os.killpg(store.pid, signal.SIGKILL)
    assert helper._exited(store.pid, timeout=10)
    again = helper.start(tmp_path, store.access_key, store.secret_key, bucket="after")
    try:
        # the master's warm-up after a restart holds new volumes back for 15 s
        assert helper._s3(again, "PUT", "/after/object", ok=(200,), body=b"y" * 1000, timeout=60) == 200
        assert helper._s3(again, "GET", "/before/object", ok=(200,)) == 200
    finally:
        again.stop()
    master_port = json.loads((tmp_path / "master-ports.json").read_text())[0]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", master_port))
        with pytest.raises(helper.ObjectStoreError, match=f"port {master_port} is taken, and this store's master"):
            helper.start(tmp_path, store.access_key, store.secret_key)


def test_delta_batches_on_s3a_survive_a_restart_of_the_store(spark, object_store, tmp_path, capsys, caplog):
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in object_store.hadoop_conf(BUCKET).items():
        hadoop.set(key, value)
    root = f"s3a://{BUCKET}/restart/delta"
    store = DeltaViewStore(spark, root, COLUMNS, TYPES)
    assert store.initialize(INITIAL, state(0)) is True
    for batch_id, applied in BATCHES:
        assert commit(store, batch_id, applied, [notification("ds1", a.dsv) for a in applied]) is True

    object_store.stop()
    restarted = object_store_module().start(object_store.data, object_store.access_key, object_store.secret_key,
                                            port=object_store.port)   # the fixture stops it
    assert restarted.pid != object_store.pid

    again = DeltaViewStore(spark, root, COLUMNS, TYPES)
    with caplog.at_level(logging.WARNING, logger="fedlab.warehouse.store.delta_store"):
        restored = again.load()
    assert caplog.records == []   # read from the logs with pyarrow's S3 client, not through Spark
    same_as_spark(again)
    assert restored.view == expected_view(3)
    assert (restored.state, restored.last_seq, restored.last_batch) == (state(6), 5, 3)   # seqs 0..5
    assert restored.pending == []   # each notification is reflected by the state of its batch
    assert again.read_change_log() == [a for _, applied in BATCHES for a in applied]
    assert [(n.source, n.dsv) for n in again.read_notifications()] == [("ds1", d) for d in range(1, 7)]
    assert commit(again, 3, BATCHES[2][1]) is False   # already there: not applied twice

    from fedlab.live import delta_view

    run = run_dir_for(tmp_path, root)
    assert delta_view.main(argparse.Namespace(run_dir=str(run), limit=0, json=True)) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["batch"], shown["versions"]) == (3, {"ds1": 6})
    assert {tuple(r[:-1]): r[-1] for r in shown["rows"]} == expected_view(3)
