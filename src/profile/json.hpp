// profile::Json: the small JSON value the profiler's exports build and write (the Chrome
// trace). It is the library's own so that building eventide needs no JSON library: a project
// that adds eventide with FetchContent or add_subdirectory needs only what the library links.
//
// A value is null, a boolean, an integer, a number, a string, an array or an object; an
// object keeps its keys in the order they were first set (what the trace is read in). It
// writes, it does not parse: the tests read its output back with a real parser.
//
//   Json ev = Json::object({{"ph", "X"}, {"name", op.name}, {"args", Json::object({{"id", 7}})}});
//   ev["ts"] = 1.5;
//   std::string text = ev.dump();   // {"ph":"X","name":"matmul","args":{"id":7},"ts":1.5}
//
// dump() writes strings as UTF-8 with the escapes RFC 8259 requires (quote, backslash, the
// control characters); bytes that are not valid UTF-8 are written as U+FFFD, so the output
// is always valid JSON whatever a name held. Numbers that are not finite are written as null
// (JSON has no NaN or infinity). A Json is a plain value: no sharing, no locking.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace eventide::profile {

class Json {
 public:
  using Array = std::vector<Json>;
  using Member = std::pair<std::string, Json>;
  using Object = std::vector<Member>;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : value_(b) {}
  template <std::signed_integral T>
    requires(!std::same_as<T, bool>)
  Json(T i) : value_(static_cast<std::int64_t>(i)) {}
  template <std::unsigned_integral T>
    requires(!std::same_as<T, bool>)
  Json(T u) : value_(static_cast<std::uint64_t>(u)) {}
  Json(double d) : value_(d) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(std::string_view s) : value_(std::string(s)) {}
  // An array of the vector's elements.
  template <typename T>
  Json(const std::vector<T>& items) : value_(Array(items.begin(), items.end())) {}

  static Json object(std::initializer_list<Member> members = {});
  static Json array(std::initializer_list<Json> items = {});

  // The member `key` of an object, added (null) if it is not there yet. A null value becomes
  // an empty object first; on anything else it is an internal error (assert).
  Json& operator[](std::string_view key);

  // The value as compact JSON text (no spaces, no newline).
  std::string dump() const;
  void dump_to(std::string& out) const;

 private:
  std::variant<std::nullptr_t, bool, std::int64_t, std::uint64_t, double, std::string, Array,
               Object>
      value_{nullptr};
};

// Where a JSON string literal goes: a JSON text, or inside an HTML <script> element, where
// '<', '>' and '&' are written as \u003c, \u003e and \u0026 so that the literal cannot hold
// "</script>" or "<!--".
enum class JsonText { plain, in_html_script };

// `text` as a JSON string literal, quotes included (see dump()).
void append_json_string(std::string& out, std::string_view text, JsonText where = JsonText::plain);

}  // namespace eventide::profile
