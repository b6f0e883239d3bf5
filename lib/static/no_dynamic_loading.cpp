// For the statically linked programs with the etcd backend (linked with
// -Wl,--wrap=dlopen,--wrap=gethostbyname): OpenSSL's libcrypto.a refers to
// dlopen(3) (to load engines and providers named in an OpenSSL
// configuration) and to gethostbyname(3) (BIO_gethostbyname, for its own
// socket BIOs). The lock uses neither: it loads nothing and resolves names
// itself (numeric_resolver.cpp). Pulled from a static glibc, both need
// glibc's shared libraries at run time, of the very version linked against,
// and the linker says so. These take their place: loading a module fails
// (OpenSSL then reports the module as missing), and no name resolves here.
#include <cstddef>

#include <netdb.h>

extern "C" {

void* __wrap_dlopen(const char*, int) { return nullptr; }

hostent* __wrap_gethostbyname(const char*) {
  h_errno = HOST_NOT_FOUND;
  return nullptr;
}

}  // extern "C"
