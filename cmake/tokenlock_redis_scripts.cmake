# The Redis lock's Lua scripts (lib/src/redis/scripts/*.lua): embedded in
# the C++ client at build time, and copied into the PHP module, from the
# same files, so that both send the very same text.
#
# A script sent to the server is its parts, in the order listed below,
# each without its header comment: the lines at the top of the file that
# begin with "--". What follows the header is sent as it is, blank lines
# and comments included. The server caches a script under the SHA-1 of
# that text, and EVALSHA names it by that digest: computed here, at build
# time, by string(SHA1), so the client computes no digest at run time.
#
# lib/CMakeLists.txt calls tokenlock_redis_scripts_header(); as a script:
#   cmake -DMODE=cpp -DOUT=<header> -P cmake/tokenlock_redis_scripts.cmake
#     writes the C++ header (what the build runs)
#   cmake -DMODE=php -P cmake/tokenlock_redis_scripts.cmake
#     rewrites the PHP module's copies (scripts/php-redis-scripts)
#   cmake -DMODE=php-check -P cmake/tokenlock_redis_scripts.cmake
#     fails when the PHP module's copies differ (the ctest test
#     redis_scripts_php_current)
# -DPHP=<file> names another PHP file than the module's.

set(tokenlock_lua_module ${CMAKE_CURRENT_LIST_FILE})
get_filename_component(tokenlock_lua_root ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)
set(tokenlock_lua_dir ${tokenlock_lua_root}/lib/src/redis/scripts)
set(tokenlock_lua_php_file ${tokenlock_lua_root}/bindings/php/src/Redis/Scripts.php)

# The scripts the C++ client runs, and their parts. The PHP module holds
# all but break: it does not break locks.
set(tokenlock_lua_scripts acquire acquire_shared settle settle_shared holder holders break)
set(tokenlock_lua_php_scripts acquire acquire_shared settle settle_shared holder holders)
set(tokenlock_lua_parts_acquire common next_fence wake shared acquire)
set(tokenlock_lua_parts_acquire_shared common next_fence wake shared acquire_shared)
set(tokenlock_lua_parts_settle common wake settle)
set(tokenlock_lua_parts_settle_shared common wake shared leave settle_shared)
set(tokenlock_lua_parts_holder common holder)
set(tokenlock_lua_parts_holders common wake shared holders)
set(tokenlock_lua_parts_break common wake shared leave break)

# The text of script `name` as the server receives it.
function(tokenlock_lua_text name out)
  set(text "")
  foreach(part IN LISTS tokenlock_lua_parts_${name})
    set(file ${tokenlock_lua_dir}/${part}.lua)
    file(READ ${file} content)
    string(REGEX MATCH "^(--[^\n]*\n)+" header "${content}")
    if(header STREQUAL "")
      message(FATAL_ERROR "${file}: no header comment: a script's file begins with "
        "comment lines (--) that say what it does, its KEYS and its ARGV")
    endif()
    string(LENGTH "${header}" skip)
    string(SUBSTRING "${content}" ${skip} -1 code)
    string(APPEND text "${code}")
  endforeach()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# The header that defines <name>_script (a redis_script: text and SHA-1)
# for every script, in namespace tokenlock::detail.
function(tokenlock_lua_write_cpp out)
  string(CONCAT h "// Written at build time by cmake/tokenlock_redis_scripts.cmake from\n"
        "// lib/src/redis/scripts/*.lua: edit those.\n#pragma once\n\n"
        "#include \"redis/redis_connection.hpp\"\n\nnamespace tokenlock::detail {\n")
  foreach(name IN LISTS tokenlock_lua_scripts)
    tokenlock_lua_text(${name} text)
    string(FIND "${text}" ")tokenlock_lua\"" end)
    if(NOT end EQUAL -1)
      message(FATAL_ERROR "${tokenlock_lua_dir}/${name}.lua: the text )tokenlock_lua\" "
        "would end the C++ raw string that holds the script")
    endif()
    string(SHA1 digest "${text}")
    list(JOIN tokenlock_lua_parts_${name} ".lua, " parts)
    string(APPEND h "\n// ${parts}.lua\ninline constexpr redis_script ${name}_script{"
      "R\"tokenlock_lua(${text})tokenlock_lua\",\n    \"${digest}\"};\n")
  endforeach()
  string(APPEND h "\n}  // namespace tokenlock::detail\n")
  file(WRITE ${out} "${h}")
endfunction()

# The PHP file `php` (its text in `current`) with the scripts as they are
# now: what comes before the class is kept as it is.
function(tokenlock_lua_php php current out)
  string(FIND "${current}" "final class Scripts" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${php}: no \"final class Scripts\" line, after which the "
      "scripts are written; has the file changed shape? Its copies come from ${tokenlock_lua_module}")
  endif()
  string(SUBSTRING "${current}" 0 ${at} text)
  string(APPEND text "final class Scripts\n{\n")
  set(between "")
  foreach(name IN LISTS tokenlock_lua_php_scripts)
    tokenlock_lua_text(${name} lua)
    if(lua MATCHES "\nLUA")
      message(FATAL_ERROR "${tokenlock_lua_dir}/${name}.lua: a line starting with LUA "
        "would end the PHP nowdoc that holds the script")
    endif()
    string(TOUPPER ${name} const)
    string(APPEND text "${between}    public const ${const} = <<<'LUA'\n${lua}\nLUA;\n")
    set(between "\n")
  endforeach()
  string(APPEND text "}\n")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(tokenlock_redis_scripts_header out)
  set(files ${tokenlock_lua_module})
  foreach(name IN LISTS tokenlock_lua_scripts tokenlock_lua_php_scripts)
    foreach(part IN LISTS tokenlock_lua_parts_${name})
      list(APPEND files ${tokenlock_lua_dir}/${part}.lua)
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES files)
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DMODE=cpp -DOUT=${out} -P ${tokenlock_lua_module}
    DEPENDS ${files}
    COMMENT "Embedding the Redis lock's Lua scripts"
    VERBATIM)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT PHP)
    set(PHP ${tokenlock_lua_php_file})
  endif()
  if(MODE STREQUAL "cpp" AND OUT)
    tokenlock_lua_write_cpp(${OUT})
  elseif(MODE STREQUAL "php" OR MODE STREQUAL "php-check")
    file(READ ${PHP} current)
    tokenlock_lua_php(${PHP} "${current}" wanted)
    if(MODE STREQUAL "php")
      file(WRITE ${PHP} "${wanted}")
    elseif(NOT current STREQUAL wanted)
      message(FATAL_ERROR "${PHP}: the PHP module's copies of the Redis scripts differ from "
        "${tokenlock_lua_dir}/*.lua (PHP and C++ processes share a lock only through the same scripts): "
        "run scripts/php-redis-scripts from the source tree, and commit the file")
    endif()
  else()
    message(FATAL_ERROR "usage: cmake -DMODE=cpp -DOUT=<header> | -DMODE=php | "
      "-DMODE=php-check [-DPHP=<file>] -P ${tokenlock_lua_module}")
  endif()
endif()
