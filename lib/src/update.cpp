#include "tokenlock/update.hpp"

#include <cerrno>
#include <charconv>
#include <exception>
#include <optional>

#include "tokenlock/keep_alive.hpp"

#include "file_writer.hpp"
#include "update_impl.hpp"

namespace tokenlock {

using namespace detail;

namespace detail {

namespace {

failure lost_before_commit(const write_target& t, const std::string& token) {
  return make_failure(errc::lock_lost,
                      describe("commit", t.path,
                               "the lock was taken over before the commit (our token " + token +
                                   " is gone: our lease ended or we were judged dead); nothing "
                                   "was written and the new owner's data is intact",
                               {}));
}

// The fenced commit: temp file in the token directory's subdirectory
// `w`, renamed over the target through the token's path; the caller
// flushes the directory. Sets `cross_device` (and writes nothing) when the
// rename reports EXDEV (bind mounts share a device number).
//
// Why a subdirectory: ext4 without a journal makes an fsync of a newly
// linked file also write its directory, and that directory's parent if it
// was itself just linked, and so on up. The token directory is renamed at
// every acquire, so a temp file directly in it made each flush write the
// lock directory's block too. `w` is made once and never renamed, so the
// walk stops there: one synchronous write less per update, what a temp
// file beside the target costs (docs/atomic-writes.md, update_file and
// increment_counter). The path still runs through the token's name, so
// the fence is the same. A takeover clears `w` with the rest of the
// workspace; the next update makes it again, with the lock's dir_mode.
failure fenced_commit(os& sys, const lock_handle& h, const write_target& t,
                      const std::string& contents, const write_options& options,
                      unsigned dir_mode, bool& cross_device) {
  cross_device = false;
  const std::string token_dir = h.path().string();
  const std::string workspace = token_dir + "/w";
  temp_file tmp;
  bool made_workspace = false;
  failure f = write_temp(sys, t, workspace, contents, options, tmp);
  file_status st;
  if (f && f.code == std::errc::no_such_file_or_directory && !sys.status(token_dir, st) &&
      sys.status(workspace, st) == std::errc::no_such_file_or_directory) {
    if (auto ec = sys.make_directory(workspace, dir_mode))
      return write_failure("create", t, "cannot create the workspace " + workspace, ec);
    made_workspace = true;
    f = write_temp(sys, t, workspace, contents, options, tmp);
  }
  // A failed update leaves nothing behind, not even a workspace it made.
  auto undo_workspace = [&] {
    if (made_workspace) sys.remove_directory(workspace);
  };
  if (f) {
    undo_workspace();
    if (f.code == std::errc::no_such_file_or_directory && sys.status(token_dir, st))
      return lost_before_commit(t, h.token());
    return f;
  }
  std::error_code ec = sys.rename(tmp.path, t.path);
  if (ec == std::errc::cross_device_link) {
    sys.remove_file(tmp.path);
    undo_workspace();
    cross_device = true;
    return {};
  }
  if (ec) {
    sys.remove_file(tmp.path);  // gone with the token when the lock was lost
    undo_workspace();
    if (ec == std::errc::no_such_file_or_directory && sys.status(token_dir, st))
      return lost_before_commit(t, h.token());
    return write_failure("rename", t, "cannot rename " + tmp.path + " over the target", ec);
  }
  return {};
}

// Lock and target on different filesystems: temp beside the target, and
// a refresh rename just before the commit proves we still hold the lock.
failure unfenced_commit(os& sys, lock_handle& h, const write_target& t,
                        const std::string& contents, const write_options& options) {
  temp_file tmp;
  if (failure f = write_temp(sys, t, t.dir, contents, options, tmp)) return f;
  std::error_code ec;
  const std::string token = h.token();
  h.refresh(ec);
  if (ec) {
    abandon(sys, tmp);
    if (ec == errc::lock_lost) return lost_before_commit(t, token);
    return make_failure(ec, last_error_message());
  }
  return commit_temp(sys, tmp.path, t, options);
}

// Runs `compute`, refreshing the lease meanwhile when `keep` is set. A
// takeover during the computation fails the update before anything is
// written; other refresh errors are left to the commit's fence to judge.
failure compute_keeping(lock_handle& h, const write_target& t, const compute_function& compute,
                        const std::optional<std::string>& current, std::string& next,
                        bool keep) {
  if (!keep) return compute(current, next);
  std::optional<keep_alive> keeper;
  try {
    keeper.emplace(h);
  } catch (const std::system_error& e) {
    return make_failure(e.code(), describe("keep the lease alive", t.path,
                                           std::string(e.what()) + "; nothing was written", {}));
  }
  failure f = compute(current, next);
  keeper->stop();
  if (f) return f;
  if (keeper->lost())
    return make_failure(errc::lock_lost,
                        describe("commit", t.path,
                                 "the lock was taken over while the update function ran (" +
                                     keeper->last_message() +
                                     "); nothing was written and the new owner's data is intact",
                                 {}));
  return {};
}

}  // namespace

failure update_impl(os& sys, const boost::filesystem::path& target, const rename_lock& lock,
                    const compute_function& compute, const update_options& options,
                    update_result& result) {
  result = update_result{};
  std::error_code ec;
  lock_handle h = lock.acquire(ec);
  if (ec) return make_failure(ec, last_error_message());

  write_target t;
  if (failure f = resolve_target(sys, target, options.write, t)) return f;
  // Temporary files of this target left by writers that crashed (the
  // unfenced path writes beside the target); anything older than a lease
  // cannot belong to a live writer that holds this lock.
  if (options.sweep_every > 0 && sys.random_u64() % options.sweep_every == 0) {
    std::size_t swept = 0;
    sweep_impl(sys, t.dir,
               std::chrono::duration_cast<std::chrono::microseconds>(lock.options().lease), swept,
               t.name);
  }

  // The version we replace stays open until we return, after the release:
  // its last close then frees its blocks outside the lock. Freed inside the
  // commit's rename, they held the lock for most of an update where freeing
  // is slow: large files, or ext4 without a journal and mounted with
  // `discard`, where the rename waited for a synchronous discard
  // (docs/atomic-writes.md, update_file and increment_counter).
  struct close_later {
    os& sys;
    int fd = -1;
    ~close_later() {
      if (fd >= 0) sys.close(fd);
    }
  } replaced{sys};
  std::optional<std::string> current;
  if (failure f = read_file_impl(sys, t.path, current, &replaced.fd)) return f;
  std::string next;
  if (failure f = compute_keeping(h, t, compute, current, next, options.keep_alive)) return f;

  file_status workspace;
  if (auto sec = sys.status(h.path().string(), workspace)) {
    if (sec == std::errc::no_such_file_or_directory) return lost_before_commit(t, h.token());
    return make_failure(sec, describe("commit", t.path, "cannot look at the lock's token " +
                                                           h.path().string(), sec));
  }
  // The directory is flushed after the release: the flush makes the update
  // durable before update_file returns, and the next holder's update
  // (which contains this one) need not wait for it. The file itself is
  // flushed before its rename, under the lock.
  write_options in_lock = options.write;
  if (in_lock.sync == durability::file_and_dir) in_lock.sync = durability::file;
  bool cross_device = workspace.device != t.dir_device;
  if (!cross_device) {
    if (failure f = fenced_commit(sys, h, t, next, in_lock, lock.options().dir_mode, cross_device))
      return f;
  }
  if (cross_device) {
    if (options.require_fence)
      return make_failure(errc::not_fenced,
                          describe("commit", t.path,
                                   "the lock directory " + lock.directory().string() +
                                       " and the target are on different filesystems, so the "
                                       "commit cannot be fenced; nothing was written: put the "
                                       "lock directory beside the file",
                                   {}));
    result.fenced = false;
    if (failure f = unfenced_commit(sys, h, t, next, in_lock)) return f;
  }
  // Committed. A failed release cannot undo that, and reporting it would
  // invite a retry that applies the update twice; the handle's destructor
  // tries once more.
  h.release(ec);
  if (options.write.sync == durability::file_and_dir) {
    if (auto sec = sys.sync_directory(t.dir))
      return make_failure(
          errc::dir_sync_failed,
          describe("sync", t.path,
                   "the update is committed, but flushing the directory " + t.dir + " failed (" +
                       sec.message() + "): a crash may undo it; do not repeat the update",
                   {}));
  }
  return {};
}

failure parse_counter(const std::string& path, const std::optional<std::string>& text,
                      std::optional<std::uint64_t>& value) {
  value.reset();
  if (!text) return {};
  const std::string& s = *text;
  bool ok = s.size() >= 2 && s.size() <= 21 && s.back() == '\n' && (s[0] != '0' || s.size() == 2);
  std::uint64_t v = 0;
  if (ok) {
    for (size_t i = 0; i + 1 < s.size(); ++i) ok = ok && s[i] >= '0' && s[i] <= '9';
    if (ok) {
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size() - 1, v);
      ok = ec == std::errc() && p == s.data() + s.size() - 1;
    }
  }
  if (!ok) {
    std::string shown;
    for (char c : s.substr(0, 24)) {
      if (c >= 0x20 && c < 0x7f) {
        shown += c;
      } else {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
        shown += buf;
      }
    }
    if (s.size() > 24) shown += "...";
    return make_failure(errc::corrupt_data,
                        describe("read counter", path,
                                 "the file does not hold one unsigned decimal and a newline "
                                 "(it holds \"" +
                                     shown + "\", " + std::to_string(s.size()) +
                                     " bytes); it was left as it is: repair or remove it by hand",
                                 {}));
  }
  value = v;
  return {};
}

}  // namespace detail

