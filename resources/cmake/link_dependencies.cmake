# How the libraries found above are linked: two interface targets that core and the executable link.
#
# Each shared library an executable loads costs every start of it: mapping, relocation and symbol lookup,
# 0.4-1 ms each on the benchmark's virtual machine. Six of them (spdlog, fmt, yaml-cpp, PCRE2, xxHash, zlib)
# took 1.9 ms of every `statelens ls` (10.4 -> 8.5 ms on a one-tensor file; a 76,800-tensor checkpoint's whole
# run is about 50 ms). So:
#
# - statelens_log: spdlog and fmt as headers only (spdlog's own header-only mode, with Debian's fmt headers),
#   in every binary. Only a few files log, so compiling them in costs little.
# - statelens_third_party: yaml-cpp, PCRE2, xxHash and zlib from Debian's static archives in executables
#   (statelens, the test suites, the fuzzers), and their shared libraries in shared objects (the GUI module):
#   Debian's archives are not built as position-independent code, so a shared object cannot hold them.
#   simdjson ships no archive and stays shared; so do libstdc++ and libc, which simdjson loads anyway.
#   Where an archive is missing (another distribution) the shared library is linked instead.
#   The cost: a security update of Debian's zlib or PCRE2 reaches the executable when it is rebuilt, not when
#   the system's shared library is upgraded (HACKING.md, "Dependencies").

# spdlog in header-only mode over fmt in header-only mode. spdlog::spdlog_header_only would link the shared fmt.
get_target_property(STATELENS_SPDLOG_INCLUDES spdlog::spdlog_header_only INTERFACE_INCLUDE_DIRECTORIES)
add_library(statelens_log INTERFACE)
target_include_directories(statelens_log SYSTEM INTERFACE ${STATELENS_SPDLOG_INCLUDES})
target_compile_definitions(statelens_log INTERFACE SPDLOG_FMT_EXTERNAL)
find_package(Threads REQUIRED)
target_link_libraries(statelens_log INTERFACE fmt::fmt-header-only Threads::Threads)

# Each library: its archive where the consumer is an executable and the archive exists, else its shared target.
add_library(statelens_third_party INTERFACE)
set(STATELENS_LINKED_EXECUTABLE "$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>")
foreach(lib IN ITEMS "yaml-cpp|yaml-cpp" "pcre2-8|PkgConfig::PCRE2" "xxhash|PkgConfig::XXHASH" "z|ZLIB::ZLIB")
    string(REPLACE "|" ";" lib "${lib}")
    list(GET lib 0 archive_name)
    list(GET lib 1 shared_target)
    find_library(STATELENS_ARCHIVE_${archive_name} NAMES lib${archive_name}.a NO_CACHE)
    if(STATELENS_ARCHIVE_${archive_name})
        target_link_libraries(statelens_third_party INTERFACE
            "$<IF:${STATELENS_LINKED_EXECUTABLE},${STATELENS_ARCHIVE_${archive_name}},${shared_target}>")
    else()
        target_link_libraries(statelens_third_party INTERFACE ${shared_target})
    endif()
endforeach()
# The archives' headers are the shared targets' own, which need no compile flags on Linux.
foreach(target IN ITEMS yaml-cpp PkgConfig::PCRE2 PkgConfig::XXHASH ZLIB::ZLIB)
    target_include_directories(statelens_third_party SYSTEM INTERFACE
        "$<TARGET_PROPERTY:${target},INTERFACE_INCLUDE_DIRECTORIES>")
endforeach()
target_link_libraries(statelens_third_party INTERFACE simdjson::simdjson)
