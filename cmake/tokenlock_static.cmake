# Static linking for the programs that users copy onto a host as one file:
# the tokenlock command (into ~/bin or cgi-bin on shared hosting) and
# counter.cgi. Static, they need no libstdc++ or Boost of the host's, and
# they start without the dynamic loader's work, which is most of the cost of
# a short-lived program (docs/cgi-guide.md, docs/languages.md).
#
# tokenlock_static_available: whether the archives exist (the default of
# the options that use this). tokenlock_link_static(TARGET [ARCHIVES...])
# links TARGET with -static against the library's archives (and hiredis's,
# with the Redis backend; tokenlock_etcd's and OpenSSL's, with the etcd
# backend), plus ARCHIVES.
#
# tokenlock_static_etcd: ON when the static programs get the etcd backend
# (TOKENLOCK_ETCD and OpenSSL's archives libssl.a and libcrypto.a found);
# OFF leaves it out of them (tools/ and cgi-examples/ test it).
# Linking libcrypto.a draws two linker warnings (dlopen, gethostbyname)
# from code the lock never calls: docs/etcd.md, "Static link warnings".

find_library(TOKENLOCK_BOOST_FILESYSTEM_ARCHIVE NAMES libboost_filesystem.a)
if(TOKENLOCK_REDIS)
  find_library(TOKENLOCK_HIREDIS_ARCHIVE NAMES libhiredis.a)
endif()
set(tokenlock_static_etcd OFF)
if(TOKENLOCK_ETCD)
  find_library(TOKENLOCK_SSL_ARCHIVE NAMES libssl.a)
  find_library(TOKENLOCK_CRYPTO_ARCHIVE NAMES libcrypto.a)
  if(TOKENLOCK_SSL_ARCHIVE AND TOKENLOCK_CRYPTO_ARCHIVE)
    set(tokenlock_static_etcd ON)
  else()
    message(STATUS "tokenlock: no libssl.a/libcrypto.a: the static programs are built without etcd")
  endif()
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
  set(with_redis OFF)
  if(TOKENLOCK_REDIS AND TOKENLOCK_HIREDIS_ARCHIVE)
    set(with_redis ON)
  endif()
  # open_lock with the backends linked here (the others answer
  # backend_unavailable), first: the archives below resolve what it needs.
  if(NOT TARGET tokenlock_open_static)
    tokenlock_add_open(tokenlock_open_static "${with_redis}" "${tokenlock_static_etcd}")
  endif()
  target_link_libraries(${target} PRIVATE $<TARGET_FILE:tokenlock_open_static>)
  add_dependencies(${target} tokenlock_open_static)
  if(with_redis OR tokenlock_static_etcd)
    # Host names need glibc's shared name-service libraries, which a static
    # program cannot load: numeric addresses and /etc/hosts only.
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/lib/static/numeric_resolver.cpp)
    target_link_options(${target} PRIVATE -Wl,--wrap=getaddrinfo)
  endif()
  if(with_redis)
    target_link_libraries(${target} PRIVATE $<TARGET_FILE:tokenlock_redis>)
    add_dependencies(${target} tokenlock_redis)
  endif()
  if(tokenlock_static_etcd)
    # OpenSSL's dynamic loading and its own name lookup, unused, stubbed
    # out so that nothing needs glibc's shared libraries at run time.
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/lib/static/no_dynamic_loading.cpp)
    target_link_options(${target} PRIVATE -Wl,--wrap=dlopen,--wrap=gethostbyname)
    target_link_libraries(${target} PRIVATE $<TARGET_FILE:tokenlock_etcd>)
    target_include_directories(${target} PRIVATE
      $<TARGET_PROPERTY:nlohmann_json::nlohmann_json,INTERFACE_INCLUDE_DIRECTORIES>)
    add_dependencies(${target} tokenlock_etcd)
  endif()
  # Group names without the name-service switch (files_group.cpp).
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/lib/static/files_group.cpp)
  target_link_options(${target} PRIVATE -Wl,--wrap=getgrnam_r)
  target_link_libraries(${target} PRIVATE $<TARGET_FILE:tokenlock> ${ARGN}
    ${TOKENLOCK_BOOST_FILESYSTEM_ARCHIVE} Threads::Threads)
  if(with_redis)
    target_link_libraries(${target} PRIVATE ${TOKENLOCK_HIREDIS_ARCHIVE})
  endif()
  if(tokenlock_static_etcd)
    target_link_libraries(${target} PRIVATE ${TOKENLOCK_SSL_ARCHIVE} ${TOKENLOCK_CRYPTO_ARCHIVE})
  endif()
  target_link_options(${target} PRIVATE -static)
  add_dependencies(${target} tokenlock)
endfunction()