namespace {

// Runs an update; an exception thrown by the caller's function is carried
// past the lock's release and rethrown.
template <class Run>
failure with_user_function(const update_function& fn, Run run) {
  std::exception_ptr thrown;
  compute_function compute = [&](const std::optional<std::string>& current,
                                 std::string& next) -> failure {
    try {
      next = fn(current);
    } catch (...) {
      thrown = std::current_exception();
      return make_failure(errc::bad_argument, "tokenlock: the update function threw");
    }
    return {};
  };
  failure f = run(compute);
  if (thrown) std::rethrow_exception(thrown);
  return f;
}

compute_function counter_step(const std::string& path, std::uint64_t by, std::uint64_t& out) {
  return [&out, path, by](const std::optional<std::string>& current, std::string& next) -> failure {
    std::optional<std::uint64_t> v;
    if (failure f = parse_counter(path, current, v)) return f;
    const std::uint64_t old = v.value_or(0);
    if (by > UINT64_MAX - old)
      return make_failure(std::make_error_code(std::errc::value_too_large),
                          describe("increment", path,
                                   "adding " + std::to_string(by) + " to " + std::to_string(old) +
                                       " would overflow 64 bits; the counter was left as it is",
                                   {}));
    out = old + by;
    next = std::to_string(out) + "\n";
    return {};
  };
}

}  // namespace

