"""The object store the tests share: SeaweedFS's S3 gateway (helm/object_store.py) on loopback with
one bucket, started on first use and stopped at the end of the session.

Its weed binary is a test requirement, as PostgreSQL is (tests/postgres_support.py): `make test`
builds it once where Go is installed. Without it, a test that asks for the store is skipped with
the reason on a developer's machine and fails under CI=true, so that CI never passes by skipping.
"""

from __future__ import annotations

import secrets

import pytest
from k8s_support import load_helm_script
from prerequisites import missing, require

from fedlab.preflight import GO

BUCKET = "fedlab-test"


def object_store_module():
    return load_helm_script("object_store.py", "fedlab_object_store")


@pytest.fixture(scope="session")
def object_store(tmp_path_factory):
    """A running store (helm/object_store.py's ObjectStore) with the bucket BUCKET."""
    helper = object_store_module()
    if not helper.weed_path().is_file():
        require(GO)   # without Go it cannot be built: the preflight's line
        missing("these tests need SeaweedFS's weed (the object store): it is not built yet: "
                "`make objectstore` builds it (7-10 minutes)")
    store = helper.start(tmp_path_factory.mktemp("object-store"), access_key="fedlab-test",
                         secret_key=secrets.token_hex(16), bucket=BUCKET)
    yield store
    store.stop()
