// kylin::json: parse/dump round trips, key order, escapes and the two non-ASCII modes.
#include "kylin/core/json.hpp"

#include <doctest/doctest.h>

#include <limits>

namespace json = kylin::json;

TEST_CASE("dump(parse(text)) reproduces compact JSON text exactly, keys in their original order") {
  for (const char* text : {
           R"({"z":1,"a":[true,false,null],"m":{"y":"s","b":-3}})",
           R"([1,2.5,-0.25,1e-06,"x",{}])",
           R"({"nested":{"deep":[[[]]]},"empty":""})",
           R"("just a string")",
           R"(12345678901234)",
       }) {
    CAPTURE(text);
    CHECK(json::dump(json::parse(text)) == text);
  }
}

TEST_CASE("parse then dump then parse yields an equal value (round trip)") {
  const auto v = json::parse(R"({"a": [1, 2.0, "three", {"four": null}], "b": true, "c": "\u00e9\n"})");
  CHECK(json::parse(json::dump(v)) == v);
  json::DumpOptions pretty;
  pretty.indent = 2;
  CHECK(json::parse(json::dump(v, pretty)) == v);
}

TEST_CASE("objects keep insertion order, and set() replaces a key in place") {
  json::Value v;
  v.set("b", 1);
  v.set("a", 2);
  v.set("c", 3);
  v.set("a", 20);
  CHECK(json::dump(v) == R"({"b":1,"a":20,"c":3})");
  CHECK(v.find("a")->as_int() == 20);
  CHECK(v.find("zz") == nullptr);
}

TEST_CASE("dump escapes quotes, backslashes and control characters as JSON requires") {
  CHECK(json::dump(json::Value("q\"b\\n\nr\rt\tb\bf\f")) == R"("q\"b\\n\nr\rt\tb\bf\f")");
  CHECK(json::dump(json::Value(std::string("\x01\x1f", 2))) == R"("\u0001\u001f")");
  CHECK(json::dump(json::Value("/")) == R"("/")");  // no needless escaping of '/'
}

TEST_CASE("non-ASCII text is kept as UTF-8 by default and escaped as \\uXXXX with ensure_ascii") {
  const json::Value v(std::string("caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"));  // café 中 😀
  CHECK(json::dump(v) == "\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\"");
  json::DumpOptions ascii;
  ascii.ensure_ascii = true;
  CHECK(json::dump(v, ascii) == R"("caf\u00e9 \u4e2d \ud83d\ude00")");
  // A parsed \u escape becomes UTF-8, and ensure_ascii gives the same escape back.
  CHECK(json::parse(R"("\u00e9\ud83d\ude00")").as_string() == "\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(json::dump(json::parse(R"("\u00e9\ud83d\ude00")"), ascii) == R"("\u00e9\ud83d\ude00")");
}

TEST_CASE("Python json.dumps separators are reproducible through DumpOptions") {
  json::DumpOptions py;
  py.item_separator = ", ";
  py.key_separator = ": ";
  CHECK(json::dump(json::parse(R"({"a":[1,2],"b":"x"})"), py) == R"({"a": [1, 2], "b": "x"})");
}

TEST_CASE("numbers: integers stay integers, floats keep a decimal point, non-finite becomes null") {
  CHECK(json::parse("7").is_int());
  CHECK(json::parse("7.0").type() == json::Value::Type::number);
  CHECK(json::dump(json::Value(2.0)) == "2.0");
  CHECK(json::dump(json::Value(0.1)) == "0.1");
  CHECK(json::dump(json::Value(std::numeric_limits<double>::infinity())) == "null");
  CHECK(json::dump(json::Value(std::int64_t{-9007199254740993})) == "-9007199254740993");
  // Above INT64_MAX a uint64 is kept as a double rather than wrapping negative.
  CHECK(json::parse("18446744073709551615").as_double() == doctest::Approx(1.8446744073709552e19));
  CHECK(json::Value(1) == json::Value(1.0));
}

TEST_CASE("copies of a Value never alias: mutating one leaves the other unchanged") {
  json::Value a = json::parse(R"({"k":[1]})");
  json::Value b = a;
  b.as_object()[0].second.push_back(2);
  CHECK(json::dump(a) == R"({"k":[1]})");
  CHECK(json::dump(b) == R"({"k":[1,2]})");
}

TEST_CASE("invalid JSON is a kylin::Error naming what was parsed") {
  try {
    json::parse("{\"a\":", "request body", kylin::ErrorCategory::request);
    FAIL("no error");
  } catch (const kylin::Error& e) {
    CHECK(std::string(e.what()).starts_with("[kylin.request] request body: invalid JSON"));
    CHECK(e.category() == kylin::ErrorCategory::request);
  }
  CHECK_THROWS_AS(json::parse(""), kylin::Error);
  CHECK_THROWS_AS(json::parse("[1,]"), kylin::Error);
  CHECK_THROWS_AS(json::parse("{} extra"), kylin::Error);
}

TEST_CASE("a key given twice: the last value wins at the first key's position, as Python's json and JSON.parse do (issue 39)") {
  const json::Value v = json::parse(R"({"a":1,"b":2,"a":3})");
  CHECK(v.size() == 2);
  CHECK(v.find("a")->as_int() == 3);
  CHECK(json::dump(v) == R"({"a":3,"b":2})");
  std::string many = "{";  // many keys, each twice: last wins without quadratic work
  for (int i = 0; i < 20000; ++i) many += "\"k" + std::to_string(i % 10000) + "\":" + std::to_string(i) + ",";
  many.back() = '}';
  const json::Value m = json::parse(many);
  CHECK(m.size() == 10000);
  CHECK(m.find("k0")->as_int() == 10000);
  CHECK(m.find("k9999")->as_int() == 19999);
}

TEST_CASE("integers beyond 64 bits are valid JSON: they parse as the nearest double; a number beyond a double is an error naming it (issue 39)") {
  const json::Value v = json::parse(R"({"seed": 18446744073709551621, "n": -123456789012345678901234567890, "s": "18446744073709551621"})");
  CHECK_FALSE(v.find("seed")->is_int());
  CHECK(v.find("seed")->as_double() == 18446744073709551621.0);
  CHECK(v.find("n")->as_double() == -123456789012345678901234567890.0);
  CHECK(v.find("s")->as_string() == "18446744073709551621");  // inside a string: untouched
  try {
    json::parse(R"({"t": 1e400})", "request body", kylin::ErrorCategory::request);
    FAIL("1e400 was accepted");
  } catch (const kylin::Error& e) {
    CHECK(std::string(e.what()).find("1e400") != std::string::npos);
  }
  CHECK_THROWS_AS(json::parse("[01]"), kylin::Error);  // still invalid JSON
  CHECK_THROWS_AS(json::parse("[1.]"), kylin::Error);
}