update_result update_file(const boost::filesystem::path& target, const rename_lock& lock,
                          const update_function& fn, const update_options& options) {
  update_result r;
  failure f = with_user_function(fn, [&](const compute_function& c) {
    return update_impl(*system_os(), target, lock, c, options, r);
  });
  if (f) throw_failure(f);
  return r;
}

update_result update_file(const boost::filesystem::path& target, const rename_lock& lock,
                          const update_function& fn, const update_options& options,
                          std::error_code& ec) {
  update_result r;
  failure f = with_user_function(fn, [&](const compute_function& c) {
    failure inner;
    run_noexcept(ec, [&] {
      inner = update_impl(*system_os(), target, lock, c, options, r);
      return inner;
    });
    return inner;
  });
  (void)f;
  return r;
}

std::uint64_t increment_counter(const boost::filesystem::path& file, const rename_lock& lock,
                                std::uint64_t by, const update_options& options) {
  std::uint64_t value = 0;
  update_result r;
  run_throwing([&] {
    return update_impl(*system_os(), file, lock, counter_step(file.string(), by, value), options, r);
  });
  return value;
}

std::uint64_t increment_counter(const boost::filesystem::path& file, const rename_lock& lock,
                                std::uint64_t by, const update_options& options,
                                std::error_code& ec) noexcept {
  std::uint64_t value = 0;
  update_result r;
  run_noexcept(ec, [&] {
    return update_impl(*system_os(), file, lock, counter_step(file.string(), by, value), options, r);
  });
  // After dir_sync_failed the new value is committed: hand it out too.
  return !ec || ec == errc::dir_sync_failed ? value : 0;
}

std::optional<std::uint64_t> read_counter(const boost::filesystem::path& file) {
  std::optional<std::uint64_t> v;
  run_throwing([&] {
    std::optional<std::string> text;
    if (failure f = read_file_impl(*system_os(), file.string(), text)) return f;
    return parse_counter(file.string(), text, v);
  });
  return v;
}

std::optional<std::uint64_t> read_counter(const boost::filesystem::path& file,
                                          std::error_code& ec) noexcept {
  std::optional<std::uint64_t> v;
  run_noexcept(ec, [&] {
    std::optional<std::string> text;
    if (failure f = read_file_impl(*system_os(), file.string(), text)) return f;
    return parse_counter(file.string(), text, v);
  });
  if (ec) v.reset();
  return v;
}

}  // namespace tokenlock
