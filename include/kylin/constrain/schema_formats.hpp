// JSON-schema "format" values as regexes of schema_pattern.hpp's subset. Each accepts a subset of
// what the format's RFC allows (the forms a model should write: upper-case T and Z, no leap
// seconds, real calendar dates) and nothing it refuses; ajv-formats checks them in the tests.
#pragma once

#include <string>
#include <string_view>

namespace kylin::constrain::detail {

// The regex of a supported format, or "" when the format is not supported.
inline std::string format_regex(std::string_view format) {
  // RFC 3339 full-date: days per month; 02-29 only in leap years (divisible by 4, centuries by 400).
  const std::string year = "[0-9]{4}";
  const std::string leap = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[048]|[2468][048]|[13579][26])00)";
  const std::string date = "(" + year + "-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|" + year +
                           "-(0[469]|11)-(0[1-9]|[12][0-9]|30)|" + year + "-02-(0[1-9]|1[0-9]|2[0-8])|" + leap + "-02-29)";
  // RFC 3339 full-time: an offset is required (as ajv-formats' strict time); seconds 00-59.
  const std::string hour = "([01][0-9]|2[0-3])", minute = "[0-5][0-9]";
  const std::string time = hour + ":" + minute + ":" + minute + "(\\.[0-9]{1,9})?(Z|[+-]" + hour + ":" + minute + ")";
  // RFC 5322 dot-atom local part @ two or more RFC 1035 labels (no '-' at either end). Label
  // lengths are not counted (as ajv-formats): counting to 63 would make the DFA, and its product
  // with a maxLength beside it (zod's .email().max(254)), too large.
  const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
  const std::string label = "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?";
  // RFC 3986 absolute URI with an authority: scheme://[userinfo@]host[:port]path[?query][#fragment].
  const std::string pct = "%[0-9A-Fa-f]{2}";
  const std::string unreserved_sub = "[A-Za-z0-9._~!$&'()*+,;=-]";
  const std::string pchar = "(" + unreserved_sub + "|" + pct + "|[:@])";
  if (format == "date") return "^" + date + "$";
  if (format == "time") return "^" + time + "$";
  if (format == "date-time") return "^" + date + "T" + time + "$";
  if (format == "uuid") return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  if (format == "email") return "^" + atext + "+(\\." + atext + "+)*@(" + label + "\\.)+" + label + "$";
  if (format == "ipv4") return "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])$";
  if (format == "uri")
    return "^[A-Za-z][A-Za-z0-9+.-]*://((" + unreserved_sub + "|" + pct + "|:)*@)?(" + unreserved_sub + "|" + pct + ")+(:[0-9]{1,5})?(/" + pchar + "*)*(\\?(" + pchar +
           "|[/?])*)?(#(" + pchar + "|[/?])*)?$";
  return "";
}

}  // namespace kylin::constrain::detail
