// libFuzzer target for the tokenlock command's hand-written argument
// parsing. The input is a command line, arguments separated by NUL bytes.
//  - run's split at LOCKDIR: options, LOCKDIR and the command are consecutive
//    pieces of the arguments (nothing is dropped, reordered or altered, at
//    most one "--" between LOCKDIR and the command), LOCKDIR never starts
//    with '-' unless it follows "--", and the command is never looked into.
//  - --mode and --by: accepted exactly when a reference reading of the
//    digits accepts, with the same value.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "cli_fuzz: %s\n", what);
  std::abort();
}

// The reference: digits of `base`, value at most `limit`, long arithmetic.
bool reference(const std::string& s, unsigned base, unsigned __int128 limit,
               unsigned __int128& value) {
  if (s.empty()) return false;
  value = 0;
  for (char ch : s) {
    if (ch < '0' || ch >= static_cast<char>('0' + base)) return false;
    value = value * base + static_cast<unsigned>(ch - '0');
    if (value > limit) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0)
      args.emplace_back();
    else
      args.back().push_back(static_cast<char>(data[i]));
  }

  using tokenlock::cli::run_arguments;
  static const auto table = tokenlock::cli::run_options();
  const run_arguments r = tokenlock::cli::split_run_arguments(args, table);
  if (r.options.size() > args.size()) fail("more options than arguments");
  for (std::size_t i = 0; i < r.options.size(); ++i)
    if (r.options[i] != args[i]) fail("options are not a prefix of the arguments");
  const std::size_t at = r.options.size();
  if (at == args.size()) {
    if (!r.dir.empty() || !r.command.empty()) fail("LOCKDIR or a command after the last argument");
  } else {
    // An empty LOCKDIR argument is kept as it is; run then refuses it.
    if (args[at] != r.dir) fail("LOCKDIR does not follow the options");
    const bool after_dashes = !r.options.empty() && r.options.back() == "--";
    if (r.dir.size() > 1 && r.dir[0] == '-' && !after_dashes) fail("an option taken for LOCKDIR");
    std::size_t c = at + 1;
    if (c < args.size() && args[c] == "--") ++c;
    if (r.command.size() != args.size() - c) fail("the command is not the rest");
    for (std::size_t i = 0; i < r.command.size(); ++i)
      if (r.command[i] != args[c + i]) fail("the command was altered");
  }

  for (const std::string& a : args) {
    unsigned __int128 ref = 0;
    const auto mode = tokenlock::cli::parse_mode(a);
    if (reference(a, 8, 07777, ref) != mode.has_value() || (mode && *mode != ref))
      fail("--mode disagrees with the reference");
    const auto count = tokenlock::cli::parse_unsigned(a);
    if (reference(a, 10, UINT64_MAX, ref) != count.has_value() || (count && *count != ref))
      fail("--by disagrees with the reference");
  }
  return 0;
}
