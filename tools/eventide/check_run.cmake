# Runs PROGRAM with ARGS (comma-separated, since a ';' list does not survive add_test) and
# fails unless its exit status is EXPECT_EXIT and its stdout / stderr match EXPECT_STDOUT /
# EXPECT_STDERR (CMake regexes; '.' also matches newlines; empty means unchecked).
#   cmake -DPROGRAM=... -DARGS=demo,--device,cpu -DEXPECT_EXIT=0 -DEXPECT_STDOUT=... -P check_run.cmake
#
# CHECK_FILES ('|'-separated KIND:PATH) names files the program must write; they are deleted
# before the run, so that a stale one cannot pass. Kinds:
#   bench_json  `eventide bench`'s JSON: parses, with a non-empty "figures" array
#   markdown    `eventide bench`'s table
#   svg         `eventide bench`'s chart: one SVG document with at least two bars
#   trace       a Chrome trace: parses as JSON, with trace events
#   timeline    the profile's page: HTML with its canvas and its data
string(REPLACE "," ";" args "${ARGS}")
string(REPLACE "|" ";" files "${CHECK_FILES}")
foreach(entry IN LISTS files)
  string(REGEX REPLACE "^[a-z_]+:" "" path "${entry}")
  file(REMOVE "${path}")
  get_filename_component(dir "${path}" DIRECTORY)
  file(MAKE_DIRECTORY "${dir}")
endforeach()

execute_process(COMMAND ${PROGRAM} ${args}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("---- stdout ----\n${out}---- stderr ----\n${err}---- exit status ${status} ----")
set(problems "")
if(NOT "${status}" STREQUAL "${EXPECT_EXIT}")
  string(APPEND problems "exit status ${status}, expected ${EXPECT_EXIT}\n")
endif()
if(EXPECT_STDOUT AND NOT out MATCHES "${EXPECT_STDOUT}")
  string(APPEND problems "stdout does not match: ${EXPECT_STDOUT}\n")
endif()
if(EXPECT_STDERR AND NOT err MATCHES "${EXPECT_STDERR}")
  string(APPEND problems "stderr does not match: ${EXPECT_STDERR}\n")
endif()

foreach(entry IN LISTS files)
  string(REGEX MATCH "^[a-z_]+" kind "${entry}")
  string(REGEX REPLACE "^[a-z_]+:" "" path "${entry}")
  if(NOT EXISTS "${path}")
    string(APPEND problems "${kind}: ${path} was not written\n")
    continue()
  endif()
  file(READ "${path}" content)
  if(kind STREQUAL "bench_json" OR kind STREQUAL "trace")
    string(JSON type ERROR_VARIABLE json_error TYPE "${content}")
    if(json_error)
      string(APPEND problems "${kind}: ${path} is not JSON: ${json_error}\n")
      continue()
    endif()
    if(kind STREQUAL "bench_json")
      string(JSON figures ERROR_VARIABLE json_error LENGTH "${content}" figures)
      if(json_error OR figures LESS 1)
        string(APPEND problems "${kind}: ${path} has no figures ${json_error}\n")
      else()
        message("${kind}: ${path}: JSON with ${figures} figures")
      endif()
    else()
      # The Trace Event Format: an array of events, or an object with "traceEvents".
      if(type STREQUAL "OBJECT")
        string(JSON events ERROR_VARIABLE json_error LENGTH "${content}" traceEvents)
      else()
        string(JSON events ERROR_VARIABLE json_error LENGTH "${content}")
      endif()
      if(json_error OR events LESS 1)
        string(APPEND problems "${kind}: ${path} has no trace events ${json_error}\n")
      else()
        message("${kind}: ${path}: JSON with ${events} trace events")
      endif()
    endif()
  elseif(kind STREQUAL "markdown")
    if(NOT content MATCHES "\\| figure \\| eventide \\| anchor")
      string(APPEND problems "${kind}: ${path} has no table\n")
    endif()
  elseif(kind STREQUAL "svg")
    string(REGEX MATCHALL "<rect class=\"bar\"" bars "${content}")
    list(LENGTH bars bar_count)
    if(NOT content MATCHES "<svg xmlns=\"http://www.w3.org/2000/svg\"" OR
       NOT content MATCHES "</svg>\n$" OR bar_count LESS 2)
      string(APPEND problems "${kind}: ${path} is not an SVG chart with bars (${bar_count} bars)\n")
    else()
      message("${kind}: ${path}: SVG with ${bar_count} bars")
    endif()
  elseif(kind STREQUAL "timeline")
    string(TOLOWER "${content}" lower)
    if(NOT lower MATCHES "<html" OR NOT lower MATCHES "<canvas" OR
       NOT content MATCHES "<script type=\"application/json\" id=\"eventide-timeline-data\">")
      string(APPEND problems "${kind}: ${path} is not an HTML page with a canvas and its data\n")
    endif()
  else()
    string(APPEND problems "unknown file kind '${kind}' in CHECK_FILES\n")
  endif()
endforeach()

if(problems)
  message(FATAL_ERROR "${problems}")
endif()
