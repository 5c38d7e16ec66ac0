#!/usr/bin/env python3
"""Unit tests of check_sizes.py's parser: python3 tests/layout/test_check_sizes.py"""

import os
import sys
import tempfile
import textwrap
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_sizes  # noqa: E402


def functions(code: str) -> dict:
    """{name: body lines} of the functions in a snippet."""
    return {f.name: f.body_lines for f in check_sizes.find_functions(textwrap.dedent(code))}


def body(n: int, indent: str = "  ") -> str:
    return "".join(f"{indent}x += {i};\n" for i in range(n))


class Stripping(unittest.TestCase):
    def test_raw_strings_with_braces_and_quotes(self):
        code = 'void F() {\n  auto s = R"({ "}" {)";\n  auto t = R"x(})" }{ )x";\n' + body(3) + "}\n"
        self.assertEqual(functions(code), {"F": 5})

    def test_raw_string_prefixes_and_ordinary_strings(self):
        code = ('void F() {\n  auto a = u8R"(})";\n  auto b = LR"d(}{)d";\n'
                '  auto c = "\\"}";\n  char d = \'}\';\n  char e = \'\\\'\';\n}\n'
                "void G() {}\n")
        self.assertEqual(functions(code), {"F": 5, "G": 0})

    def test_comments_and_directives_with_braces(self):
        code = """\
            // void Commented() {
            /* } { */
            #define OPEN {
            #define MULTI \\
                }
            void F() {  // }
              x = 1;  /* {
              } */
            }
            """
        self.assertEqual(functions(code), {"F": 2})

    def test_digit_separators_are_not_char_literals(self):
        code = "int F() {\n  return 1'000'000 + 0x1'0;\n}\nint G() { return '{'; }\n"
        self.assertEqual(functions(code), {"F": 1, "G": 0})

    def test_lines_are_kept(self):
        text = 'a /* x\ny */ "s"\n#if 1\nR"(\n)"\n'
        self.assertEqual(check_sizes.strip_code(text).count("\n"), text.count("\n"))


