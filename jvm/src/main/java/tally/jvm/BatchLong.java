package tally.jvm;

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
 * <p>Every call of the function in a task shares one instance, and one row may call it with
 * several literals (the watermark, the clock-skew limit, the processing time): the values of
 * the last {@link #KEPT} arrays seen are kept, looked up by the array's identity. (One kept
 * value made the calls of one row replace each other's: a text parse per call.)
 */
public final class BatchLong implements UDF1<byte[], Long> {
  private static final long serialVersionUID = 1L;

  /** How many literals' values are kept: more than a stage's distinct batch values. */
  static final int KEPT = 8;

  /** The literals seen and their values, replaced as one array (tasks may share an instance). */
  private static final class Parsed {
    final byte[][] texts;
    final Long[] values;

    Parsed(byte[][] texts, Long[] values) {
      this.texts = texts;
      this.values = values;
    }
  }

  private transient volatile Parsed kept;

  @Override
  public Long call(byte[] text) {
    if (text == null) {
      return null;
    }
    Parsed seen = kept;
    if (seen != null) {
      for (int i = 0; i < seen.texts.length; i++) {
        if (seen.texts[i] == text) {
          return seen.values[i];
        }
      }
    }
    Long value = parse(text);
    // the newest first; the oldest falls off beyond KEPT
    int old = seen == null ? 0 : Math.min(seen.texts.length, KEPT - 1);
    byte[][] texts = new byte[old + 1][];
    Long[] values = new Long[old + 1];
    texts[0] = text;
    values[0] = value;
    if (old > 0) {
      System.arraycopy(seen.texts, 0, texts, 1, old);
      System.arraycopy(seen.values, 0, values, 1, old);
    }
    kept = new Parsed(texts, values);
    return value;
  }

  /** The value of ASCII decimal digits with an optional sign, as {@link Long#valueOf}. */
  static Long parse(byte[] text) {
    return Long.valueOf(new String(text, java.nio.charset.StandardCharsets.US_ASCII));
  }
}
