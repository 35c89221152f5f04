# Runs PROGRAM with ARGS (comma-separated, since a ';' list does not survive add_test) and
# fails unless its exit status is EXPECT_EXIT and its stdout / stderr match EXPECT_STDOUT /
# EXPECT_STDERR (CMake regexes; '.' also matches newlines; empty means unchecked).
#   cmake -DPROGRAM=... -DARGS=demo,--device,cpu -DEXPECT_EXIT=0 -DEXPECT_STDOUT=... -P check_run.cmake
string(REPLACE "," ";" args "${ARGS}")
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
if(problems)
  message(FATAL_ERROR "${problems}")
endif()
