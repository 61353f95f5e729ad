"""tally's JVM functions beside the scanner (tally.jvm_functions): a micro-batch's values reach
the plan without changing the code Spark generates, so a stage is compiled once per stream, not
once per batch."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tally.jvm_functions import batch_long, batch_timestamp

VALUES = [
    0,
    -1,  # a sign
    1_795_616_074_142,  # an epoch-ms processing time
    -(2**63),  # the ends of BIGINT
    2**63 - 1,
]


def generated_code(df: DataFrame) -> str:
    """The Java source of the frame's whole-stage-codegen stages (Spark's `explain("codegen")`
    from its "Generated code:" on: the plan text before it names expression ids)."""
    jvm = df.sparkSession._jvm
    assert jvm is not None
    text = str(jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "codegen"))
    return text[text.index("Generated code:") :]


@pytest.mark.parametrize("value", VALUES)
def test_batch_long_is_the_value(spark, value: int) -> None:
    (row,) = spark.range(2).select(batch_long(value).alias("v")).distinct().collect()
    assert row["v"] == value


def test_batch_longs_of_one_row_keep_their_values(spark) -> None:
    """One row calling the function with many literals (more than the values it keeps: 8),
    over rows in one task: each column is its own value in every row."""
    values = [1_795_616_074_142 + i for i in range(12)] + [-1, 0]
    rows = (
        spark.range(0, 50, 1, 1)
        .select(*[batch_long(v).alias(f"v{i}") for i, v in enumerate(values)])
        .distinct()
        .collect()
    )
    assert [list(r) for r in rows] == [values]


def test_batch_timestamp_is_timestamp_millis(spark) -> None:
    ms = 1_795_616_074_142
    (row,) = (
        spark.range(1)
        .select(batch_timestamp(ms).alias("ours"), F.timestamp_millis(F.lit(ms)).alias("spark"))
        .collect()
    )
    assert row["ours"] == row["spark"] and row["ours"] is not None


def test_batch_values_leave_the_generated_code_unchanged(spark) -> None:
    def stage(value: F.Column) -> DataFrame:
        return spark.range(3).select((F.col("id") + value).alias("x")).where(F.col("x") > value)

    # Why it matters: a plain literal is written into the source, so a new value is new code.
    assert generated_code(stage(F.lit(1_795_616_074_142))) != generated_code(
        stage(F.lit(1_795_616_074_143))
    )
    ours = generated_code(stage(batch_long(1_795_616_074_142)))
    assert "1795616074142" not in ours
    assert ours == generated_code(stage(batch_long(1_795_616_074_143)))
