#!/usr/bin/env bash
# The benchmark's Flink peer (bench/flink_job.py), once, in its own directory $1 (default
# .cache/flink), never in tally's virtualenv (PyFlink pins py4j, pandas and pyarrow below
# tally's):
#   $1/venv: a virtualenv with apache-flink (PyFlink and Flink's own jars, ~850 MB), pinned by
#      constraints-flink.txt;
#   $1/jars: Flink's Kafka SQL connector (jars/flink-kafka.pom.xml), fetched with Maven.
# `make flink` runs it; `make bench` depends on it. The bench finds the peer at .cache/flink.
set -euo pipefail
FLINK_VERSION=2.3.0
dir=${1:-.cache/flink}
python=${PYTHON:-python3}
mkdir -p "$dir"
# the real path: the virtualenv's own scripts name it, and .cache may be a symlink
dir=$(cd "$dir" && pwd -P)
test -x "$dir/venv/bin/python" || "$python" -m venv "$dir/venv"
"$dir/venv/bin/python" -m pip install -q --upgrade pip
"$dir/venv/bin/python" -m pip install -q -c constraints-flink.txt "apache-flink==$FLINK_VERSION"
"$dir/venv/bin/python" -m pip check
"$dir/venv/bin/python" -c "import pyflink.table" # fails loudly on a broken install
mkdir -p "$dir/jars"
rm -f "$dir/jars"/*.jar
mvn -B -q -f jars/flink-kafka.pom.xml dependency:copy-dependencies \
  -DoutputDirectory="$dir/jars" -DincludeScope=runtime -DexcludeTransitive=true
ls "$dir"/jars/flink-sql-connector-kafka-*.jar >/dev/null
echo "Flink $FLINK_VERSION in $dir/venv, its Kafka connector in $dir/jars"
