# Helper functions: one line per library, test and benchmark.

# -Wpedantic is not on: the code uses GCC's unsigned __int128 and vector extensions on purpose
# (token-bucket math, the canonical target's fast path), which it would flag.
set(TOLLGATE_WARNINGS -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers)
if(TOLLGATE_WERROR)
  list(APPEND TOLLGATE_WARNINGS -Werror)
endif()
# TOLLGATE_SANITIZE (CMakeLists.txt): `thread` is ThreadSanitizer, any other true value
# AddressSanitizer with UndefinedBehaviorSanitizer.
if(TOLLGATE_SANITIZE STREQUAL "thread")
  set(TOLLGATE_TSAN ON)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
  # Every report fails its test; tests/tsan.supp says what is tolerated, and why.
  set(TOLLGATE_TEST_ENVIRONMENT
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp")
elseif(TOLLGATE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# tollgate_library(NAME SOURCES a.cpp b.cpp DEPS x y)
function(tollgate_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${TOLLGATE_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# tollgate_test(NAME SOURCES a_test.cpp DEPS lib LABELS unit)
# Links the test-only library (tests/support: "support/fake_clock.hpp", ...); src/ is on the
# include path for the tests of private headers.
function(tollgate_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${TOLLGATE_WARNINGS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} tollgate_test_support GTest::gtest_main
                                        Threads::Threads)
  set(properties LABELS "${ARG_LABELS}")
  if(TOLLGATE_TEST_ENVIRONMENT)
    list(APPEND properties ENVIRONMENT "${TOLLGATE_TEST_ENVIRONMENT}")
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES ${properties})
endfunction()

# tollgate_bench(NAME SOURCES a_bench.cpp DEPS lib)
function(tollgate_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${TOLLGATE_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark Threads::Threads)
endfunction()
