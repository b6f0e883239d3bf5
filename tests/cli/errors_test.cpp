// The command's errors for programs: --errors=json (and TOKENLOCK_ERRORS)
// ends a failure's report with one JSON line naming the error, and every
// malformed argument is a usage error, exit 64, that changes nothing.
#include <gtest/gtest.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include <sys/stat.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "child.hpp"
#include "cli.hpp"
#include "commands.hpp"
#include "inspect.hpp"
#include "temp_dir.hpp"

namespace fs = boost::filesystem;
using tokenlock::testing::command_result;
using tokenlock::testing::run_command;
using tokenlock::testing::slurp;
using tokenlock::testing::snapshot;
using tokenlock::testing::spit;
using tokenlock::testing::temp_dir;
namespace code = tokenlock::cli::exit_code;

namespace {

const std::string tool = TOKENLOCK_CLI_PATH;

// A JSON object of strings and integers, as the error line is: enough of
// JSON to check the line, strict about everything it reads.
class flat_json {
 public:
  static std::optional<std::map<std::string, std::string>> parse(const std::string& s) {
    flat_json p{s};
    std::map<std::string, std::string> out;
    if (!p.eat('{')) return std::nullopt;
    if (p.eat('}')) {
      if (!p.at_end()) return std::nullopt;
      return out;
    }
    do {
      auto key = p.string();
      if (!key || !p.eat(':')) return std::nullopt;
      auto value = p.peek() == '"' ? p.string() : p.integer();
      if (!value || out.count(*key)) return std::nullopt;
      out[*key] = *value;
    } while (p.eat(','));
    if (!p.eat('}') || !p.at_end()) return std::nullopt;
    return out;
  }

 private:
  explicit flat_json(const std::string& s) : s_(s) {}
  void skip() {
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
  }
  char peek() {
    skip();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  bool eat(char c) {
    if (peek() != c) return false;
    ++i_;
    return true;
  }
  bool at_end() {
    skip();
    return i_ == s_.size();
  }
  std::optional<std::string> integer() {
    std::string digits;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || (digits.empty() && s_[i_] == '-')))
      digits += s_[i_++];
    if (digits.empty() || digits == "-") return std::nullopt;
    return digits;
  }
  std::optional<std::string> string() {
    if (!eat('"')) return std::nullopt;
    std::string out;
    while (i_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) return std::nullopt;  // raw control bytes are not JSON
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i_ >= s_.size()) return std::nullopt;
      const char e = s_[i_++];
      if (e == '"' || e == '\\' || e == '/') out += e;
      else if (e == 'n') out += '\n';
      else if (e == 't') out += '\t';
      else if (e == 'u' && i_ + 4 <= s_.size()) {
        out += static_cast<char>(std::stoi(s_.substr(i_, 4), nullptr, 16));
        i_ += 4;
      } else return std::nullopt;
    }
    return std::nullopt;
  }
  const std::string& s_;
  std::size_t i_ = 0;
};

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

class ErrorsTest : public ::testing::Test {
 protected:
  temp_dir tmp;
  std::string lock = (tmp / "job.lock").string();

  command_result tl(std::vector<std::string> args, const std::string& input = {}) {
    args.insert(args.begin(), tool);
    return run_command(args, input);
  }
  command_result tl_json(std::vector<std::string> args, const std::string& input = {}) {
    args.insert(args.begin(), "--errors=json");
    return tl(std::move(args), input);
  }
  // The fields of stderr's last line, which must be the JSON error line,
  // and its message must be the line printed just before it.
  std::map<std::string, std::string> error_line(const command_result& r) {
    const auto all = lines(r.err);
    EXPECT_GE(all.size(), 2u) << r.err;
    if (all.size() < 2) return {};
    const auto fields = flat_json::parse(all.back());
    EXPECT_TRUE(fields.has_value()) << "not a JSON object: " << all.back();
    if (!fields) return {};
    EXPECT_EQ(fields->size(), 3u) << all.back();
    EXPECT_EQ(fields->count("error"), 1u) << all.back();
    EXPECT_EQ(fields->count("errno"), 1u) << all.back();
    EXPECT_EQ(fields->count("message"), 1u) << all.back();
    return *fields;
  }
  std::string hold() {
    auto r = tl({"acquire", "--pid", std::to_string(::getpid()), lock});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string token = r.out;
    while (!token.empty() && token.back() == '\n') token.pop_back();
    return token;
  }
};

