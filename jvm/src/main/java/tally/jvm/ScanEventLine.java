package tally.jvm;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import java.io.IOException;
import java.io.StringWriter;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The event contract (docs/semantics.md, "Input and validation") in one pass of Jackson's byte
 * parser over a line: registered by {@code tally.events} as a Spark function returning
 * {@code SCAN_TYPE}, a struct of
 *
 * <ul>
 *   <li>{@code verdict}: {@code valid}, {@code control} (a control record carrying a source
 *       watermark; the second argument names its field, "" for none) or the first quarantine
 *       reason that applies;
 *   <li>a valid event's {@code event_id}, {@code key}, {@code amount}, {@code event_ms} and
 *       {@code extra} (unknown fields: strings as they are, JSON null as null, anything else as
 *       its compact JSON text);
 *   <li>{@code partition}: the payload's partition (null when absent), for events and control
 *       records;
 *   <li>{@code control_ms}: a control record's watermark;
 *   <li>{@code currency}: a valid event's {@code currency} text as sent (null when absent or
 *       JSON null); whether it is a currency code is {@code tally.events}' check, against the
 *       codes CLDR lists (a value that is no JSON string is {@code bad_currency} here).
 * </ul>
 *
 * One definition with the reference model ({@code tests/reference_model.py}); the contract
 * tests run both over one table of cases.
 */
public final class ScanEventLine implements UDF2<byte[], String, Row> {
  private static final long serialVersionUID = 1L;

  // The event times the contract accepts: years 0001 to 9999 in UTC, the years ISO-8601's four
  // digits can say (0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z). An epoch outside them is
  // bad_event_time (Spark's timestamp would overflow converting far larger ones).
  static final long EVENT_TIME_MIN_MS = -62_135_596_800_000L;
  static final long EVENT_TIME_MAX_MS = 253_402_300_799_999L;

  // Strict JSON (Jackson's defaults: no comments, single quotes, NaN or leading zeros); a
  // number of any length is a number (its field's rule then says whether it fits).
  private static final JsonFactory FACTORY =
      JsonFactory.builder()
          .streamReadConstraints(
              StreamReadConstraints.builder().maxNumberLength(Integer.MAX_VALUE).build())
          .build();

  private static final Row EMPTY_LINE = reason("empty_line");
  private static final Row INVALID_JSON = reason("invalid_json");
  private static final Row DUPLICATE_FIELD = reason("duplicate_field");

  @Override
  public Row call(byte[] line, String controlField) {
    if (line == null || isBlank(line)) {
      return EMPTY_LINE;
    }
    if (line.length >= 3 && line[0] == (byte) 0xEF && line[1] == (byte) 0xBB
        && line[2] == (byte) 0xBF) {
      return INVALID_JSON; // a byte-order mark is no JSON text
    }
    JsonObject object;
    try (JsonParser parser = FACTORY.createParser(line)) {
      object = JsonObject.read(parser);
    } catch (IOException e) { // a syntax error, bad UTF-8
      return INVALID_JSON;
    }
    if (object == null) {
      return INVALID_JSON;
    }
    if (object.duplicate) {
      return DUPLICATE_FIELD;
    }
    String control = controlField == null ? "" : controlField;
    if (!control.isEmpty() && object.present(control) && !object.present("event_id")) {
      return controlRecord(object, control);
    }
    return event(object);
  }

  /** The first rule an event breaks, in the contract's order, or the valid event. */
  private static Row event(JsonObject o) {
    if (isBlank(o.text("event_id"))) {
      return reason("missing_event_id");
    }
    if (isBlank(o.text("key"))) {
      return reason("missing_key");
    }
    Value amount = o.get("amount");
    if (amount == null) {
      return reason("missing_amount");
    }
    if (!amount.isLong) {
      return reason("amount_not_integer");
    }
    Value eventTime = o.get("event_time");
    if (eventTime == null) {
      return reason("missing_event_time");
    }
    Long eventMs = timeMillis(eventTime);
    if (eventMs == null) {
      return reason("bad_event_time");
    }
    Value partition = o.get("partition");
    if (partition != null && !partition.isInt) {
      return reason("partition_not_integer");
    }
    Value currency = o.get("currency");
    if (currency != null && currency.token != JsonToken.VALUE_STRING) {
      return reason("bad_currency");
    }
    Map<String, String> extra = o.extra == null ? Collections.emptyMap() : o.extra;
    return RowFactory.create(
        "valid",
        o.text("event_id"),
        o.text("key"),
        amount.longValue,
        eventMs,
        partition == null ? null : (int) partition.longValue,
        extra,
        null,
        currency == null ? null : currency.text);
  }

  /** A control record: its partition and watermark, or the rule it breaks. */
  private static Row controlRecord(JsonObject o, String field) {
    Value partition = o.get("partition");
    if (partition != null && !partition.isInt) {
      return reason("partition_not_integer");
    }
    Long watermark = timeMillis(o.get(field));
    if (watermark == null) {
      return reason("bad_watermark");
    }
    Integer payloadPartition = partition == null ? null : (int) partition.longValue;
    return RowFactory.create(
        "control", null, null, null, null, payloadPartition, null, watermark, null);
  }

