# Writes statelens(1) with help2man from the executable itself, so the man page says what the binary does:
# `statelens --help` for the synopsis and options, each subcommand's --help (those `statelens --help` lists)
# as the COMMANDS section, and statelens.h2m for what --help does not say (exit status, files).
# Usage: cmake -DSTATELENS=exe -DHELP2MAN=help2man -DINCLUDE=statelens.h2m -DOUTPUT=statelens.1 -P make_man_page.cmake

execute_process(COMMAND ${STATELENS} --help RESULT_VARIABLE rc OUTPUT_VARIABLE help ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${STATELENS} --help failed (${rc}): ${err}")
endif()

# The subcommands: the indented names under CLI11's "SUBCOMMANDS:" heading.
string(FIND "${help}" "SUBCOMMANDS:\n" at)
if(at LESS 0)
    string(FIND "${help}" "Subcommands:\n" at)
endif()
if(at LESS 0)
    message(FATAL_ERROR "no subcommand list in `${STATELENS} --help`:\n${help}")
endif()
string(SUBSTRING "${help}" ${at} -1 list)
string(REPLACE "\n" ";" lines "${list}")
set(commands "")
foreach(line IN LISTS lines)
    if(line MATCHES "^  ([a-z][a-z-]*)( |$)")
        list(APPEND commands "${CMAKE_MATCH_1}")
    endif()
endforeach()
if(NOT commands)
    message(FATAL_ERROR "no subcommands found under the list in `${STATELENS} --help`")
endif()

# Each one's --help, verbatim (.nf), escaped for roff: backslashes, a leading dot or quote, and hyphens as
# minus signs so options copy and paste.
set(section "[COMMANDS]\n")
foreach(command IN LISTS commands)
    execute_process(COMMAND ${STATELENS} ${command} --help RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${STATELENS} ${command} --help failed (${rc}): ${err}")
    endif()
    string(REPLACE "\\" "\\e" text "${text}")
    string(REPLACE "-" "\\-" text "${text}")
    string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
    string(APPEND section ".SS \"statelens ${command}\"\n.nf\n${text}\n.fi\n")
endforeach()

file(READ "${INCLUDE}" fixed)
file(WRITE "${OUTPUT}.h2m" "${section}\n${fixed}") # COMMANDS first: help2man puts other sections after OPTIONS in this order
# Written beside the target, then renamed over it: a failed run leaves no half-written man page.
execute_process(
    COMMAND ${CMAKE_COMMAND} -E env LC_ALL=C.UTF-8
            ${HELP2MAN} --no-info --section=1 --include=${OUTPUT}.h2m --output=${OUTPUT}.tmp ${STATELENS}
    RESULT_VARIABLE rc ERROR_VARIABLE err)
file(REMOVE "${OUTPUT}.h2m")
if(NOT rc EQUAL 0)
    file(REMOVE "${OUTPUT}.tmp")
    message(FATAL_ERROR "help2man failed (${rc}): ${err}")
endif()
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