TEST_F(ErrorsTest, ABusyLockEndsWithTheJsonLineNamingBusy) {
  const std::string token = hold();
  auto r = tl_json({"acquire", "-n", "--pid", std::to_string(::getpid()), lock});
  EXPECT_EQ(r.exit_code, code::busy);
  auto f = error_line(r);
  EXPECT_EQ(f["error"], "busy");
  EXPECT_EQ(f["errno"], "0");
  EXPECT_EQ(f["message"], lines(r.err).front()) << r.err;
  EXPECT_NE(f["message"].find(lock), std::string::npos) << f["message"];
  EXPECT_EQ(tokenlock::testing::entries(lock), std::vector<std::string>{token}) << "still held";
}

TEST_F(ErrorsTest, AWaitThatRunsOutIsTimedOutWithTheSameExitStatus) {
  hold();
  auto r = tl_json({"acquire", "-w", "0.2", "--pid", std::to_string(::getpid()), lock});
  EXPECT_EQ(r.exit_code, code::busy);
  EXPECT_EQ(error_line(r)["error"], "timed_out");
}

TEST_F(ErrorsTest, TheEnvironmentTurnsJsonOnAndACorruptCounterIsCorruptData) {
  const fs::path c = tmp / "hits";
  spit(c, "abc\n");
  ASSERT_EQ(::setenv("TOKENLOCK_ERRORS", "json", 1), 0);
  auto r = tl({"incr", c.string()});
  ::unsetenv("TOKENLOCK_ERRORS");
  EXPECT_EQ(r.exit_code, code::data);
  auto f = error_line(r);
  EXPECT_EQ(f["error"], "corrupt_data");
  EXPECT_EQ(f["errno"], "0");
  EXPECT_EQ(slurp(c), "abc\n") << "left as it was";
}

TEST_F(ErrorsTest, ASystemErrorCarriesItsErrno) {
  const fs::path f = tmp / "missing" / "file";
  auto r = tl_json({"write", f.string()}, "x");
  EXPECT_EQ(r.exit_code, code::no_input);
  auto fields = error_line(r);
  EXPECT_EQ(fields["error"], "system");
  EXPECT_EQ(fields["errno"], std::to_string(ENOENT));
  EXPECT_NE(fields["message"].find(f.string()), std::string::npos) << fields["message"];
  EXPECT_FALSE(fs::exists(tmp / "missing"));
}

TEST_F(ErrorsTest, AnOverflowIsASystemErrorWithEoverflow) {
  const fs::path c = tmp / "hits";
  spit(c, "18446744073709551615\n");
  auto r = tl_json({"incr", c.string()});
  EXPECT_EQ(r.exit_code, code::data);
  auto f = error_line(r);
  EXPECT_EQ(f["error"], "system");
  EXPECT_EQ(f["errno"], std::to_string(EOVERFLOW));
  EXPECT_EQ(slurp(c), "18446744073709551615\n");
}

TEST_F(ErrorsTest, AForeignTokenIsLockLost) {
  hold();
  const std::string other = (tmp / "other.lock").string();
  auto a = tl({"acquire", "--pid", std::to_string(::getpid()), other});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  std::string foreign = a.out.substr(0, a.out.find('\n'));
  auto r = tl_json({"release", lock, foreign});
  EXPECT_EQ(r.exit_code, code::lost);
  EXPECT_EQ(error_line(r)["error"], "lock_lost");
}