  /** Epoch ms of a time field: a 64-bit JSON integer or a zoned ISO-8601 text, in range. */
  private static Long timeMillis(Value value) {
    Long ms = null;
    if (value.isLong) {
      ms = value.longValue;
    } else if (value.token == JsonToken.VALUE_STRING) {
      ms = IsoTime.epochMillis(value.text);
    }
    return ms != null && ms >= EVENT_TIME_MIN_MS && ms <= EVENT_TIME_MAX_MS ? ms : null;
  }

  private static Row reason(String reason) {
    return RowFactory.create(reason, null, null, null, null, null, null, null, null);
  }

  // The blank of the contract: only ASCII whitespace (space, \t, \n, \u000B, \f, \r).
  private static boolean isSpace(int c) {
    return c == ' ' || c == '\t' || c == '\n' || c == 0x0B || c == '\f' || c == '\r';
  }

  private static boolean isBlank(byte[] line) {
    for (byte b : line) {
      if (!isSpace(b)) {
        return false;
      }
    }
    return true;
  }

  /** Absent, JSON null, or whitespace only. */
  static boolean isBlank(String text) {
    if (text == null) {
      return true;
    }
    for (int i = 0; i < text.length(); i++) {
      if (!isSpace(text.charAt(i))) {
        return false;
      }
    }
    return true;
  }

  /** A top-level field's value, as much of it as the rules need. */
  static final class Value {
    JsonToken token;
    String text; // a string's text, or any other value's compact JSON text (see text())
    boolean isLong; // a JSON integer that fits 64 bits
    boolean isInt; // ... and 32 bits
    long longValue;

    /** The text: a 64-bit integer's decimal digits are made only when asked for (most are an
     * amount or a partition, read as numbers). */
    String text() {
      if (text == null && isLong) {
        text = Long.toString(longValue);
      }
      return text;
    }
  }

  /** A line's one JSON object: its known fields, the rest as text, and whether a name repeats. */
  static final class JsonObject {
    private static final String[] KNOWN = {
      "event_id", "key", "amount", "event_time", "partition", "currency"
    };
    private final Value[] known = new Value[KNOWN.length];
    private final Map<String, Value> others = new LinkedHashMap<>();
    Map<String, String> extra; // unknown fields' text, in the line's order (null: none)
    boolean duplicate;

    /** The object a parser holds, or null when it holds anything else (or more). */
    static JsonObject read(JsonParser parser) throws IOException {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      JsonObject o = new JsonObject();
      while (parser.nextToken() == JsonToken.FIELD_NAME) {
        String name = parser.currentName();
        parser.nextToken();
        o.put(name, readValue(parser));
      }
      return parser.nextToken() == null ? o : null; // nothing but whitespace after it
    }

    private void put(String name, Value value) {
      for (int i = 0; i < KNOWN.length; i++) {
        if (KNOWN[i].equals(name)) {
          duplicate |= known[i] != null || others.containsKey(name);
          known[i] = value;
          return;
        }
      }
      duplicate |= others.put(name, value) != null;
      if (extra == null) {
        extra = new LinkedHashMap<>();
      }
      extra.put(name, value.token == JsonToken.VALUE_NULL ? null : value.text());
    }

    /** A field that is there and not JSON null. */
    Value get(String name) {
      Value v = null;
      for (int i = 0; i < KNOWN.length; i++) {
        if (KNOWN[i].equals(name)) {
          v = known[i];
        }
      }
      if (v == null) {
        v = others.get(name);
      }
      return v == null || v.token == JsonToken.VALUE_NULL ? null : v;
    }

    boolean present(String name) {
      return get(name) != null;
    }

    String text(String name) {
      Value v = get(name);
      return v == null ? null : v.text();
    }

    private static Value readValue(JsonParser parser) throws IOException {
      Value v = new Value();
      v.token = parser.currentToken();
      if (v.token == JsonToken.VALUE_STRING) {
        v.text = parser.getText();
      } else if (v.token == JsonToken.VALUE_NUMBER_INT
          && parser.getNumberType() != JsonParser.NumberType.BIG_INTEGER) {
        v.isLong = true;
        v.longValue = parser.getLongValue();
        v.isInt = parser.getNumberType() == JsonParser.NumberType.INT;
      } else if (v.token != JsonToken.VALUE_NULL) {
        v.text = compactJson(parser); // numbers, booleans, objects, arrays
      }
      return v;
    }

    /** The current value (and what it contains) as compact JSON, as Jackson copies it. */
    private static String compactJson(JsonParser parser) throws IOException {
      StringWriter out = new StringWriter();
      try (JsonGenerator generator = FACTORY.createGenerator(out)) {
        generator.copyCurrentStructure(parser);
      }
      return out.toString();
    }
  }
}
