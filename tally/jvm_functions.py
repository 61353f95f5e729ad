"""tally's own Spark functions, written in Java (jvm/, built by `make install` into the
session's jars): their SQL names, their registration, and the columns that call them.

* `tally_scan_line`: the event contract's scanner (`tally.events.scan_line`).
* `tally_batch_long`: a micro-batch's value (watermark, processing time, batch id) as a
  BIGINT column that stays out of Spark's generated code (`batch_long`, `batch_timestamp`).
  Spark writes a BIGINT or TIMESTAMP literal into the Java source of every stage holding it,
  so a stage whose only change from the previous batch is such a value is compiled again
  (measured: ~28 of a small micro-batch's stages recompiled every batch, ~0.5 s of CPU). The
  value travels as a BINARY literal (an object the code refers to) through a function call
  (never folded into a literal), so the code is the same every batch and Spark's cache of
  compiled code serves it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyspark is imported where a column is built: tally.spark imports this
    from pyspark.sql import Column, SparkSession

SCAN_FUNCTION = "tally_scan_line"
SCAN_CLASS = "tally.jvm.ScanEventLine"
SCAN_TYPE = (
    "struct<verdict:string,event_id:string,key:string,amount:bigint,event_ms:bigint,"
    "partition:int,extra:map<string,string>,control_ms:bigint,currency:string>"
)
BATCH_LONG_FUNCTION = "tally_batch_long"
BATCH_LONG_CLASS = "tally.jvm.BatchLong"

_FUNCTIONS = (
    (SCAN_FUNCTION, SCAN_CLASS, SCAN_TYPE),
    (BATCH_LONG_FUNCTION, BATCH_LONG_CLASS, "bigint"),
)


class JvmFunctionsMissing(RuntimeError):
    """tally's jar is not on the session's classpath (one-line message)."""


def register_jvm_functions(spark: SparkSession) -> None:
    """Register every function of tally's jar in `spark` (idempotent, driver-side calls);
    `JvmFunctionsMissing` when the jar is not on the classpath."""
    for name, java_class, return_type in _FUNCTIONS:
        try:
            spark.udf.registerJavaFunction(name, java_class, return_type)
        except Exception as exc:
            if java_class not in str(exc):
                raise
            raise JvmFunctionsMissing(
                f"{java_class} is not on the Spark classpath: run `make install` (it builds "
                ".cache/jars/tally-jvm.jar)"
            ) from None


def batch_long(value: int) -> Column:
    """`value` as a BIGINT column that does not change the generated code from one value to
    the next (see the module docstring); the session must have `register_jvm_functions`."""
    from pyspark.sql import functions as F

    return F.call_function(BATCH_LONG_FUNCTION, F.lit(bytearray(str(int(value)), "ascii")))


def batch_long_sql(value: int) -> str:
    """`batch_long(value)` as SQL text, for expressions built as one string."""
    return f"{BATCH_LONG_FUNCTION}(X'{str(int(value)).encode('ascii').hex()}')"


def batch_timestamp(epoch_ms: int) -> Column:
    """A TIMESTAMP column for `epoch_ms`, like `batch_long`."""
    from pyspark.sql import functions as F

    return F.timestamp_millis(batch_long(epoch_ms))
