// The profiler's JSON writer (src/profile/json.hpp): what it writes is read back with
// nlohmann_json, an independent strict parser (it rejects invalid UTF-8 and unescaped
// control characters), so each test checks validity as well as the value.
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "profile/json.hpp"

namespace {

using eventide::profile::Json;
using nlohmann::json;

std::string literal(std::string_view s) {
  std::string out;
  eventide::profile::append_json_string(out, s);
  return out;
}

// The string a parser reads from the writer's literal for `s`.
std::string round_trip(std::string_view s) { return json::parse(literal(s)).get<std::string>(); }

TEST(JsonTest, ObjectsKeepTheOrderTheirKeysWereFirstSet) {
  Json j = Json::object({{"zeta", 1}, {"alpha", 2}});
  j["mid"] = "x";
  j["zeta"] = 3;  // set again: replaced where it was
  EXPECT_EQ(j.dump(), R"({"zeta":3,"alpha":2,"mid":"x"})");
}

TEST(JsonTest, NullBecomesAnObjectWhenAKeyIsSet) {
  Json j;
  EXPECT_EQ(j.dump(), "null");
  j["a"]["b"] = true;
  EXPECT_EQ(j.dump(), R"({"a":{"b":true}})");
}

TEST(JsonTest, ValuesOfEachKindAreWrittenAsJson) {
  const std::vector<std::uint64_t> ids{1, 2, 3};
  Json j = Json::object({{"null", nullptr}, {"t", true}, {"f", false}, {"i", -7}, {"ids", ids},
                         {"empty", Json::array()}, {"nested", Json::array({1, "two", 3.5})}});
  EXPECT_EQ(j.dump(),
            R"({"null":null,"t":true,"f":false,"i":-7,"ids":[1,2,3],"empty":[],"nested":[1,"two",3.5]})");
}

TEST(JsonTest, IntegersKeepTheirFullRange) {
  const auto min = std::numeric_limits<std::int64_t>::min();
  const auto max = std::numeric_limits<std::uint64_t>::max();
  Json j = Json::array({min, max});
  EXPECT_EQ(j.dump(), "[-9223372036854775808,18446744073709551615]");
  const json back = json::parse(j.dump());
  EXPECT_EQ(back[0].get<std::int64_t>(), min);
  EXPECT_EQ(back[1].get<std::uint64_t>(), max);
}

TEST(JsonTest, NumbersReadBackExactlyAndWholeOnesStayFloats) {
  for (double d : {0.0, 1.0, -2.0, 0.1, 1.0 / 3.0, 1e-300, 6.02214076e23, 123456.789,
                   std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min()}) {
    const std::string text = Json(d).dump();
    const json back = json::parse(text);
    EXPECT_TRUE(back.is_number_float()) << text;
    EXPECT_EQ(back.get<double>(), d) << text;
  }
  EXPECT_EQ(Json(2.0).dump(), "2.0");
}

TEST(JsonTest, NumbersThatAreNotFiniteAreWrittenAsNull) {
  Json j = Json::array({std::nan(""), std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity()});
  EXPECT_EQ(j.dump(), "[null,null,null]");
}

TEST(JsonTest, QuoteBackslashAndControlCharactersAreEscaped) {
  EXPECT_EQ(literal("a\"b\\c/d"), R"("a\"b\\c/d")");
  EXPECT_EQ(literal("\b\f\n\r\t"), R"("\b\f\n\r\t")");
  EXPECT_EQ(literal(std::string("\0\x01\x1f", 3)), R"("\u0000\u0001\u001f")");
  EXPECT_EQ(literal("\x7f"), "\"\x7f\"");  // DEL needs no escape
}

TEST(JsonTest, EveryAsciiCharacterReadsBackAsItself) {
  std::string all;
  for (int c = 0; c < 0x80; ++c) all += static_cast<char>(c);
  EXPECT_EQ(round_trip(all), all);
}

TEST(JsonTest, ValidUtf8IsWrittenUnchanged) {
  // 2, 3 and 4 bytes, the edges of each length and of the surrogates around them.
  for (std::string s : {"µs", "スレッド", "\xF0\x9F\x98\x80", "\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80",
                        "\xED\x9F\xBF", "\xEE\x80\x80", "\xEF\xBF\xBF", "\xF0\x90\x80\x80",
                        "\xF4\x8F\xBF\xBF"}) {
    EXPECT_EQ(literal(s), "\"" + s + "\"");
    EXPECT_EQ(round_trip(s), s);
  }
}

TEST(JsonTest, InvalidUtf8BytesBecomeReplacementCharacters) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  struct Case {
    std::string in, out;
  };
  for (const Case& c : std::vector<Case>{
           {"\x80", r},                              // a lone continuation byte
           {"a\xC3", "a" + r},                       // a sequence cut short at the end
           {"\xC3(", r + "("},                       // ... or by an ASCII byte
           {"\xC0\xAF", r + r},                      // an overlong '/'
           {"\xE0\x80\xAF", r + r + r},              // an overlong 3-byte form
           {"\xF0\x80\x80\xAF", r + r + r + r},      // an overlong 4-byte form
           {"\xED\xA0\x80", r + r + r},              // a surrogate, U+D800
           {"\xF4\x90\x80\x80", r + r + r + r},      // above U+10FFFF
           {"\xF5\x80\x80\x80", r + r + r + r},      // a lead byte that never occurs
           {"\xFF", r},
       }) {
    EXPECT_EQ(literal(c.in), "\"" + c.out + "\"") << ::testing::PrintToString(c.in);
    EXPECT_EQ(round_trip(c.in), c.out);
  }
}

TEST(JsonTest, AnyBytesMakeAStringAStrictParserAccepts) {
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> byte(0, 255), length(0, 24);
  for (int i = 0; i < 20000; ++i) {
    std::string s(static_cast<std::size_t>(length(rng)), '\0');
    for (char& c : s) c = static_cast<char>(byte(rng));
    const std::string text = Json::object({{s, s}}).dump();
    json back;
    ASSERT_NO_THROW(back = json::parse(text)) << ::testing::PrintToString(s);
    ASSERT_EQ(back.size(), 1u);
    // Valid input reads back unchanged; invalid input only where it was invalid.
    EXPECT_EQ(back.begin().key(), back.begin().value().get<std::string>());
  }
}

TEST(JsonTest, KeysAreEscapedLikeValues) {
  Json j = Json::object({{"a\"b\n", 1}});
  EXPECT_EQ(j.dump(), R"({"a\"b\n":1})");
  EXPECT_EQ(json::parse(j.dump()).begin().key(), "a\"b\n");
}

}  // namespace

// Inside an HTML <script> element (the timeline page's data): '<', '>' and '&' are escaped, so
// a name cannot close the element or open a comment; everything else is written as in JSON.
TEST(JsonTest, AStringForAScriptElementCannotCloseIt) {
  const std::string name = "</script><!-- a & b > c \"q\"\n";
  std::string in_script;
  eventide::profile::append_json_string(in_script, name, eventide::profile::JsonText::in_html_script);
  EXPECT_EQ(in_script.find('<'), std::string::npos) << in_script;
  EXPECT_EQ(in_script.find('>'), std::string::npos) << in_script;
  EXPECT_EQ(in_script.find('&'), std::string::npos) << in_script;
  EXPECT_EQ(json::parse(in_script).get<std::string>(), name);
  EXPECT_EQ(json::parse(literal(name)).get<std::string>(), name);
}