TEST_F(ErrorsTest, AUsageErrorIsBadArgumentAndTheLineIsStillLast) {
  auto r = tl_json({"acquire", "--lease", "0", lock});
  EXPECT_EQ(r.exit_code, code::usage);
  auto f = error_line(r);
  EXPECT_EQ(f["error"], "bad_argument");
  EXPECT_EQ(f["errno"], "0");
  EXPECT_EQ(f["message"], lines(r.err).front());
  EXPECT_FALSE(fs::exists(lock));
}

TEST_F(ErrorsTest, TheMessageIsEscapedAsPrintedAndThenAsJson) {
  // A quote, a backslash and a newline in the path: the text line shows
  // the newline as \x0a; JSON then escapes the quote and the backslashes.
  const fs::path dir = tmp / "we\"ird\\na\nme";
  const fs::path f = dir / "file";
  auto r = tl_json({"write", f.string()}, "x");
  EXPECT_EQ(r.exit_code, code::no_input);
  const auto all = lines(r.err);
  ASSERT_EQ(all.size(), 2u) << r.err;
  EXPECT_NE(all.back().find("we\\\"ird\\\\na\\\\x0ame"), std::string::npos) << all.back();
  auto fields = error_line(r);
  EXPECT_EQ(fields["message"], all.front());
  EXPECT_NE(fields["message"].find("we\"ird\\na\\x0ame"), std::string::npos) << fields["message"];
}

TEST_F(ErrorsTest, WithoutJsonNoJsonLineIsPrinted) {
  hold();
  auto r = tl({"acquire", "-n", "--pid", std::to_string(::getpid()), lock});
  EXPECT_EQ(r.exit_code, code::busy);
  EXPECT_EQ(r.err.find("{\"error\""), std::string::npos) << r.err;
  ASSERT_EQ(::setenv("TOKENLOCK_ERRORS", "text", 1), 0);
  r = tl({"acquire", "-n", "--pid", std::to_string(::getpid()), lock});
  ::unsetenv("TOKENLOCK_ERRORS");
  EXPECT_EQ(r.err.find("{\"error\""), std::string::npos) << r.err;
}

TEST_F(ErrorsTest, RunPassesTheCommandsFailureOnWithoutAJsonLine) {
  auto r = tl_json({"run", lock, "--", "/bin/sh", "-c", "echo own words >&2; exit 7"});
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.err, "own words\n");
}

TEST_F(ErrorsTest, AQuietlyBusyRunStillSaysBusyInJson) {
  hold();
  auto r = tl_json({"run", "-n", lock, "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, code::busy);
  const auto all = lines(r.err);
  ASSERT_EQ(all.size(), 1u) << "quiet as flock(1), but for the JSON line: " << r.err;
  const auto f = flat_json::parse(all.back());
  ASSERT_TRUE(f.has_value()) << all.back();
  EXPECT_EQ(f->at("error"), "busy");
}

TEST_F(ErrorsTest, AnUnknownErrorFormatIsAUsageError) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--errors=yaml", "status", lock},
        std::vector<std::string>{"--errors=", "status", lock},
        std::vector<std::string>{"--errors"}}) {
    auto r = tl(args);
    EXPECT_EQ(r.exit_code, code::usage) << args[0] << r.err;
    EXPECT_NE(r.err.find("--errors takes text or json"), std::string::npos) << r.err;
  }
  ASSERT_EQ(::setenv("TOKENLOCK_ERRORS", "xml", 1), 0);
  auto r = tl({"status", lock});
  ::unsetenv("TOKENLOCK_ERRORS");
  EXPECT_EQ(r.exit_code, code::usage) << r.err;
  EXPECT_NE(r.err.find("TOKENLOCK_ERRORS takes text or json"), std::string::npos) << r.err;
  // The option after the environment wins, and "--errors json" works too.
  ASSERT_EQ(::setenv("TOKENLOCK_ERRORS", "json", 1), 0);
  r = tl({"--errors", "text", "status", "--no-such-option", lock});
  ::unsetenv("TOKENLOCK_ERRORS");
  EXPECT_EQ(r.exit_code, code::usage);
  EXPECT_EQ(r.err.find("{\"error\""), std::string::npos) << r.err;
}

