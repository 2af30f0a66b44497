// The JSON-schema keywords Pydantic and zod emit (issue 40): each compiles to a grammar that
// accepts exactly the hand-written strings the keyword allows (within kylin's compact output
// form), checked against naive oracles where the domain is enumerable; refusals name the keyword
// and its JSON pointer; SchemaCost charges the automata before they are built.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kylin/constrain/json_schema.hpp"
#include "kylin/constrain/parser.hpp"

namespace schema_keywords_test {

using kylin::constrain::match_bytes;

kylin::constrain::Grammar schema(const std::string& text) { return kylin::constrain::json_schema_grammar(kylin::json::parse(text)); }
bool complete(const kylin::constrain::Grammar& g, std::string_view s) { return match_bytes(g, s).complete; }

std::string error_of(const std::string& text, kylin::constrain::GrammarLimits limits = {}) {
  try {
    kylin::constrain::json_schema_grammar(kylin::json::parse(text), limits);
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::request);
    return e.what();
  }
  return "";
}

// Every integer in [-400, 400] is accepted iff the oracle says so; leading zeros, "-0" and "+n" never.
template <class Oracle>
void check_integers(const std::string& text, Oracle allowed) {
  CAPTURE(text);
  const auto g = schema(text);
  for (long long v = -400; v <= 400; ++v) {
    CAPTURE(v);
    CHECK(complete(g, std::to_string(v)) == allowed(v));
  }
  for (const char* never : {"-0", "00", "007", "-01", "+1", "1.0", "1e2", ""}) CHECK_FALSE(complete(g, never));
}

TEST_CASE("minimum, maximum and the exclusive bounds on integers accept exactly the integers in range") {
  check_integers(R"({"type":"integer","minimum":-12,"maximum":7})", [](long long v) { return v >= -12 && v <= 7; });
  check_integers(R"({"type":"integer","exclusiveMinimum":-12,"exclusiveMaximum":7})", [](long long v) { return v > -12 && v < 7; });
  check_integers(R"({"type":"integer","minimum":0})", [](long long v) { return v >= 0; });
  check_integers(R"({"type":"integer","maximum":-1})", [](long long v) { return v <= -1; });
  check_integers(R"({"type":"integer","minimum":-250,"maximum":-99})", [](long long v) { return v >= -250 && v <= -99; });
  check_integers(R"({"type":"integer","minimum":99,"maximum":101})", [](long long v) { return v >= 99 && v <= 101; });
  check_integers(R"({"type":"integer","minimum":2.5,"exclusiveMaximum":10.5})", [](long long v) { return v >= 3 && v <= 10; });
  // both forms of a bound: the tighter one holds
  check_integers(R"({"type":"integer","minimum":5,"exclusiveMinimum":5,"maximum":9,"exclusiveMaximum":20})",
                 [](long long v) { return v > 5 && v <= 9; });
  check_integers(R"({"minimum":1,"maximum":3})", [](long long v) { return v >= 1 && v <= 3; });  // untyped: a bounded number
  const auto g = schema(R"({"type":"integer","minimum":1000000000000})");
  CHECK(complete(g, "1000000000000"));
  CHECK(complete(g, "999999999999999"));  // 15 digits: what the plain integer rule holds
  CHECK_FALSE(complete(g, "999999999999"));
  CHECK_FALSE(complete(g, "1000000000000000"));
}

TEST_CASE("multipleOf on integers accepts exactly the multiples, alone and inside a range") {
  check_integers(R"({"type":"integer","multipleOf":7})", [](long long v) { return v % 7 == 0; });
  check_integers(R"({"type":"integer","multipleOf":1})", [](long long) { return true; });
  check_integers(R"({"type":"integer","multipleOf":25,"minimum":-130,"exclusiveMaximum":300})",
                 [](long long v) { return v % 25 == 0 && v >= -130 && v < 300; });
  check_integers(R"({"type":"integer","multipleOf":12,"exclusiveMinimum":0,"maximum":100})",
                 [](long long v) { return v % 12 == 0 && v > 0 && v <= 100; });
  check_integers(R"({"type":"integer","multipleOf":999})", [](long long v) { return v % 999 == 0; });
  const auto big = schema(R"({"type":"integer","multipleOf":1000})");
  CHECK(complete(big, "999999999999000"));
  CHECK_FALSE(complete(big, "999999999999001"));
}