class Functions(unittest.TestCase):
    def test_a_lambda_counts_toward_its_function(self):
        code = ("void F() {\n  auto f = [&](int y) {\n" + body(5, "    ") +
                "  };\n  std::sort(v.begin(), v.end(), [](int a, int b) { return a < b; });\n}\n")
        self.assertEqual(functions(code), {"F": 8})

    def test_a_lambda_at_namespace_scope_is_a_function(self):
        code = "namespace a {\nconst auto kTable = [] {\n" + body(2) + "}();\n}  // namespace a\n"
        self.assertEqual(functions(code), {"kTable": 2})

    def test_a_class_with_inline_methods(self):
        code = """\
            namespace tollgate::store {
            class Shard final : public Base<int> {
             public:
              Shard() : a_{1}, b_(2), c_{} {
                Init();
              }
              ~Shard() { Close(); }
              int Size() const noexcept { return n_; }
              explicit operator bool() const { return n_ > 0; }
              bool operator==(const Shard& o) const { return n_ == o.n_; }
              int operator()(int x) const {
                return x;
              }
              struct Inner {
                void Run() override {
                  Go();
                }
              };
             private:
              int n_{0};
              std::array<int, 3> a_ = {1, 2, 3};
              enum class Kind { kA, kB };
            };
            }  // namespace tollgate::store
            """
        self.assertEqual(functions(code), {
            "Shard::Shard": 1, "Shard::~Shard": 0, "Shard::Size": 0,
            "Shard::operator bool": 0, "Shard::operator==": 0, "Shard::operator()": 1,
            "Shard::Inner::Run": 1})

    def test_out_of_line_definitions(self):
        code = """\
            Worker::Worker(Config c) : config_(std::move(c)) {}
            Worker::~Worker() {
              Stop();
            }
            asio::awaitable<void> Worker::Session(Socket s) {
              co_await s.Read();
            }
            auto Worker::Size() const -> std::size_t {
              return n_;
            }
            """
        self.assertEqual(functions(code), {"Worker::Worker": 0, "Worker::~Worker": 1,
                                           "Worker::Session": 1, "Worker::Size": 1})

    def test_a_function_try_block_ends_at_its_last_handler(self):
        code = """\
            int F() try {
              return Parse();
            } catch (const std::exception& e) {
              Log(e);
              return 1;
            } catch (...) {
              return 2;
            }
            Foo::Foo() try : a_(1) {
            } catch (...) {
            }
            void G() {}
            """
        self.assertEqual(functions(code), {"F": 6, "Foo::Foo": 1, "G": 0})

    def test_if_constexpr(self):
        code = """\
            template <class T>
            int Size(const T& v) {
              if constexpr (std::is_same_v<T, std::string>) {
                return v.size();
              } else if constexpr (sizeof(T) > 4) {
                return 8;
              } else {
                return 4;
              }
            }
            """
        self.assertEqual(functions(code), {"Size": 7})

    def test_templates(self):
        code = """\
            template <typename T, int N = 3>
            std::array<T, N> Make() {
              return {};
            }
            template <class T>
              requires std::integral<T>
            T Twice(T x) {
              return 2 * x;
            }
            template <class T>
            T Half(T x) requires (sizeof(T) > 1) {
              return x / 2;
            }
            template <class T>
            void Box<T>::Set(T v) {
              v_ = v;
            }
            template <>
            void Print<int>(int v) {
              std::cout << v;
            }
            template <class T>
            struct Holder<T*> {
              T* Get() const { return p_; }
              T* p_;
            };
            """
        self.assertEqual(functions(code), {"Make": 1, "Twice": 1, "Half": 1, "Box<T>::Set": 1,
                                           "Print<int>": 1, "Holder::Get": 0})

    def test_qualifiers_attributes_and_macros_before_the_body(self):
        code = """\
            [[nodiscard]] static inline int F(int a) noexcept(true) {
              return a;
            }
            void G() ABSL_LOCKS_EXCLUDED(mu_) {
              Lock();
            }
            struct alignas(64) Padded {
              char c;
            };
            void H() && {}
            """
        self.assertEqual(functions(code), {"F": 1, "G": 1, "H": 0})

    def test_not_functions(self):
        code = """\
            extern "C" {
            int CFunction(int x) {
              return x;
            }
            }
            namespace {
            constexpr int kTable[] = {1, 2, 3};
            const Foo kFoo{Bar(1), 2};
            std::function<void(int)> callback{[](int) {}};
            enum class Mode : uint8_t { kA, kB };
            union Value {
              int i;
              float f;
            };
            }  // namespace
            """
        self.assertEqual(functions(code), {"CFunction": 1})

    def test_argument_defaults_and_initializers_with_braces(self):
        code = """\
            void F(Options o = Options{}, std::vector<int> v = {1, 2}) {
              Use(o, v);
            }
            Limiter::Limiter(Plan p)
                : plan_{std::move(p)},
                  cb_([this] { return Tick(); }),
                  bases_{}... {
              Start();
            }
            """
        self.assertEqual(functions(code), {"F": 1, "Limiter::Limiter": 1})

    def test_body_lines_are_the_lines_between_the_braces(self):
        code = "void F() {\n" + body(80) + "}\nvoid G() {\n" + body(81) + "}\n"
        self.assertEqual(functions(code), {"F": 80, "G": 81})


class Check(unittest.TestCase):
    def run_check(self, files: dict, allowlist: str) -> tuple[int, str]:
        with tempfile.TemporaryDirectory() as root:
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            allow = os.path.join(root, "allow.txt")
            with open(allow, "w") as f:
                f.write(allowlist)
            import contextlib
            import io
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = check_sizes.main([root, "--allowlist", allow])
            return code, out.getvalue()

    def test_violations_fail_and_allowlisted_ones_warn(self):
        long_file = "int x;\n" * 601
        long_function = "namespace n {\nclass W {\n void Run();\n};\nvoid W::Run() {\n" + \
            body(81) + "}\n}\n"
        files = {"src/a/long.cpp": long_file, "src/a/fn.cpp": long_function,
                 "include/tollgate/a/ok.hpp": "void F() {}\n",
                 "src/store/redis_script.lua": "x\n" * 700,
                 "src/a/gen.cpp": "// Generated by protoc. DO NOT EDIT.\n" + "int y;\n" * 700}
        code, out = self.run_check(files, "")
        self.assertEqual(code, 1)
        self.assertIn("src/a/long.cpp:1: file is 601 lines (limit 600)", out)
        self.assertIn("src/a/fn.cpp:5: function W::Run is 81 lines (limit 80)", out)
        self.assertNotIn("lua", out)
        self.assertNotIn("gen.cpp", out)

        code, out = self.run_check(files, "src/a/long.cpp  # why\nsrc/a/fn.cpp:W::Run # why\n"
                                          "src/a/gone.cpp  # split already\n")
        self.assertEqual(code, 0)
        self.assertIn("src/a/fn.cpp:5: function W::Run is 81 lines (limit 80)  [warning", out)
        self.assertIn("'src/a/gone.cpp' is within the limits now", out)


if __name__ == "__main__":
    unittest.main()