TEST_F(ErrorsTest, EveryMalformedArgumentIsAUsageErrorThatChangesNothing) {
  const std::string token = hold();
  const fs::path c = tmp / "c";
  spit(c, "5\n");
  const auto before = snapshot(tmp.path());
  const std::string f = (tmp / "f").string();
  const std::vector<std::vector<std::string>> bad = {
      {"acquire", "--lease", "0", lock},
      {"acquire", "--lease", "1e-9", lock},
      {"acquire", "--lease", "-1", lock},
      {"acquire", "--lease", "nan", lock},
      {"acquire", "--lease", "1e12", lock},
      {"acquire", "--lease", "ten", lock},
      {"acquire", "-w", "-1", lock},
      {"acquire", "-w", "soon", lock},
      {"acquire", "--pid", "x", lock},
      {"acquire", "--dir-mode", "9", lock},
      {"acquire", "--dir-mode", "0777", lock},
      {"acquire", "--legacy-timeout", "0", lock},
      {"run", "-E", "256", lock, "true"},
      {"refresh", "--lease", "0", lock, token},
      {"release", lock, "lockfile"},
      {"release", lock, "../../etc/passwd"},
      {"release", lock, ""},
      {"refresh", lock, "lockfile.1.x.y.z"},
      {"break", lock, "nonsense"},
      {"incr", "--by", "abc", c.string()},
      {"incr", "--by", "18446744073709551616", c.string()},
      {"incr", "--by", "-1", c.string()},
      {"write", "--mode", "8", f},
      {"write", "--sync", "sometimes", f},
      {"write", f + "/"},
      {"acquire", ""},
  };
  for (const auto& args : bad) {
    std::string line;
    for (const auto& a : args) line += "'" + a + "' ";
    auto r = tl_json(args, "x");
    EXPECT_EQ(r.exit_code, code::usage) << line << r.err;
    EXPECT_EQ(error_line(r)["error"], "bad_argument") << line << r.err;
  }
  EXPECT_EQ(snapshot(tmp.path()), before);
  EXPECT_EQ(slurp(c), "5\n");
}

TEST_F(ErrorsTest, ADoctorThatCannotCheckEndsWithTheJsonLineNamingTheCause) {
  const std::string missing = (tmp / "missing").string();
  auto r = tl_json({"doctor", missing});
  EXPECT_EQ(r.exit_code, code::no_input);
  auto f = error_line(r);
  EXPECT_EQ(f["error"], "system");
  EXPECT_EQ(f["errno"], std::to_string(ENOENT));
  EXPECT_EQ(f["message"], lines(r.err).front()) << r.err;
  EXPECT_NE(f["message"].find("DIR " + missing + " does not exist"), std::string::npos)
      << f["message"];
  EXPECT_FALSE(fs::exists(missing));
}

