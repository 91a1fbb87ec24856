# Every target sets itself up from scratch: a virtualenv, the package with its test and bench
# extras (pytest, hypothesis, py-spy), and the RocketMQ jars from Maven Central. RocketMQ is
# started and stopped by the tests themselves (integration/conftest.py); `make test` also stops any
# cluster a failed run left recorded.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?=
BENCH_ARGS ?=
# The project's own environments only (tests, demo, bench), not the library: PySpark 4.x warns
# (FutureWarning) that it does not yet fully support pandas 3.
DEV_PINS := 'pandas<3'
# The RocketMQ release the cluster runs: 4.9.7, 5.3.3, 5.5.0 or 5.5.1 (integration/versions.py).
ROCKETMQ_VERSION ?= 5.3.3
export ROCKETMQ_VERSION
RMQ_CLASSPATH := integration/target/classpath-$(ROCKETMQ_VERSION).txt
# 4.x has no proxy.
PROXY_FLAG := $(if $(filter 4.%,$(ROCKETMQ_VERSION)),,--proxy)
BIG_BENCH_ARGS ?=
SINK_BENCH_ARGS ?=

.PHONY: deps check format test package-test spark-lines docs-test unit integration compat compat-rocksdb faults eo-faults double-failover demo bench dist cluster-start cluster-stop clean

# The package is installed editable in setuptools' default mode. For this layout (setup.cfg names
# the project root as the package directory) that mode writes a plain .pth file holding the root:
# Spark's scan for pyspark_* modules (pkgutil.iter_modules, in its Python workers) finds
# pyspark_rocketmq, so format("rocketmq") resolves without a register call; a new module is seen
# without a reinstall; and integration/, tests/ and bench/ import from any folder, as Spark's
# workers need. The default for a flat layout without that line is an import hook that pkgutil
# cannot see, and strict mode links each file into build/, so new modules need a reinstall.
$(INSTALLED): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]' $(DEV_PINS)
	touch $(INSTALLED)

$(RMQ_CLASSPATH): $(INSTALLED) integration/pom.xml integration/tool/pom.xml $(shell find integration/tool -name '*.java')
	$(PY) -m integration.cluster build --version $(ROCKETMQ_VERSION)

# The virtualenv and the classpaths of every release CI runs (make test's, then compat's), built
# once so that the targets .ci/run runs side by side find them ready and never build them twice.
CI_RELEASES := 5.3.3 5.5.1 4.9.7
deps: $(INSTALLED)
	for release in $(CI_RELEASES); do \
		$(MAKE) --no-print-directory integration/target/classpath-$$release.txt ROCKETMQ_VERSION=$$release || exit 1; \
	done

# The static checks, in seconds and without servers: ruff's lint rules, mypy's strict types over
# the package (against the installed PySpark), and the layout make format gives (import order,
# then ruff format). Each runs even when one before it failed, so one run reports them all.
check: $(INSTALLED)
	status=0; \
	$(PY) -m ruff check --ignore I001 . || status=1; \
	$(PY) -m mypy || status=1; \
	$(PY) -m ruff check --select I001 --output-format concise . || status=1; \
	$(PY) -m ruff format --check --output-format concise . || status=1; \
	exit $$status

# Sorts the imports and formats every Python file, as make check expects.
format: $(INSTALLED)
	$(PY) -m ruff check --select I001 --fix .
	$(PY) -m ruff format .

# Every test but the package tests, the other PySpark lines, the fault tests and the docs tests
# (below), which would take make test from about 15 minutes to over 30 on two cores.
test: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	$(PY) -m pytest -m "not package and not spark_lines and not faults and not docs and not double_failover and not eo_faults" $(PYTEST_ARGS); status=$$?; $(PY) -m integration.cluster stop; exit $$status

# The distributions as a user gets them: sdist and wheel built and checked with twine, and the
# wheel with its connect extra serving a stream through Spark Connect, in a fresh virtualenv on
# PySpark 4.2. make spark-lines runs these too.
package-test: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	$(PY) -m pytest -m package $(PYTEST_ARGS); status=$$?; $(PY) -m integration.cluster stop; exit $$status

