// For the statically linked programs (linked with -Wl,--wrap=getgrnam_r):
// glibc's getgrnam_r goes through the name-service switch, which a static
// program cannot load (the linker warns, and the lookup needs the very
// glibc version linked against at run time). A group named for sharing a
// lock (lock_options::group) is looked up in /etc/group only here; a
// decimal gid works everywhere, and is what to use for groups that live in
// a directory service.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <grp.h>

extern "C" int __wrap_getgrnam_r(const char* name, group* grp, char* buf, std::size_t buflen,
                                 group** result) {
  *result = nullptr;
  std::FILE* f = std::fopen("/etc/group", "re");
  if (!f) return errno == ENOENT ? 0 : errno;
  int err = 0;
  group* found = nullptr;
  while ((err = fgetgrent_r(f, grp, buf, buflen, &found)) == 0) {
    if (std::strcmp(found->gr_name, name) == 0) {
      *result = found;
      break;
    }
  }
  std::fclose(f);
  return err == ENOENT ? 0 : err;
}