TEST_F(ErrorsTest, ADoctorThatFindsAFailedPropertyNamesItInTheJsonLineOnly) {
  const fs::path dir = tmp / "share";
  fs::create_directories(dir);
  // No file may grow beyond 0 bytes (SIGXFSZ ignored, so write(2) fails
  // with EFBIG): the checks that write fail.
  const std::string doctor = "trap '' XFSZ; ulimit -f 0; exec '" + tool + "' " +
                             "\"$@\" doctor '" + dir.string() + "'";
  auto r = run_command({"/bin/sh", "-c", doctor, "sh", "--errors=json"});
  EXPECT_EQ(r.exit_code, code::check_failed) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL  fsync of a file: "), std::string::npos) << "the findings, as always: "
                                                                     << r.out;
  const auto all = lines(r.err);
  ASSERT_EQ(all.size(), 1u) << "nothing on stderr but the JSON line: " << r.err;
  const auto f = flat_json::parse(all.back());
  ASSERT_TRUE(f.has_value()) << all.back();
  EXPECT_EQ(f->at("error"), "system");
  EXPECT_EQ(f->at("errno"), "0");
  const std::string& m = f->at("message");
  EXPECT_EQ(m.rfind("tokenlock doctor: " + dir.string() + ": ", 0), 0u) << m;
  EXPECT_NE(m.find(" properties failed: "), std::string::npos) << m;
  EXPECT_NE(m.find("fsync of a file"), std::string::npos) << m;
  EXPECT_EQ(m.find("exclusive create"), std::string::npos) << "a property that passed: " << m;
  EXPECT_TRUE(tokenlock::testing::entries(dir).empty()) << "the scratch directory is removed";
  // Without --errors=json, stderr stays as it was: empty.
  r = run_command({"/bin/sh", "-c", doctor, "sh"});
  EXPECT_EQ(r.exit_code, code::check_failed);
  EXPECT_EQ(r.err, "");
}

// The command built without Redis and etcd (its commands compiled into this
// test with an open_lock that has neither, tokenlock_add_open): every
// command that takes --redis or --etcd says which build option adds the
// backend, exits 69, and names backend_unavailable in JSON. Called in this
// process, since the command built here has the backends.
TEST(ErrorsWithoutRedis, EveryServerFormSaysTheBackendIsMissingAndNamesItInJson) {
  namespace cli = tokenlock::cli;
  for (const auto& [option, url, missing] :
       {std::tuple{"--redis", "redis://localhost", "no Redis backend; build it with -DTOKENLOCK_REDIS=ON"},
        std::tuple{"--etcd", "etcd://localhost", "no etcd backend; build it with -DTOKENLOCK_ETCD=ON"}}) {
    const std::vector<std::pair<int (*)(const cli::args&), cli::args>> forms = {
        {cli::cmd_acquire, {option, url, "-n", "job"}},
        {cli::cmd_release, {option, url, "job", "1.owner"}},
        {cli::cmd_refresh, {option, url, "job", "1.owner"}},
        {cli::cmd_status, {option, url, "job"}},
        {cli::cmd_break, {option, url, "job", "1.owner"}},
        {cli::cmd_run, {option, url, "-n", "job", "true"}},
        {cli::cmd_write, {option, url, "--lock", "job", "/nonexistent/never-written"}},
        {cli::cmd_incr, {option, url, "--lock", "job", "/nonexistent/never-written"}},
        {cli::cmd_commit, {option, url, "job", "1.owner", "/nonexistent/never-written"}},
    };
    cli::set_error_format(cli::error_format::json);
    for (std::size_t i = 0; i < forms.size(); ++i) {
      std::ostringstream err;
      std::streambuf* const stderr_was = std::cerr.rdbuf(err.rdbuf());
      const int status = forms[i].first(forms[i].second);
      cli::print_noted_failure();
      std::cerr.rdbuf(stderr_was);
      EXPECT_EQ(status, code::unavailable) << url << " form " << i;
      const auto all = lines(err.str());
      ASSERT_EQ(all.size(), 2u) << err.str();
      EXPECT_NE(all.front().find(missing), std::string::npos) << all.front();
      const auto f = flat_json::parse(all.back());
      ASSERT_TRUE(f.has_value()) << all.back();
      EXPECT_EQ(f->at("error"), "backend_unavailable");
      EXPECT_EQ(f->at("message"), all.front());
    }
    EXPECT_FALSE(boost::filesystem::exists("/nonexistent/never-written"));
  }
  cli::set_error_format(cli::error_format::text);
}

}  // namespace
