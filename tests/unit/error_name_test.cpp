// The one vocabulary of errors (errors.hpp, Names): every errc and errno
// has its name, the name gives the code back, and the C interface's
// tokenlock_strerror reads the same table.
#include <gtest/gtest.h>

#include <cerrno>
#include <future>
#include <set>
#include <string>

#include "tokenlock/errors.hpp"
#include "tokenlock/tokenlock.h"

using tokenlock::errc;
using tokenlock::error_from_name;
using tokenlock::error_name;

namespace {

constexpr int first_errc = static_cast<int>(errc::busy);
constexpr int last_errc = static_cast<int>(errc::not_supported);

std::error_code os_error(int e) { return {e, std::generic_category()}; }

TEST(ErrorName, EveryErrcHasItsOwnNameThatGivesTheSameCodeBack) {
  std::set<std::string> seen;
  for (int v = first_errc; v <= last_errc; ++v) {
    const std::error_code ec = tokenlock::make_error_code(static_cast<errc>(v));
    const std::string name = error_name(ec);
    EXPECT_NE(name, "unknown") << v;
    EXPECT_NE(name, "system") << v;
    EXPECT_TRUE(seen.insert(name).second) << name << " names two codes";
    const auto back = error_from_name(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, ec) << name;
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(last_errc - first_errc + 1));
}

TEST(ErrorName, NamesTheErrcValuesAsTheirEnumerators) {
  EXPECT_STREQ(error_name(errc::busy), "busy");
  EXPECT_STREQ(error_name(errc::timed_out), "timed_out");
  EXPECT_STREQ(error_name(errc::lock_lost), "lock_lost");
  EXPECT_STREQ(error_name(errc::token_missing), "token_missing");
  EXPECT_STREQ(error_name(errc::lock_corrupt), "lock_corrupt");
  EXPECT_STREQ(error_name(errc::corrupt_data), "corrupt_data");
  EXPECT_STREQ(error_name(errc::bad_argument), "bad_argument");
  EXPECT_STREQ(error_name(errc::not_owner), "not_owner");
  EXPECT_STREQ(error_name(errc::server_error), "server_error");
  EXPECT_STREQ(error_name(errc::untrusted), "untrusted");
  EXPECT_STREQ(error_name(errc::backend_unavailable), "backend_unavailable");
  EXPECT_STREQ(error_name(errc::not_supported), "not_supported");
}

TEST(ErrorName, AnErrnoIsSystemWithTheErrnoGivenBesideIt) {
  for (int e : {EACCES, EPERM, ENOENT, ENOSPC, EIO, EOVERFLOW, EROFS, ELOOP, EINTR}) {
    EXPECT_STREQ(error_name(os_error(e)), "system") << e;
    EXPECT_STREQ(error_name(std::error_code(e, std::system_category())), "system") << e;
    const auto back = error_from_name("system", e);
    ASSERT_TRUE(back.has_value()) << e;
    EXPECT_EQ(*back, os_error(e));
    EXPECT_EQ(back->value(), e);
  }
  EXPECT_FALSE(error_from_name("system").has_value()) << "system needs its errno";
  EXPECT_FALSE(error_from_name("system", -1).has_value());
}

TEST(ErrorName, OutOfMemoryIsNoMemoryBothWays) {
  EXPECT_STREQ(error_name(os_error(ENOMEM)), "no_memory");
  const auto back = error_from_name("no_memory");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, std::errc::not_enough_memory);
}

TEST(ErrorName, NoErrorIsOkAndAForeignCategoryIsUnknown) {
  EXPECT_STREQ(error_name(std::error_code()), "ok");
  const auto ok = error_from_name("ok");
  ASSERT_TRUE(ok.has_value());
  EXPECT_FALSE(*ok);
  EXPECT_STREQ(error_name(std::make_error_code(std::future_errc::broken_promise)), "unknown");
  EXPECT_STREQ(error_name(std::error_code(0x7fff, tokenlock::error_category())), "unknown");
}

TEST(ErrorName, RefusesNamesThatNameNoCode) {
  for (const char* name : {"", "unknown", "aborted", "Busy", "busy ", "usage", "overflow"})
    EXPECT_FALSE(error_from_name(name).has_value()) << '"' << name << '"';
}

TEST(ErrorName, TheCInterfaceNamesItsCodesFromTheSameTable) {
  for (int v = first_errc; v <= last_errc; ++v)
    EXPECT_STREQ(tokenlock_strerror(v), error_name(static_cast<errc>(v))) << v;
  EXPECT_STREQ(tokenlock_strerror(TOKENLOCK_OK), "ok");
  EXPECT_STREQ(tokenlock_strerror(TOKENLOCK_ESYSTEM), error_name(os_error(EIO)));
  EXPECT_STREQ(tokenlock_strerror(TOKENLOCK_ENOMEM), error_name(os_error(ENOMEM)));
  EXPECT_STREQ(tokenlock_strerror(TOKENLOCK_EABORTED), "aborted");
  EXPECT_STREQ(tokenlock_strerror(9999), "unknown");
  EXPECT_STREQ(tokenlock_strerror(-1), "unknown");
}

}  // namespace