TEST_CASE("bounded numbers: the integers in range, or I.F strictly inside the bounds; never an exponent") {
  const auto unit = schema(R"({"type":"number","minimum":0,"maximum":1})");
  for (const char* ok : {"0", "1", "0.5", "0.001", "0.999999999999999"}) CHECK(complete(unit, ok));
  for (const char* bad : {"1.5", "-0.5", "2", "0.50", "1.0", "0.0", "-0", "1e0", "0.", ".5", "0.1234567890123456"}) {
    CAPTURE(bad);
    CHECK_FALSE(complete(unit, bad));
  }
  const auto positive = schema(R"({"type":"number","exclusiveMinimum":0})");
  for (const char* ok : {"0.1", "1", "12.25", "999999999999999"}) CHECK(complete(positive, ok));
  for (const char* bad : {"0", "-0.1", "-3"}) CHECK_FALSE(complete(positive, bad));
  const auto neg = schema(R"({"type":"number","minimum":-2.5,"exclusiveMaximum":0})");
  for (const char* ok : {"-2", "-1", "-1.5", "-0.25", "-1.9"}) CHECK(complete(neg, ok));
  for (const char* bad : {"0", "-2.5", "-2.1", "-3", "0.5", "-0"}) {  // -2.5 is allowed but (-3,-2) is not wholly inside
    CAPTURE(bad);
    CHECK_FALSE(complete(neg, bad));
  }
  CHECK(error_of(R"({"type":"number","minimum":0.2,"maximum":0.8})").find("no number") != std::string::npos);
}

TEST_CASE("numeric keywords that cannot be compiled are refused naming the keyword and its path") {
  CHECK(error_of(R"({"type":"integer","minimum":5,"maximum":4})").find("no integer") != std::string::npos);
  CHECK(error_of(R"({"type":"integer","minimum":1e20})").find("no integer") != std::string::npos);
  CHECK(error_of(R"({"type":"integer","multipleOf":0.5})").find("#/multipleOf") != std::string::npos);
  CHECK(error_of(R"({"type":"integer","multipleOf":0})").find("#/multipleOf") != std::string::npos);
  CHECK(error_of(R"({"type":"number","multipleOf":0.01})").find("#/multipleOf") != std::string::npos);
  // a multipleOf that no schema may have says so, whatever the type (issue 75: "does not apply to type number")
  for (const char* bad : {R"({"type":"number","multipleOf":0})", R"({"type":"integer","multipleOf":-3})", R"({"type":"string","multipleOf":"2"})"}) {
    CAPTURE(bad);
    CHECK(error_of(bad).find("multipleOf must be a number greater than 0") != std::string::npos);
  }
  CHECK(error_of(R"({"type":"number","multipleOf":0.01})").find("integer schemas only") != std::string::npos);
  CHECK(error_of(R"({"properties":{"n":{"type":"integer","multipleOf":1001}}})").find("#/properties/n/multipleOf") != std::string::npos);
  CHECK(error_of(R"({"type":"integer","exclusiveMinimum":true})").find("#/exclusiveMinimum") != std::string::npos);
  CHECK(error_of(R"({"type":"string","minimum":1})").find("#/minimum") != std::string::npos);
}