# The built wheel on the PySpark 4 lines the rest of the suite (on .venv's 4.3) does not run: 4.0,
# 4.1 and 4.2, each in a fresh virtualenv that gets its PySpark before a plain pip install of the
# wheel, which must leave that PySpark in place. Per line the unit tests against the installed
# wheel, then one Spark process of that interpreter checks the adapter's branches and writes a
# batch; a committed stream restarted on its checkpoint, AvailableNow, a time window, a new group
# from the last offset, a topic of 2 x 512 queues and a stream into the sink run against the real
# broker on each line where they go through branches 4.3 and the lines before did not
# (integration/tests/test_spark_lines.py); then the wheel beside PySpark 3.5, where it must not
# import, and the package tests above, sharing the 4.2 virtualenv. About 6 minutes on 2 cores;
# .ci/run runs it in its second lane (docs/development/testing.md).
spark-lines: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	$(PY) -m pytest -m "package or spark_lines" $(PYTEST_ARGS); status=$$?; $(PY) -m integration.cluster stop; exit $$status

# The documentation as a reader runs it (integration/tests/test_docs.py, test_cluster_recipe.py):
# every fenced block of README.md and docs/ marked tested or illustrative; the quickstart's hello
# world on its launcher path (make cluster-start, a RocketMQ of its own), its write included; the
# demo from the built wheel in a fresh virtualenv; the cluster recipe of docs/operations.md on a
# Spark standalone cluster started from the installed PySpark (a master, two workers), a venv-pack
# archive shipped with --archives, a backfill and a stream restarted on its checkpoint.
docs-test: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	$(PY) -m pytest -m docs $(PYTEST_ARGS); status=$$?; $(PY) -m integration.cluster stop; exit $$status

unit: $(INSTALLED)
	$(PY) -m pytest tests $(PYTEST_ARGS)

integration: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m pytest integration -m "not package and not spark_lines and not faults and not docs and not double_failover and not eo_faults" $(PYTEST_ARGS); status=$$?; $(PY) -m integration.cluster stop; exit $$status

# The compatibility subset of the source and the sink against one release (test_versions.py,
# test_sink_versions.py), exactly-once's suite without kills (test_exactly_once.py; 5.5.x's
# brokers start with the mitigation of their op thread's spin, integration/versions.py) and, on
# 4.9.7, least-privilege users of its plain ACL, the source's and
# the sink's and exactly-once's (test_least_privilege.py, test_exactly_once_acl.py; 5.5.1's
# brokers cannot authorize here, see integration/versions.py).
# On a 5.x release, then the source's subset again on brokers whose consume queues live in
# RocksDB (compat-rocksdb's run; COMPAT_ROCKSDB= leaves it out, as CI does, which makes it in
# its other lane). E.g. make compat ROCKETMQ_VERSION=4.9.7 (about 10 minutes on
# 4.9.7, 10 on 5.x, where the cases also run through the proxy; see docs/running-rocketmq.md).
COMPAT_LEAST_PRIVILEGE = $(if $(filter 4.9.7,$(ROCKETMQ_VERSION)),integration/tests/test_least_privilege.py integration/tests/test_exactly_once_acl.py,)
# Exactly-once's suite on every release; 4.9 has no proxy to refuse.
COMPAT_NO_PROXY = $(if $(filter 4.%,$(ROCKETMQ_VERSION)),-k "not proxy_endpoint",)
COMPAT_ROCKSDB = $(if $(filter 5.%,$(ROCKETMQ_VERSION)),compat-rocksdb,)
compat: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	$(PY) -m pytest integration/tests/test_versions.py integration/tests/test_sink_versions.py integration/tests/test_exactly_once.py $(COMPAT_LEAST_PRIVILEGE) $(COMPAT_NO_PROXY) $(PYTEST_ARGS); status=$$?; $(PY) -m integration.cluster stop; exit $$status
	$(if $(COMPAT_ROCKSDB),$(MAKE) compat-rocksdb,)

# The source's compatibility subset (test_versions.py) and its expired messages
# (test_retention.py) against brokers whose consume queues live in RocksDB
# (storeType=defaultRocksDB), through the brokers only: the store answers offsets and searches by
# time, whichever endpoint asks, and the sink reads none of it. 5.3.3 unless ROCKETMQ_VERSION says
# otherwise (5.x only); about 5 minutes.
compat-rocksdb: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	ROCKETMQ_STORE=rocksdb $(PY) -m pytest integration/tests/test_versions.py integration/tests/test_retention.py -k "not proxy" $(PYTEST_ARGS); status=$$?; $(PY) -m integration.cluster stop; exit $$status

