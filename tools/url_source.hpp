// Where the command reads a lock server's URL from, so that a password in
// it need not be on the command line, where every local user sees it in
// ps(1) and /proc/PID/cmdline while `run` runs. The forms follow
// OpenSSL's pass-phrase sources (openssl-passphrase-options(1)):
//   env:VAR    the value of the environment variable VAR;
//   file:PATH  the first line of PATH, a regular file owned by this user
//              (or root) that no other user may read or write (chmod 600);
//   anything else is the URL itself.
#pragma once

#include <string>

namespace tokenlock::cli {

// The URL that `given` names for option `option` ("--redis"). Throws
// po::error (exit 64) naming the variable or the file and the fix when the
// variable is unset or empty, or the file is missing, not a regular file,
// readable or writable by others, owned by another user, or longer than
// 8 KiB; never shows what the file or variable holds.
std::string url_from_source(const std::string& given, const char* option);

}  // namespace tokenlock::cli