TEST_CASE("pattern: the regex subset, anchored or searched, over the JSON-encoded string") {
  const auto id = schema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3,4}$"})");
  for (const char* ok : {R"("AB-123")", R"("ZZ-0000")"}) CHECK(complete(id, ok));
  for (const char* bad : {R"("Ab-123")", R"("AB-12")", R"("AB-12345")", R"("xAB-123")", R"("AB-123 ")", "AB-123"}) CHECK_FALSE(complete(id, bad));
  const auto search = schema(R"({"type":"string","pattern":"ab+c"})");  // unanchored: anywhere in the string
  for (const char* ok : {R"("abc")", R"("xxabbbcyy")", R"("é\nabc\"")"}) CHECK(complete(search, ok));
  for (const char* bad : {R"("ac")", R"("a b c")", R"("")"}) CHECK_FALSE(complete(search, bad));
  const auto alt = schema(R"({"type":"string","pattern":"^(cat|dog)s?$|^(?:bird)$"})");
  for (const char* ok : {R"("cat")", R"("dogs")", R"("bird")"}) CHECK(complete(alt, ok));
  for (const char* bad : {R"("birds")", R"("cats?")", R"("catdog")"}) CHECK_FALSE(complete(alt, bad));
  // quote, backslash and controls match as characters and are written escaped; . is not a newline
  const auto chars = schema(R"({"type":"string","pattern":"^[\"\\\\]\\t.\\.[^a-c]$"})");
  CHECK(complete(chars, R"("\"\tx.d")"));
  CHECK(complete(chars, R"("\\\té.\n")"));
  CHECK(complete(chars, R"("\"\t😀.\u0001")"));
  CHECK_FALSE(complete(chars, R"("\"\t\n.d")"));
  CHECK_FALSE(complete(chars, R"("\"\tx.b")"));
  CHECK_FALSE(complete(chars, R"("\"\txxd")"));
  const auto words = schema(R"({"type":"string","pattern":"^\\w+\\s\\W\\D\\S$"})");
  CHECK(complete(words, R"("a_9 -x!")"));
  CHECK_FALSE(complete(words, R"("a_9 -1!")"));
  const auto unicode = schema(R"({"type":"string","pattern":"^[α-ω]+\\u00e9$"})");
  CHECK(complete(unicode, "\"αβωé\""));
  CHECK_FALSE(complete(unicode, "\"aé\""));
}

TEST_CASE("pattern beside minLength and maxLength: both hold, in code points") {
  const auto g = schema(R"({"type":"string","pattern":"^[a-zé\"\\n]+$","minLength":2,"maxLength":3})");
  for (const char* ok : {R"("ab")", R"("abc")", "\"éé\"", R"("\"\n")", "\"\\n\\\"é\""}) CHECK(complete(g, ok));
  for (const char* bad : {R"("a")", R"("abcd")", "\"éééé\"", R"("\"\n\"\n")", R"("\"")"}) CHECK_FALSE(complete(g, bad));
  const auto wide = schema(R"({"type":"string","pattern":"^[a-z]*$","minLength":3000,"maxLength":4000})");  // ~4000 states
  CHECK(complete(wide, "\"" + std::string(4000, 'q') + "\""));
  CHECK_FALSE(complete(wide, "\"" + std::string(4001, 'q') + "\""));
  CHECK_FALSE(complete(wide, "\"" + std::string(2999, 'q') + "\""));
  const auto any = schema(R"({"type":"string","pattern":"x","maxLength":3})");  // escapes and UTF-8 count as one
  for (const char* ok : {R"("x")", "\"😀x\\u0001\"", R"("\t\"x")"}) CHECK(complete(any, ok));
  for (const char* bad : {R"("abcx")", "\"😀😀😀x\""}) CHECK_FALSE(complete(any, bad));
  // Pydantic's HttpUrl: a uri of 1-2083 characters; the product would pass the state cap, so a
  // shorter maximum is kept (a subset), never a longer one
  const auto url = schema(R"({"type":"string","format":"uri","minLength":1,"maxLength":2083})");
  CHECK(complete(url, R"("https://example.com/a?b=c")"));
  CHECK_FALSE(complete(url, "\"https://x.org/" + std::string(2070, 'a') + "\""));  // 2084 characters
  const std::string e = error_of(R"({"type":"string","format":"uri","minLength":2000})");  // no shorter strings to fall back to
  CHECK(e.find("#/minLength") != std::string::npos);
  CHECK(e.find("automaton states") != std::string::npos);
}

TEST_CASE("pattern constructs outside the subset are refused by name, with the pattern's path") {
  for (const auto& [regex_, name] : std::vector<std::pair<std::string, std::string>>{
           {"a(?=b)", "lookaround"}, {"a(?!b)", "lookaround"}, {"(?<=a)b", "lookaround"}, {"(a)\\\\1", "backreference"},
           {"\\\\bword", "word boundary"}, {"\\\\p{L}", "Unicode property"}, {"a^b", "'^' not at the start"},
           {"a$b", "'$' not at the end"}, {"*a", "quantifier without"}, {"(ab", "unclosed '('"}, {"[ab", "unclosed '['"},
           {"a{2,1}", "m < n"}, {"a{5000}", "limit"}, {"\\\\q", "escape \\q"}}) {
    const std::string& regex = regex_;  // a structured binding cannot be captured (clang 14)
    CAPTURE(regex);
    const std::string e = error_of(R"({"properties":{"s":{"type":"string","pattern":")" + regex + R"("}}})");
    CHECK(e.find("#/properties/s/pattern") != std::string::npos);
    CHECK(e.find(name) != std::string::npos);
  }
  // a pattern whose DFA would explode is refused naming the pattern and the state cap
  const std::string e = error_of(R"({"type":"string","pattern":"(a|b)*a(a|b){16}"})", {.max_pattern_states = 4096});
  CHECK(e.find("#/pattern") != std::string::npos);
  CHECK(e.find("4096 automaton states") != std::string::npos);
  CHECK(error_of(R"({"type":"string","pattern":"^a$","minLength":2})").find("matches no string") != std::string::npos);
}

TEST_CASE("format date, time and date-time: RFC 3339 with real calendar days, required offsets, no leap seconds") {
  const auto date = schema(R"({"type":"string","format":"date"})");
  for (const char* ok : {"2024-02-29", "2000-02-29", "1600-02-29", "0000-02-29", "2023-02-28", "2023-12-31", "2023-04-30", "0001-01-01"}) {
    CAPTURE(ok);
    CHECK(complete(date, std::string("\"") + ok + "\""));
  }
  for (const char* bad : {"2023-02-29", "1900-02-29", "2100-02-29", "2023-04-31", "2023-13-01", "2023-00-10", "2023-01-00",
                          "2023-01-32", "23-01-01", "2023-1-01", "2023/01/01", "2023-01-01T00:00:00Z"}) {
    CAPTURE(bad);
    CHECK_FALSE(complete(date, std::string("\"") + bad + "\""));
  }
  const auto time = schema(R"({"type":"string","format":"time"})");
  for (const char* ok : {"00:00:00Z", "23:59:59Z", "12:30:00.5+05:30", "08:00:00.123456789-23:59"}) CHECK(complete(time, std::string("\"") + ok + "\""));
  for (const char* bad : {"24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00:00+24:00", "12:00:00+05", "1:00:00Z",
                          "12:00:00.Z", "12:00:00.1234567890Z", "12:00:00z"}) {
    CAPTURE(bad);
    CHECK_FALSE(complete(time, std::string("\"") + bad + "\""));
  }
  const auto dt = schema(R"({"type":"string","format":"date-time"})");
  CHECK(complete(dt, R"("2024-02-29T23:59:59.999Z")"));
  CHECK(complete(dt, R"("1999-12-31T00:00:00-08:00")"));
  for (const char* bad : {R"("2024-02-29 23:59:59Z")", R"("2023-02-29T10:00:00Z")", R"("2024-02-29T10:00:00")", R"("2024-02-29")"})
    CHECK_FALSE(complete(dt, bad));
}

TEST_CASE("format uuid, ipv4, email and uri accept their RFC forms and refuse near misses") {
  const auto uuid = schema(R"({"type":"string","format":"uuid"})");
  for (const char* ok : {"123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000", "00000000-0000-0000-0000-000000000000"})
    CHECK(complete(uuid, std::string("\"") + ok + "\""));
  for (const char* bad : {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400", "123g4567-e89b-12d3-a456-426614174000",
                          "{123e4567-e89b-12d3-a456-426614174000}"})
    CHECK_FALSE(complete(uuid, std::string("\"") + bad + "\""));
  const auto ip = schema(R"({"type":"string","format":"ipv4"})");
  for (const char* ok : {"0.0.0.0", "255.255.255.255", "192.168.1.10", "10.0.99.249"}) CHECK(complete(ip, std::string("\"") + ok + "\""));
  for (const char* bad : {"256.1.1.1", "1.1.1", "01.1.1.1", "1.1.1.00", "1.1.1.1.1", "1..1.1", "300.0.0.0", "1.1.1.260"}) {
    CAPTURE(bad);
    CHECK_FALSE(complete(ip, std::string("\"") + bad + "\""));
  }
  const auto email = schema(R"({"type":"string","format":"email"})");
  for (const char* ok : {"a@b.co", "first.last+tag@mail.example.org", "x_y-z@a-b.c9"}) CHECK(complete(email, std::string("\"") + ok + "\""));
  for (const char* bad : {"a@b", "@b.co", "a@.co", "a@b-.co", "a@-b.co", "a..b@c.de", ".a@c.de", "a b@c.de", "a@b.co."}) {
    CAPTURE(bad);
    CHECK_FALSE(complete(email, std::string("\"") + bad + "\""));
  }
  // beside maxLength (zod's .email().max(254)): both hold
  const auto short_email = schema(R"({"type":"string","format":"email","maxLength":254})");
  CHECK(complete(short_email, "\"a@" + std::string(248, 'x') + ".com\""));  // 254 characters
  CHECK_FALSE(complete(short_email, "\"a@" + std::string(249, 'x') + ".com\""));
  const auto uri = schema(R"({"type":"string","format":"uri"})");
  for (const char* ok : {"https://example.com", "http://a.b:8080/p/q?x=1&y=%2F#frag", "ftp://user@host/file.txt"})
    CHECK(complete(uri, std::string("\"") + ok + "\""));
  for (const char* bad : {"example.com", "/relative/path", "https://", "1http://x", "http://a b", "http://x/%zz"}) {
    CAPTURE(bad);
    CHECK_FALSE(complete(uri, std::string("\"") + bad + "\""));
  }
  CHECK(error_of(R"({"properties":{"h":{"type":"string","format":"hostname"}}})").find("#/properties/h/format") != std::string::npos);
}

TEST_CASE("minProperties and maxProperties count the written properties, required ones included") {
  const auto g = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
                           "required":["c"],"minProperties":2,"maxProperties":2})");
  for (const char* ok : {R"({"a":1,"c":3})", R"({"b":2,"c":3})"}) CHECK(complete(g, ok));
  for (const char* bad : {R"({"c":3})", R"({"a":1,"b":2,"c":3})", R"({"a":1,"b":2})", R"({})"}) CHECK_FALSE(complete(g, bad));
  const auto open = schema(R"({"type":"object","minProperties":1,"maxProperties":2})");  // any members, counted
  for (const char* ok : {R"({"x":1})", R"({"x":1,"y":[]})"}) CHECK(complete(open, ok));
  for (const char* bad : {R"({})", R"({"x":1,"y":2,"z":3})"}) CHECK_FALSE(complete(open, bad));
  const auto at_least = schema(R"({"properties":{"a":{},"b":{},"c":{}},"minProperties":2})");
  CHECK(complete(at_least, R"({"a":1,"b":2,"c":3})"));
  CHECK_FALSE(complete(at_least, R"({"b":2})"));
  CHECK(error_of(R"({"properties":{"a":{}},"minProperties":2})").find("#/minProperties") != std::string::npos);
  CHECK(error_of(R"({"properties":{"a":{},"b":{}},"required":["a","b"],"maxProperties":1})").find("#/maxProperties") != std::string::npos);
  CHECK(error_of(R"({"type":"object","minProperties":3,"maxProperties":2})").find("#/maxProperties") != std::string::npos);
}

TEST_CASE("prefixItems: item i matches schema i, then items (or nothing after items: false), within min/maxItems") {
  const auto tuple = schema(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false,"minItems":2})");
  CHECK(complete(tuple, R"([1,"a"])"));
  for (const char* bad : {R"([1])", R"(["a",1])", R"([1,"a",2])", R"([])"}) CHECK_FALSE(complete(tuple, bad));
  const auto rest = schema(R"({"prefixItems":[{"const":"x"}],"items":{"type":"boolean"},"maxItems":3})");
  for (const char* ok : {R"([])", R"(["x"])", R"(["x",true,false])"}) CHECK(complete(rest, ok));
  for (const char* bad : {R"([true])", R"(["x",true,false,true])", R"(["x","x"])"}) CHECK_FALSE(complete(rest, bad));
  const auto open = schema(R"({"prefixItems":[{"type":"null"}],"minItems":3})");  // no items: anything after
  CHECK(complete(open, R"([null,1,"s"])"));
  CHECK_FALSE(complete(open, R"([null,1])"));
  // draft 7's form (zod-to-json-schema): an items array, additionalItems for the rest
  const auto draft7 = schema(R"({"type":"array","items":[{"type":"integer"},{"type":"string"}],"additionalItems":false,"minItems":2})");
  CHECK(complete(draft7, R"([1,"a"])"));
  for (const char* bad : {R"([1])", R"(["a",1])", R"([1,"a",2])"}) CHECK_FALSE(complete(draft7, bad));
  const auto draft7_rest = schema(R"({"items":[{"const":"x"}],"additionalItems":{"type":"null"}})");
  CHECK(complete(draft7_rest, R"(["x",null,null])"));
  CHECK_FALSE(complete(draft7_rest, R"(["x",1])"));
  CHECK(error_of(R"({"items":[{}],"prefixItems":[{}]})").find("#/prefixItems") != std::string::npos);
  CHECK(error_of(R"({"items":{},"additionalItems":false})").find("#/additionalItems") != std::string::npos);
  CHECK(error_of(R"({"prefixItems":[{}],"items":false,"minItems":2})").find("#/minItems") != std::string::npos);
  CHECK(error_of(R"({"prefixItems":[]})").find("#/prefixItems") != std::string::npos);
}

TEST_CASE("uniqueItems: enforced over small finite item sets, refused by name where it cannot be") {
  const auto g = schema(R"({"type":"array","items":{"type":"string","enum":["r","g","b"]},"uniqueItems":true,"minItems":1})");
  for (const char* ok : {R"(["r"])", R"(["b","r"])", R"(["g","b","r"])"}) CHECK(complete(g, ok));
  for (const char* bad : {R"([])", R"(["r","r"])", R"(["g","b","g"])", R"(["x"])"}) CHECK_FALSE(complete(g, bad));
  const auto flags = schema(R"({"items":{"type":"boolean"},"uniqueItems":true})");
  for (const char* ok : {R"([])", R"([true,false])"}) CHECK(complete(flags, ok));
  CHECK_FALSE(complete(flags, R"([true,true])"));
  CHECK(complete(schema(R"({"items":{"type":"integer"},"uniqueItems":false})"), "[1,1]"));  // false: no constraint
  CHECK(complete(schema(R"({"items":{"type":"integer"},"uniqueItems":true,"maxItems":1})"), "[1]"));  // at most one item: trivially unique
  for (const char* bad : {R"({"items":{"type":"integer"},"uniqueItems":true})", R"({"items":{"enum":[1,2,3,4,5,6,7,8,9]},"uniqueItems":true})",
                          R"({"items":{"enum":[1.5,2]},"uniqueItems":true})", R"({"uniqueItems":true})"}) {
    CAPTURE(bad);
    CHECK(error_of(bad).find("#/uniqueItems") != std::string::npos);
  }
}

TEST_CASE("SchemaCost charges pattern, format, multipleOf and min/maxProperties before compiling, and refuses by name") {
  auto cost_of = [](const std::string& text) {
    kylin::constrain::SchemaCost c;
    kylin::constrain::add_schema_cost(kylin::json::parse(text), c);
    return c;
  };
  CHECK(cost_of(R"({"type":"integer","multipleOf":1000})").automaton_states == 15000);
  CHECK(cost_of(R"({"type":"string","pattern":"^a{100}$"})").automaton_states == 4 * (8 + 100));
  CHECK(cost_of(R"({"properties":{"a":{},"b":{},"c":{}},"maxProperties":2})").repeats == 6);
  // every format, alone or with lengths, and multipleOf compile within what SchemaCost charges
  for (const char* f : {"date-time", "date", "time", "uuid", "email", "ipv4", "uri"})
    for (const char* lengths : {"", R"(,"maxLength":40)", R"(,"minLength":1,"maxLength":2083)", R"(,"minLength":7)"}) {
      const std::string text = std::string(R"({"type":"string","format":")") + f + "\"" + lengths + "}";
      CAPTURE(text);
      const auto c = cost_of(text);
      const auto g = schema(text);
      CHECK(g.names.size() <= c.rules() + 4);  // + the quoted-string rule and the plain pieces
      CHECK(g.elements.size() <= c.elements());
    }
  for (const char* text : {R"({"type":"integer","multipleOf":999})", R"({"type":"integer","multipleOf":1000,"minimum":-5000000,"maximum":123456789})"}) {
    CAPTURE(text);
    const auto g = schema(text);
    CHECK(g.names.size() <= cost_of(text).rules());
    CHECK(g.elements.size() <= cost_of(text).elements());
  }
  std::string many = R"({"anyOf":[)";
  for (int i = 0; i < 20; ++i) many += std::string(i ? "," : "") + R"({"type":"integer","multipleOf":1000})";
  const std::string e = error_of(many + "]}");
  CHECK(e.find("multipleOf") != std::string::npos);
  CHECK(e.find("at most") != std::string::npos);
  std::string dates = R"({"type":"object","properties":{)";
  for (int i = 0; i < 200; ++i) dates += std::string(i ? "," : "") + "\"d" + std::to_string(i) + R"(":{"type":"string","format":"date-time"})";
  CHECK(error_of(dates + "}}").find("format") != std::string::npos);
  std::string patterns = R"({"anyOf":[)";  // each compiles alone (~4000 states); 30 of them pass the rule limit
  for (int i = 0; i < 30; ++i) patterns += std::string(i ? "," : "") + R"({"type":"string","pattern":"^[a-z]{4000}$"})";
  CHECK(cost_of(patterns + "]}").rules() > kylin::constrain::GrammarLimits{}.max_rules);
  const std::string p = error_of(patterns + "]}");
  CHECK(p.find("too complex") != std::string::npos);  // SchemaCost's refusal, before any automaton is built
  CHECK(p.find("pattern") != std::string::npos);
  CHECK(error_of(R"({"type":"string","pattern":"^[a-z]{4000}$"})").empty());
  // a DFA may grow exponentially in its regex's length: the number of patterns is bounded, as each may cost the cap
  auto many_patterns = [](int n) {
    std::string text = R"({"anyOf":[)";
    for (int i = 0; i < n; ++i) text += std::string(i ? "," : "") + R"({"type":"string","pattern":"^x)" + std::to_string(i) + R"($"})";
    return text + "]}";
  };
  CHECK(error_of(many_patterns(48)).empty());  // 48 * 4096 states <= 200,000 rules
  CHECK(error_of(many_patterns(49)).find("too many patterns: 49") != std::string::npos);
}

}  // namespace schema_keywords_test
