#!/usr/bin/env bash
# Copy the Delta Lake jars (jars/pom.xml) and their runtime dependencies into $1, leaving out
# what Spark already ships (Hadoop, Jackson, Scala, Parquet, logging, compression), so the
# session's classpath has one copy of each. Maven caches them in ~/.m2; this runs once.
set -euo pipefail
out=${1:-.cache/jars}
mkdir -p "$out"
mvn -B -q -f jars/pom.xml dependency:copy-dependencies \
  -DoutputDirectory="$(cd "$out" && pwd)" -DincludeScope=runtime \
  -DexcludeGroupIds=org.apache.hadoop,com.fasterxml.jackson.core,com.fasterxml.jackson.datatype,org.scala-lang,org.apache.parquet,org.apache.logging.log4j,org.slf4j,org.xerial.snappy,com.github.luben,io.airlift,commons-logging,org.roaringbitmap
ls "$out"/delta-spark_*.jar >/dev/null
echo "Delta jars in $out: $(ls "$out"/*.jar | wc -l) files"
