package tally.jvm;

import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.api.java.UDF1;

/**
 * A micro-batch's value (a watermark, a processing time, a batch id) as a BIGINT column that
 * does not become part of Spark's generated code: registered by {@code tally.jvm_functions} and
 * called with the value's decimal digits as a BINARY literal.
 *
 * <p>Why: Spark writes a BIGINT or TIMESTAMP literal into the Java source it generates for a
 * stage, so a plan that differs from the previous batch's only in such a value is compiled
 * again (Janino), every batch, for every stage that holds one. A BINARY literal is a reference
 * to an object instead, and a function call is not folded into a literal by the optimizer, so
 * the source is the same from batch to batch and Spark's compiled-code cache serves it.
 *
 * <p>Each row of a task sees the same array object; the parsed value is kept for it.
 */
public final class BatchLong implements UDF1<byte[], Long> {
  private static final long serialVersionUID = 1L;

  /** The last text parsed and its value, swapped as one object (tasks may share an instance). */
  private static final class Parsed {
    final byte[] text;
    final Long value;

    Parsed(byte[] text, Long value) {
      this.text = text;
      this.value = value;
    }
  }

  private transient volatile Parsed last;

  @Override
  public Long call(byte[] text) {
    if (text == null) {
      return null;
    }
    Parsed seen = last;
    if (seen != null && seen.text == text) {
      return seen.value;
    }
    Long value = Long.valueOf(new String(text, StandardCharsets.US_ASCII));
    last = new Parsed(text, value);
    return value;
  }
}
