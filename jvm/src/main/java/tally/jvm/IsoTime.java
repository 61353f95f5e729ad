package tally.jvm;

import java.time.DateTimeException;
import java.time.LocalDate;

/**
 * ISO-8601 with a zone, as the contract reads it: {@code YYYY-MM-DD}, {@code T} or a space,
 * {@code hh:mm}, optionally {@code :ss} and a fraction of 1-9 digits (truncated to
 * milliseconds), then {@code Z} or {@code ±hh:mm} (below 24 h). A time without a zone is
 * ambiguous and is refused.
 */
final class IsoTime {
  private IsoTime() {}

  /** Epoch milliseconds, or null when the text is not such a time (or names no real instant). */
  static Long epochMillis(String t) {
    int n = t.length();
    if (n < 17 || t.charAt(4) != '-' || t.charAt(7) != '-' || t.charAt(13) != ':'
        || (t.charAt(10) != 'T' && t.charAt(10) != ' ')) {
      return null;
    }
    int year = digits(t, 0, 4);
    int month = digits(t, 5, 2);
    int day = digits(t, 8, 2);
    int hour = digits(t, 11, 2);
    int minute = digits(t, 14, 2);
    int at = 16;
    int second = 0;
    int millis = 0;
    if (at < n && t.charAt(at) == ':') {
      second = digits(t, at + 1, 2);
      at += 3;
      if (at < n && t.charAt(at) == '.') {
        int end = at + 1;
        while (end < n && t.charAt(end) >= '0' && t.charAt(end) <= '9') {
          end++;
        }
        int fraction = end - at - 1;
        if (fraction < 1 || fraction > 9) {
          return null;
        }
        millis = digits(t, at + 1, Math.min(3, fraction));
        for (int i = fraction; i < 3; i++) {
          millis *= 10;
        }
        at = end;
      }
    }
    Integer offsetMinutes = zoneMinutes(t, at);
    if (offsetMinutes == null || year < 0 || month < 0 || day < 0 || hour < 0 || minute < 0
        || second < 0 || hour > 23 || minute > 59 || second > 59) {
      return null;
    }
    long epochDay;
    try {
      epochDay = LocalDate.of(year, month, day).toEpochDay(); // refuses 30 February, month 13
    } catch (DateTimeException e) {
      return null;
    }
    if (year < 1) {
      return null;
    }
    long seconds = epochDay * 86_400L + hour * 3_600L + minute * 60L + second
        - offsetMinutes * 60L;
    return seconds * 1_000L + millis;
  }

  /** The zone at {@code at} to the end: Z (0) or ±hh:mm (minutes east), else null. */
  private static Integer zoneMinutes(String t, int at) {
    int n = t.length();
    if (at == n - 1 && t.charAt(at) == 'Z') {
      return 0;
    }
    if (at != n - 6 || t.charAt(at + 3) != ':') {
      return null;
    }
    char sign = t.charAt(at);
    int hours = digits(t, at + 1, 2);
    int minutes = digits(t, at + 4, 2);
    if ((sign != '+' && sign != '-') || hours < 0 || minutes < 0 || hours > 23 || minutes > 59) {
      return null;
    }
    int offset = hours * 60 + minutes;
    return sign == '-' ? -offset : offset;
  }

  /** The non-negative integer of {@code count} ASCII digits at {@code from}, else -1. */
  private static int digits(String t, int from, int count) {
    if (from + count > t.length()) {
      return -1;
    }
    int value = 0;
    for (int i = from; i < from + count; i++) {
      char c = t.charAt(i);
      if (c < '0' || c > '9') {
        return -1;
      }
      value = value * 10 + (c - '0');
    }
    return value;
  }
}
