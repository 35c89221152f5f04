#include "profile/json.hpp"

#include <cassert>
#include <charconv>
#include <cmath>

namespace eventide::profile {

namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 if it is not one.
std::size_t utf8_sequence_length(std::string_view s) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong below U+0800
    if (b0 == 0xED) hi = 0x9F;  // surrogates U+D800..U+DFFF
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong below U+10000
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;  // a continuation byte, or a lead byte that is never valid (C0, C1, F5..FF)
  }
  if (s.size() < n) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return n;
}

void append_number(std::string& out, double d) {
  if (!std::isfinite(d)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);  // shortest round-trip form
  assert(ec == std::errc());
  const std::string_view text(buf, static_cast<std::size_t>(end - buf));
  out += text;
  // Keep a whole number a number with a fraction ("2.0", not "2"), as readers that tell
  // integers from floats (Python's json) then read a float, as the value was.
  if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
}

template <typename T>
void append_integer(std::string& out, T i) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, i);
  assert(ec == std::errc());
  out.append(buf, end);
}

}  // namespace

void append_json_string(std::string& out, std::string_view text, JsonText where) {
  const bool in_script = where == JsonText::in_html_script;
  out += '"';
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_sequence_length(text.substr(i));
      if (n == 0) {
        out += kReplacement;  // one replacement per invalid byte
        ++i;
      } else {
        out.append(text, i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || (in_script && (c == '<' || c == '>' || c == '&'))) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xF];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

Json Json::object(std::initializer_list<Member> members) {
  Json j;
  j.value_ = Object(members);
  return j;
}

Json Json::array(std::initializer_list<Json> items) {
  Json j;
  j.value_ = Array(items);
  return j;
}

Json& Json::operator[](std::string_view key) {
  if (std::holds_alternative<std::nullptr_t>(value_)) value_ = Object{};
  auto* members = std::get_if<Object>(&value_);
  assert(members && "Json::operator[] on a value that is not an object");
  for (Member& m : *members) {
    if (m.first == key) return m.second;
  }
  members->emplace_back(std::string(key), Json());
  return members->back().second;
}

std::string Json::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

void Json::dump_to(std::string& out) const {
  struct Writer {
    std::string& out;
    void operator()(std::nullptr_t) const { out += "null"; }
    void operator()(bool b) const { out += b ? "true" : "false"; }
    void operator()(std::int64_t i) const { append_integer(out, i); }
    void operator()(std::uint64_t u) const { append_integer(out, u); }
    void operator()(double d) const { append_number(out, d); }
    void operator()(const std::string& s) const { append_json_string(out, s); }
    void operator()(const Array& items) const {
      out += '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += ',';
        items[i].dump_to(out);
      }
      out += ']';
    }
    void operator()(const Object& members) const {
      out += '{';
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (i) out += ',';
        append_json_string(out, members[i].first);
        out += ':';
        members[i].second.dump_to(out);
      }
      out += '}';
    }
  };
  std::visit(Writer{out}, value_);
}

}  // namespace eventide::profile
