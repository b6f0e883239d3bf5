# Static linking for the programs that users copy onto a host as one file:
# the tokenlock command (into ~/bin or cgi-bin on shared hosting) and
# counter.cgi. Static, they need no libstdc++ or Boost of the host's, and
# they start without the dynamic loader's work, which is most of the cost of
# a short-lived program (docs/cgi-guide.md, docs/languages.md).
#
# tokenlock_static_available: whether the archives exist (the default of
# the options that use this). tokenlock_link_static(TARGET [ARCHIVES...])
# links TARGET with -static against the library's archives (and hiredis's,
# with the Redis backend), plus ARCHIVES.

find_library(TOKENLOCK_BOOST_FILESYSTEM_ARCHIVE NAMES libboost_filesystem.a)
if(TOKENLOCK_REDIS)
  find_library(TOKENLOCK_HIREDIS_ARCHIVE NAMES libhiredis.a)
endif()
if(TOKENLOCK_BOOST_FILESYSTEM_ARCHIVE)
  set(tokenlock_static_available ON)
else()
  set(tokenlock_static_available OFF)
endif()

function(tokenlock_link_static target)
  # The archives themselves, not the targets: the tokenlock target carries
  # the shared Boost library in its link interface.
  target_include_directories(${target} PRIVATE
    $<TARGET_PROPERTY:tokenlock,INTERFACE_INCLUDE_DIRECTORIES>)
  if(TOKENLOCK_REDIS AND TOKENLOCK_HIREDIS_ARCHIVE)
    # Host names need glibc's shared name-service libraries, which a static
    # program cannot load: numeric addresses and unix sockets only.
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/lib/static/numeric_resolver.cpp)
    target_link_libraries(${target} PRIVATE $<TARGET_FILE:tokenlock_redis>)
    target_link_options(${target} PRIVATE -Wl,--wrap=getaddrinfo)
    add_dependencies(${target} tokenlock_redis)
  endif()
  target_link_libraries(${target} PRIVATE $<TARGET_FILE:tokenlock> ${ARGN}
    ${TOKENLOCK_BOOST_FILESYSTEM_ARCHIVE} Threads::Threads)
  if(TOKENLOCK_REDIS AND TOKENLOCK_HIREDIS_ARCHIVE)
    target_link_libraries(${target} PRIVATE ${TOKENLOCK_HIREDIS_ARCHIVE})
  endif()
  target_link_options(${target} PRIVATE -static)
  add_dependencies(${target} tokenlock)
endfunction()
