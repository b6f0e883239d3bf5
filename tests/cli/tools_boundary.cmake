# The programs under tools/ (or PART/: bench/ too) use the library as any
# program does: through the public headers (lib/include) and the public
# targets (tokenlock, tokenlock_redis). Fails, naming each offence, when a
# file under PART/ includes a header of lib/src, when its programs link a
# target meant for white-box tests (tokenlock_internal), or when their
# include path, with what their libraries pass on, reaches into lib/src.
#
#   cmake -DSOURCE_DIR=... [-DPART=bench] -DLINKED="a|b" -DINCLUDES="x|y" -P tools_boundary.cmake
# LINKED and INCLUDES are what CMake resolved for the programs' targets
# ('|'-separated, as generator expressions cannot pass ';' through).
if(NOT SOURCE_DIR OR NOT DEFINED LINKED OR NOT DEFINED INCLUDES)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=... -DLINKED=... -DINCLUDES=... -P ${CMAKE_CURRENT_LIST_FILE}")
endif()
if(NOT PART)
  set(PART tools)
endif()
set(problems "")

file(GLOB_RECURSE tool_files ${SOURCE_DIR}/${PART}/*.cpp ${SOURCE_DIR}/${PART}/*.hpp
     ${SOURCE_DIR}/${PART}/*.h ${SOURCE_DIR}/${PART}/*.c)
if(NOT tool_files)
  message(FATAL_ERROR "no sources under ${SOURCE_DIR}/${PART}: the check would prove nothing")
endif()
foreach(f IN LISTS tool_files)
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]+)[\">].*" "\\1" header "${line}")
    if(EXISTS ${SOURCE_DIR}/lib/src/${header} OR header MATCHES "(^|/)lib/src/")
      list(APPEND problems "${f} includes \"${header}\", an internal header of lib/src")
    endif()
  endforeach()
endforeach()

string(REPLACE "|" ";" linked "${LINKED}")
foreach(l IN LISTS linked)
  if(l MATCHES "_internal")
    list(APPEND problems "a program of ${PART}/ links ${l}, a target for white-box tests")
  endif()
endforeach()

string(REPLACE "|" ";" includes "${INCLUDES}")
foreach(dir IN LISTS includes)
  get_filename_component(dir "${dir}" ABSOLUTE)
  string(FIND "${dir}/" "${SOURCE_DIR}/lib/src/" at)
  if(at EQUAL 0)
    list(APPEND problems "the include path of ${PART}/'s programs holds ${dir}, inside lib/src")
  endif()
endforeach()

list(LENGTH tool_files checked)
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "${PART}/ goes around the public interface:\n  ${text}")
endif()
message(STATUS "${checked} files under ${PART}/ include public headers only; linked: ${LINKED}")