# Faults under a running stream, each on 20,000 messages with exactly-once output and exact stored
# offsets checked afterwards: a broker and a name server killed (SIGKILL) and restarted, one of two
# name servers gone, the Spark driver killed mid-batch, and a relay in front of one broker that
# delays, stalls, resets and cuts its traffic (docs/operations.md#failures); then the topology cases
# on two brokers of their own (integration/tests/test_topology.py): a new query and a restart while a
# broker is down, a broker frozen past retryBudgetMs, readQueueNums lowered and raised; then the
# failovers of replicated clusters of their own (integration/tests/test_failover.py): master-slave
# on 5.3.3 (with and without slave reads) and 4.9.7, a DLedger group, controller mode, a batch read
# served by a slave; last, a DLedger group that loses two leaders in a row under steady sends, so
# that RocketMQ may lose acknowledged messages (integration/tests/test_double_failover.py, 4 to 8
# minutes). About 22 minutes on 2 cores (docs/development/testing.md).
# FAULTS_LEAVE=<marker> leaves a marked part out: .ci/run runs the double failover on its own
# (make double-failover) in its other lane, where there is room. -rP prints what the test said
# when it passes too: which of its outcomes the election gave.
double-failover: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	$(PY) -m pytest -m double_failover -rP $(PYTEST_ARGS); status=$$?; $(PY) -m integration.cluster stop; exit $$status

# The exactly-once sink's driver killed at each moment of a commit, and a broker killed, stalled
# or failed over under one (about 12 minutes: a Spark process per run), in CI's second lane.
eo-faults: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	$(PY) -m pytest -m eo_faults $(PYTEST_ARGS); status=$$?; $(PY) -m integration.cluster stop; exit $$status

faults: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	$(PY) -m pytest -m "faults$(if $(FAULTS_LEAVE), and not $(FAULTS_LEAVE))" $(PYTEST_ARGS); status=$$?; $(PY) -m integration.cluster stop; exit $$status

# The main job: orders into RocketMQ, a stream of the paid ones into parquet, committed offsets.
# The script needs only the installed package and a name server (ROCKETMQ_PORT_OFFSET moves the
# launcher's 9876); this starts two brokers for it and stops them afterwards.
DEMO_NAMESRV = 127.0.0.1:$$((9876 + $${ROCKETMQ_PORT_OFFSET:-0}))
demo: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	$(PY) -m integration.cluster start --version $(ROCKETMQ_VERSION) && \
		$(PY) docs/examples/demo.py --name-server "$(DEMO_NAMESRV)"; \
		status=$$?; $(PY) -m integration.cluster stop; exit $$status

# The connector against RocketMQ's official Java client on 1,000,000 messages, then a topic of
# 2 x 512 queues with 10 messages each (idle triggers, one micro-batch, spark.read, driver
# requests), each on a RocketMQ of its own (integration/work/bench and bench-big, default ports;
# stopped at the end, also on failure). About 9 minutes on a quiet 2-core machine: 6 for the
# comparison (with the five-column spark.read, the storeTimestamp window with and without
# pushdown, and two 30 s latency runs), 3 for the big topic. A quick run: make bench BENCH_ARGS="--messages 100000 --repeats 1 --latency-seconds 10"
# BIG_BENCH_ARGS="--queues-per-broker 128". Last, the sink against the Java producer's sync, async
# and batch sends, 1,000,000 rows of 1 KiB a run, 3 runs each (integration/work/bench-sink; its
# stores are deleted at the end): make bench SINK_BENCH_ARGS="--messages 100000 --repeats 1".
bench: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster stop
	$(PY) bench/bench_compare.py $(BENCH_ARGS)
	$(PY) bench/bench_big_topic.py $(BIG_BENCH_ARGS)
	$(PY) bench/bench_sink.py $(SINK_BENCH_ARGS)

# The sdist and the wheel a release uploads, checked as PyPI reads them (make package-test checks
# them too, and installs the wheel into a fresh virtualenv).
dist: $(INSTALLED)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*

cluster-start: $(INSTALLED) $(RMQ_CLASSPATH)
	$(PY) -m integration.cluster start --version $(ROCKETMQ_VERSION) $(PROXY_FLAG) --property-filter

cluster-stop: $(INSTALLED)
	$(PY) -m integration.cluster stop

clean: cluster-stop
	rm -rf $(VENV) integration/target integration/work integration/work-* *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache build dist
