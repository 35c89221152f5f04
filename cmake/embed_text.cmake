# Writes OUTPUT, a C++ source that defines `const char* const NAME` (in NAMESPACE) as the text
# of INPUT, in a raw string literal: a file of another language (the timeline page's script)
# kept as a file of its own and built into the library. Refuses text that would end the
# literal early, or that must not be in a page's <script> element ("</script>").
#
#   cmake -DINPUT=a.js -DOUTPUT=a.cpp -DNAME=kName -DNAMESPACE=ns -DHEADER=x.hpp -P embed_text.cmake
file(READ "${INPUT}" text)
string(FIND "${text}" ")EMBED\"" end_mark)
if(NOT end_mark EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains )EMBED\", which would end the raw string early")
endif()
string(FIND "${text}" "</script>" script_end)
if(NOT script_end EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains </script>, which would end the page's script element")
endif()
set(content "// Generated from ${INPUT} by cmake/embed_text.cmake: edit that file instead.\n")
if(HEADER)
  string(APPEND content "#include \"${HEADER}\"\n\n")
endif()
string(APPEND content "namespace ${NAMESPACE} {\n\nconst char* const ${NAME} = R\"EMBED(${text})EMBED\";\n\n}  // namespace ${NAMESPACE}\n")
# Written only when it changes, so that an unchanged script rebuilds nothing.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
  if(old STREQUAL content)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}" "${content}")
