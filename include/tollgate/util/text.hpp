// Appending numbers and text to strings without temporaries or the locale machinery.
#pragma once

#include <charconv>
#include <concepts>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>

namespace tollgate::util {

// Appends `v` in decimal.
template <std::integral T>
void AppendDecimal(std::string& out, T v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// Appends many small pieces to a string through a buffer on the stack, so that the string sees
// one append per buffer-full (or at the end) instead of one per piece: responses are rendered
// from dozens of pieces on every request.
class StringAppender {
 public:
  explicit StringAppender(std::string& out) : out_(out) {}
  StringAppender(const StringAppender&) = delete;
  StringAppender& operator=(const StringAppender&) = delete;
  ~StringAppender() { Flush(); }

  // What the string will hold once flushed.
  size_t size() const { return out_.size() + static_cast<size_t>(p_ - buf_); }

  // Inlined, so that pieces of a known size are copied without a call.
  [[gnu::always_inline]] StringAppender& operator<<(std::string_view s) {
    if (static_cast<size_t>(std::end(buf_) - p_) < s.size()) [[unlikely]] {
      return AppendLarge(s);
    }
    if (s.empty()) return *this;  // memcpy from a null pointer (an empty view's) is undefined
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
    return *this;
  }

  // Integers in decimal (not char or bool, which would be surprising).
  template <std::integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, char>) [[gnu::always_inline]] StringAppender&
  operator<<(T v) {
    if (std::end(buf_) - p_ < 24) [[unlikely]]
      Flush();
    p_ = std::to_chars(p_, std::end(buf_), v).ptr;
    return *this;
  }

  void Flush() {
    out_.append(buf_, p_);
    p_ = buf_;
  }

 private:
  [[gnu::noinline]] StringAppender& AppendLarge(std::string_view s) {
    Flush();
    if (s.size() > sizeof buf_) {
      out_.append(s);
    } else {
      std::memcpy(p_, s.data(), s.size());
      p_ += s.size();
    }
    return *this;
  }

  std::string& out_;
  char buf_[1024];
  char* p_ = buf_;
};

}  // namespace tollgate::util
