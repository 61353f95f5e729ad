#!/usr/bin/env bash
# Fetch, once, with Maven (cached in ~/.m2):
#   $1 (default .cache/jars): the jars tally's Spark sessions load: Delta Lake (jars/pom.xml),
#      Spark's Kafka source (jars/kafka-connector.pom.xml), S3A (jars/s3.pom.xml) and tally's
#      own line scanner, built from jvm/ (jvm/pom.xml), leaving
#      out what pyspark already ships (Hadoop, Jackson, Scala, Parquet, logging, compression,
#      Netty), so the classpath has one copy of each;
#   $2 (default .cache/kafka): a Kafka broker for scripts/kafka.sh (jars/kafka-broker.pom.xml),
#      never on Spark's classpath.
set -euo pipefail
out=${1:-.cache/jars}
broker=${2:-.cache/kafka}
mkdir -p "$out" "$broker"
out=$(cd "$out" && pwd)
broker=$(cd "$broker" && pwd)
# Copies of another version (an older pin) must not stay beside the new ones on a classpath.
rm -f "$out"/*.jar "$broker"/*.jar
mvn -B -q -f jars/pom.xml dependency:copy-dependencies \
  -DoutputDirectory="$out" -DincludeScope=runtime \
  -DexcludeGroupIds=org.apache.hadoop,com.fasterxml.jackson.core,com.fasterxml.jackson.datatype,org.scala-lang,org.apache.parquet,org.apache.logging.log4j,org.slf4j,org.xerial.snappy,com.github.luben,io.airlift,commons-logging,org.roaringbitmap
ls "$out"/delta-spark_*.jar >/dev/null
# The connector's other dependencies (zstd, lz4, snappy, slf4j) are pyspark's own already.
mvn -B -q -f jars/kafka-connector.pom.xml dependency:copy-dependencies \
  -DoutputDirectory="$out" -DincludeScope=runtime \
  -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
ls "$out"/spark-sql-kafka-0-10_*.jar >/dev/null
# S3A for s3a:// paths (jars/s3.pom.xml): hadoop-aws and a lean AWS SDK v2 set, 13 MB, not the
# SDK's 642 MB bundle. Netty, httpclient, commons-codec and logging are pyspark's own, and so is
# Hadoop (the pom excludes every Hadoop artifact but hadoop-aws).
mvn -B -q -f jars/s3.pom.xml dependency:copy-dependencies \
  -DoutputDirectory="$out" -DincludeScope=runtime \
  -DexcludeGroupIds=io.netty,org.apache.httpcomponents,commons-codec,org.slf4j,commons-logging
ls "$out"/hadoop-aws-*.jar "$out"/s3-2.*.jar >/dev/null
# tally's own JVM component (jvm/pom.xml): the functions `tally.jvm_functions` registers (the line
# scanner, the batch values). Spark and Jackson are provided by pyspark; the jar holds tally's
# classes only.
mvn -B -q -f jvm/pom.xml package
cp jvm/target/tally-jvm.jar "$out"/
echo "Spark session jars in $out: $(ls "$out"/*.jar | wc -l) files"
mvn -B -q -f jars/kafka-broker.pom.xml dependency:copy-dependencies \
  -DoutputDirectory="$broker" -DincludeScope=runtime
ls "$broker"/kafka_2.13-*.jar >/dev/null
echo "Kafka broker jars in $broker: $(ls "$broker"/*.jar | wc -l) files"
