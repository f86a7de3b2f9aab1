# Two front-door commands: `make demo` and `make test`. Both bootstrap the venv on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: preflight-demo preflight-test venv demo test quick soak bench image e2e-k8s e2e-nodes objectstore promtool go-tpc clean

# What the machine lacks, one line each with its Debian package, before anything is installed
# (fedlab/preflight.py): Python 3.11+ and Java 17+ for everything, and for the tests PostgreSQL, helm,
# Go, promtool and go-tpc, which stop `make test` under CI=true and elsewhere leave their tests
# skipped. promtool, which Debian's registry serves, and go-tpc, which Go builds, are installed
# first where they can be.
preflight-demo:
	@$(PYTHON) fedlab/preflight.py demo
preflight-test: promtool go-tpc
	@$(PYTHON) fedlab/preflight.py test

venv: preflight-demo $(STAMP)

# The install generates the gRPC stubs (setup.py): an edited .proto reinstalls.
$(STAMP): pyproject.toml setup.py proto/federation.proto
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/python -c 'import fedlab.fedmodel.wire'
	touch $(STAMP)

demo: venv
	$(BIN)/fedlab demo

# The tutorial's plug-in (docs/new-algorithm.md) is installed beside fedlab, as a user would
# install theirs, so that its tests run with the suite and the tutorial cannot rot.
EXAMPLE := examples/recompute_on_change
$(VENV)/.example-stamp: $(STAMP) $(EXAMPLE)/pyproject.toml
	$(BIN)/pip install -q --no-deps -e $(EXAMPLE)
	touch $@

# The Spark JVM's class data archive (warehouse/spark_session.py) is dumped once per machine and
# jar set, where the Delta jars are cached: every session of the suite then starts in half the time.
# Two pytest-xdist workers: one runs every test that needs Spark, Ray, PostgreSQL or helm, on one
# session of each (tests/conftest.py), while the other runs the rest on the core the first leaves idle.
test: preflight-test venv $(VENV)/.example-stamp objectstore
	@$(BIN)/python -m fedlab.warehouse.spark_session --class-archive
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=25

# The fast loop (a few minutes): the pure core, the simulator, the checker and the CLI, with fewer
# random schedules; nothing that needs Spark, Ray, PostgreSQL or helm, nothing marked slow.
quick: venv $(VENV)/.example-stamp
	FEDLAB_QUICK=1 $(BIN)/python -m pytest -q -n 2 -m "not spark and not ray and not postgres and not helm and not objectstore and not slow"

# SeaweedFS's weed, the S3-compatible server of the object-store tests (helm/object_store.py): built
# once into ~/.cache/fedlab/objectstore where Go is installed (7 minutes on 2 cores); without
# Go it says so, and the tests that need it say why they skip (or fail under CI=true).
objectstore:
	@$(PYTHON) helm/object_store.py build --optional

# promtool checks the chart's alert rules and the dashboard's queries (tests/test_chart_metrics.py):
# Debian's prometheus package, installed once where it is missing (no recommends: the node
# exporter is not wanted). Without root or the registry it says so, and those tests skip (fail
# under CI=true).
promtool:
	@test -x /usr/bin/promtool || command -v promtool >/dev/null || { \
	  echo "promtool: apt-get install prometheus (once)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } || \
	  echo "promtool: not installed (as root: apt-get install prometheus); the tests that need it skip"; }

# go-tpc, CH-benCHmark's driver (loadgen/ch/go_tpc.py): tests/test_ch_views.py checks the catalog
# against the schema it creates in PostgreSQL. Built once with `go install` at the version
# fedlab/preflight.py looks for, into the folder it looks in. Without Go or the Go module proxy it
# says so, and those tests skip (fail under CI=true).
GO_TPC_VERSION := v1.0.12
GO_TPC_DIR     := .cache/go-tpc/$(GO_TPC_VERSION)
go-tpc:
	@test -x $(GO_TPC_DIR)/go-tpc || { \
	  echo "go-tpc: go install github.com/pingcap/go-tpc/cmd/go-tpc@$(GO_TPC_VERSION) (once)"; \
	  command -v go >/dev/null && GOBIN=$(abspath $(GO_TPC_DIR)) go install github.com/pingcap/go-tpc/cmd/go-tpc@$(GO_TPC_VERSION); } || \
	  echo "go-tpc: not installed (Go from go.dev and the Go module proxy build it); the tests that need it skip"

# At least 10,000 random schedules of Sze-Ling, every fault and the warehouse's crashes (a few minutes).
soak: venv
	$(BIN)/fedlab soak --schedules 10000

bench: venv
	$(BIN)/fedlab bench

# The image for the local cluster (../shared/tools/local-k8s), built without a registry and
# imported into its containerd; users with a registry build the Dockerfile instead.
image: venv
	$(BIN)/python helm/image/build_local.py

# Installs the chart on the cluster of the current kube context, runs a short load with chaos and
# asserts the Helm test's verdict; says "skipped: no cluster reachable" and exits 0 without one.
# On a cluster of this machine, a Prometheus of its own scrapes the release throughout (promtool's
# package has it).
e2e-k8s: venv promtool
	$(BIN)/python helm/e2e_k8s.py

# The same run across worker nodes the local cluster tool adds beside node 1 (as root, with the
# cluster up and `make image` done): Delta on an S3 object store, placement asserted, crashes,
# partitions and drains of whole nodes under load; everything it made is taken down at the end.
e2e-nodes: venv promtool
	$(BIN)/python helm/e2e_nodes.py

clean:
	rm -rf runs .pytest_cache .hypothesis
