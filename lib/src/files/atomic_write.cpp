#include "tokenlock/atomic_write.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <streambuf>
#include <vector>

#include "files/file_writer.hpp"
#include "files/atomic_write_impl.hpp"

namespace tokenlock {

using namespace detail;

namespace detail {

failure atomic_write_impl(os& sys, const boost::filesystem::path& target, std::string_view data,
                          const write_options& options) {
  write_target t;
  if (failure f = resolve_target(sys, target, options, t)) return f;
  temp_file tmp;
  if (failure f = write_temp(sys, t, t.dir, data, options, tmp)) return f;
  return commit_temp(sys, tmp.path, t, options);
}

}  // namespace detail

std::optional<durability> durability_from_name(std::string_view name) noexcept {
  for (durability d : {durability::none, durability::file, durability::file_and_dir})
    if (name == durability_name(d)) return d;
  return std::nullopt;
}

const char* durability_name(durability level) noexcept {
  switch (level) {
    case durability::none: return "none";
    case durability::file: return "file";
    case durability::file_and_dir: return "file_and_dir";
  }
  return "file_and_dir";
}

void atomic_write(const boost::filesystem::path& target, std::string_view data,
                  const write_options& options) {
  run_throwing([&] { return atomic_write_impl(*system_os(), target, data, options); });
}

void atomic_write(const boost::filesystem::path& target, std::string_view data,
                  const write_options& options, std::error_code& ec) noexcept {
  run_noexcept(ec, [&] { return atomic_write_impl(*system_os(), target, data, options); });
}

// ---- atomic_file -------------------------------------------------------------

struct atomic_file::impl {
  // Buffers stream output and hands it to write() in large pieces; the
  // first error is kept for commit() to report.
  class stream_buf final : public std::streambuf {
   public:
    explicit stream_buf(impl& owner) : owner_(owner), buffer_(64 * 1024) {
      setp(buffer_.data(), buffer_.data() + buffer_.size());
    }
    int_type overflow(int_type ch) override {
      if (!drain()) return traits_type::eof();
      if (!traits_type::eq_int_type(ch, traits_type::eof())) {
        *pptr() = traits_type::to_char_type(ch);
        pbump(1);
      }
      return traits_type::not_eof(ch);
    }
    int sync() override { return drain() ? 0 : -1; }

   private:
    bool drain() {
      const std::size_t n = static_cast<std::size_t>(pptr() - pbase());
      if (n == 0) return true;
      setp(buffer_.data(), buffer_.data() + buffer_.size());
      if (owner_.stream_error) return false;
      failure f = owner_.write_data(std::string_view(buffer_.data(), n));
      if (f) {
        owner_.stream_error = std::move(f);
        return false;
      }
      return true;
    }
    impl& owner_;
    std::vector<char> buffer_;
  };

  std::shared_ptr<os> sys;
  write_options options;
  write_target target;
  temp_file tmp;
  boost::filesystem::path target_path, temp_path;
  enum { open, done } state = open;
  failure stream_error;
  std::unique_ptr<stream_buf> buf;
  std::unique_ptr<std::ostream> out;

  failure start(const boost::filesystem::path& p) {
    if (failure f = resolve_target(*sys, p, options, target)) return f;
    if (failure f = create_temp(*sys, target, target.dir, options, tmp)) return f;
    target_path = target.path;
    temp_path = tmp.path;
    return {};
  }

  // write(): text given to stream() first, so that both keep their order.
  failure write(std::string_view data) {
    if (out && state == open) out->flush();
    if (stream_error) {
      failure f = std::move(stream_error);
      stream_error = {};
      return f;
    }
    return write_data(data);
  }

  failure write_data(std::string_view data) {
    if (state != open)
      return make_failure(errc::bad_argument,
                          describe("write", target.path, "the atomic_file is already finished", {}));
    failure f = write_all(*sys, tmp, data, target);
    if (f) fail();
    return f;
  }

  failure commit() {
    if (out && state == open) out->flush();
    // A write through stream() that failed has already ended the file; its
    // error is what commit reports (once).
    if (stream_error) {
      failure f = std::move(stream_error);
      stream_error = {};
      fail();
      return f;
    }
    if (state != open)
      return make_failure(errc::bad_argument,
                          describe("commit", target.path, "the atomic_file is already finished", {}));
    if (failure f = finish_temp(*sys, tmp, options, target)) {
      fail();
      return f;
    }
    state = done;
    return commit_temp(*sys, tmp.path, target, options);
  }

  void fail() noexcept {
    abandon(*sys, tmp);
    state = done;
  }
};

atomic_file::atomic_file(const boost::filesystem::path& target, const write_options& options)
    : atomic_file(detail::file_access::start(target, options, system_os())) {}

atomic_file::atomic_file(std::unique_ptr<impl> started) noexcept : impl_(std::move(started)) {}

namespace detail {

std::unique_ptr<atomic_file::impl> file_access::start(const boost::filesystem::path& target,
                                                      const write_options& options,
                                                      std::shared_ptr<os> sys) {
  auto started = std::make_unique<atomic_file::impl>();
  started->sys = sys ? std::move(sys) : system_os();
  started->options = options;
  if (failure f = started->start(target)) throw_failure(f);
  return started;
}

atomic_file file_access::with_os(const boost::filesystem::path& target,
                                 const write_options& options, std::shared_ptr<os> sys) {
  return atomic_file(start(target, options, std::move(sys)));
}

}  // namespace detail

atomic_file::atomic_file(const boost::filesystem::path& target, const write_options& options,
                         std::error_code& ec) noexcept {
  run_noexcept(ec, [&] {
    impl_ = std::make_unique<impl>();
    impl_->sys = system_os();
    impl_->options = options;
    failure f = impl_->start(target);
    if (f) impl_.reset();
    return f;
  });
  if (ec) impl_.reset();
}

atomic_file::atomic_file(atomic_file&&) noexcept = default;

atomic_file& atomic_file::operator=(atomic_file&& other) noexcept {
  if (this != &other) {
    rollback();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

atomic_file::~atomic_file() { rollback(); }

namespace {
failure empty_failure(const char* step) {
  return make_failure(errc::bad_argument,
                      std::string("tokenlock: ") + step + ": the atomic_file was not created");
}
}  // namespace

void atomic_file::write(std::string_view data) {
  run_throwing([&] { return impl_ ? impl_->write(data) : empty_failure("write"); });
}

void atomic_file::write(std::string_view data, std::error_code& ec) noexcept {
  run_noexcept(ec, [&] { return impl_ ? impl_->write(data) : empty_failure("write"); });
}

std::ostream& atomic_file::stream() {
  std::error_code ec;
  std::ostream* out = stream(ec);
  if (!out) throw lock_error(ec, last_error_message());
  return *out;
}

std::ostream* atomic_file::stream(std::error_code& ec) noexcept {
  run_noexcept(ec, [&] {
    if (!impl_) return empty_failure("stream");
    // A stream given out before stays available: its badbit says how the
    // writes went. A new one onto a finished file would only fail.
    if (!impl_->out && impl_->state != impl::open)
      return make_failure(errc::bad_argument,
                          describe("stream", impl_->target.path,
                                   "the atomic_file is already finished", {}));
    if (!impl_->out) {
      impl_->buf = std::make_unique<impl::stream_buf>(*impl_);
      impl_->out = std::make_unique<std::ostream>(impl_->buf.get());
    }
    return failure{};
  });
  return ec ? nullptr : impl_->out.get();
}

void atomic_file::commit() {
  run_throwing([&] { return impl_ ? impl_->commit() : empty_failure("commit"); });
}

void atomic_file::commit(std::error_code& ec) noexcept {
  run_noexcept(ec, [&] { return impl_ ? impl_->commit() : empty_failure("commit"); });
}

void atomic_file::rollback() noexcept {
  if (impl_ && impl_->state == impl::open) impl_->fail();
}

const boost::filesystem::path& atomic_file::target() const noexcept {
  static const boost::filesystem::path none;
  return impl_ ? impl_->target_path : none;
}

const boost::filesystem::path& atomic_file::temp_path() const noexcept {
  static const boost::filesystem::path none;
  return impl_ ? impl_->temp_path : none;
}

// ---- read_file, sweep_temp_files ---------------------------------------------

namespace detail {

namespace {

const char* type_name(char type) {
  switch (type) {
    case 'd': return "a directory";
    case 'p': return "a FIFO";
    case 'c': return "a character device";
    case 'b': return "a block device";
    case 's': return "a socket";
    case 'l': return "a symbolic link";
    default: return "not a regular file";
  }
}

// Opens `path` for reading (open_read: O_NOFOLLOW|O_NONBLOCK), following
// symbolic links one checked hop at a time when the rules allow. fd -1
// and no failure: nothing is there.
failure open_for_reading(os& sys, const std::string& path, const read_rules& rules, int& fd) {
  fd = -1;
  std::string at = path;
  for (int hops = 0;; ++hops) {
    std::error_code ec = sys.open_read(at, fd);
    if (!ec) return {};
    fd = -1;
    if (ec == std::errc::no_such_file_or_directory) return {};
    // O_NOFOLLOW's answer for a link is ELOOP (EMLINK on FreeBSD); ELOOP
    // also means a loop among the directories above, which lstat tells.
    file_status st;
    const bool link = (ec == std::errc::too_many_symbolic_link_levels ||
                       ec == std::errc::too_many_links) &&
                      !sys.status(at, st) && st.is_symlink;
    if (!link) return make_failure(ec, describe("read", shown_name(at), "cannot open", ec));
    if (!rules.follow)
      return make_failure(
          std::make_error_code(std::errc::too_many_symbolic_link_levels),
          describe("read", shown_name(at),
                   "it is a symbolic link, and links are not followed here (the write "
                   "replaces the link), so what it points to, maybe another user's file, was "
                   "not read; nothing was written: name the file it points to, ask to follow "
                   "links (symlink_policy::follow), or remove the link",
                   {}));
    if (hops >= 40)
      return make_failure(
          ec, describe("read", shown_name(path), "too many levels of symbolic links", ec));
    if (failure f = check_link(sys, "read", at, st)) return f;
    std::string to;
    if (auto lec = sys.read_link(at, to))
      return make_failure(
          lec, describe("read", shown_name(at), "cannot read the symbolic link", lec));
    at = link_destination(at, to);
  }
}

failure over_limit(const std::string& path, const read_rules& rules, const std::string& size) {
  if (rules.counter)
    return make_failure(errc::corrupt_data,
                        describe("read counter", shown_name(path),
                                 "the file holds " + size + " bytes, more than a counter's " +
                                     std::to_string(rules.limit) +
                                     " (one decimal of at most 20 digits and a newline); it was "
                                     "left as it is and not read: repair or remove it by hand",
                                 {}));
  const std::error_code ec = std::make_error_code(std::errc::file_too_large);
  return make_failure(ec, describe("read", shown_name(path),
                                   "the file is too large: " + size + " bytes, more than " +
                                       rules.limit_name + " of " + std::to_string(rules.limit) +
                                       " bytes; nothing was read or written: raise " +
                                       rules.limit_name + " if the file is meant to be this large",
                                   {}));
}

// fstat of what was opened: only a regular file no larger than the limit
// is read. A FIFO or a device could block or never end, and a path the
// caller checked before may have been swapped since.
failure check_opened(os& sys, int fd, const std::string& path, const read_rules& rules,
                     std::uint64_t& size) {
  file_status st;
  if (auto ec = sys.file_status_of(fd, st))
    return make_failure(
        ec, describe("read", shown_name(path), "cannot look at the opened file", ec));
  size = st.size;
  if (st.is_directory)
    return make_failure(std::make_error_code(std::errc::is_a_directory),
                        describe("read", shown_name(path), "is a directory",
                                 std::make_error_code(std::errc::is_a_directory)) +
                            "; name a file");
  if (!st.is_regular)
    return make_failure(std::make_error_code(std::errc::invalid_argument),
                        describe("read", shown_name(path),
                                 std::string("it is ") + type_name(st.type) +
                                     ", not a regular file, and was not read (it could block "
                                     "or never end); nothing was written: replace it with a "
                                     "regular file",
                                 {}));
  if (st.size > rules.limit) return over_limit(path, rules, std::to_string(st.size));
  return {};
}

// Reads to the end, but never more than the limit: a regular file may grow
// while it is read, and one whose size says 0 (/proc) may hold more.
failure read_bounded(os& sys, int fd, const std::string& path, const read_rules& rules,
                     std::string& data) {
  char buf[64 * 1024];
  for (;;) {
    // One byte past the limit is asked for, to tell a file of exactly the
    // limit from a longer one.
    const std::uint64_t room = rules.limit - std::min<std::uint64_t>(data.size(), rules.limit);
    const std::size_t want = room >= sizeof buf ? sizeof buf : static_cast<std::size_t>(room + 1);
    std::size_t got = 0;
    if (auto ec = sys.read(fd, buf, want, got))
      return make_failure(ec, describe("read", shown_name(path), "cannot read", ec));
    if (got == 0) return {};
    data.append(buf, got);
    if (data.size() > rules.limit)
      return over_limit(path, rules, "over " + std::to_string(rules.limit));
  }
}

}  // namespace

failure read_file_impl(os& sys, const std::string& path, std::optional<std::string>& out,
                       int* keep, const read_rules& rules) {
  out.reset();
  if (keep) *keep = -1;
  int fd = -1;
  if (failure f = open_for_reading(sys, path, rules, fd)) return f;
  if (fd < 0) return {};
  std::string data;
  std::uint64_t size = 0;
  failure f = check_opened(sys, fd, path, rules, size);
  if (!f) {
    data.reserve(static_cast<std::size_t>(size));
    f = read_bounded(sys, fd, path, rules, data);
  }
  if (f || !keep)
    sys.close(fd);
  else
    *keep = fd;
  if (!f) out = std::move(data);
  return f;
}

failure sweep_impl(os& sys, const std::string& dir, std::chrono::microseconds older_than,
                   std::size_t& removed, const std::string& target_name) {
  removed = 0;
  std::vector<std::string> names;
  if (auto ec = sys.list_directory(dir, names))
    return make_failure(ec, describe("sweep", dir, "cannot list", ec));
  const std::int64_t cutoff = sys.wall_now_us() - older_than.count();
  const std::string prefix = target_name.empty() ? std::string() : "." + target_name + ".tmp.";
  for (const auto& n : names) {
    if (!is_temp_name(n)) continue;
    if (!prefix.empty() && (n.size() != prefix.size() + 16 || n.compare(0, prefix.size(), prefix) != 0))
      continue;
    const std::string p = dir + "/" + n;
    file_status st;
    if (sys.status(p, st) || !st.is_regular || st.mtime_us > cutoff) continue;
    if (!sys.remove_file(p)) ++removed;
  }
  return {};
}

}  // namespace detail

std::optional<std::string> read_file(const boost::filesystem::path& path) {
  return read_file(path, default_read_limit);
}

std::optional<std::string> read_file(const boost::filesystem::path& path,
                                     std::error_code& ec) noexcept {
  return read_file(path, default_read_limit, ec);
}

namespace {
read_rules read_file_rules(std::uint64_t limit) {
  read_rules rules;
  rules.limit = limit;
  rules.follow = true;  // a reader replaces nothing: the link names what to read
  rules.limit_name = "the limit given to read_file";
  return rules;
}
}  // namespace

std::optional<std::string> read_file(const boost::filesystem::path& path, std::uint64_t limit) {
  std::optional<std::string> out;
  run_throwing([&] {
    return read_file_impl(*system_os(), path.string(), out, nullptr, read_file_rules(limit));
  });
  return out;
}

std::optional<std::string> read_file(const boost::filesystem::path& path, std::uint64_t limit,
                                     std::error_code& ec) noexcept {
  std::optional<std::string> out;
  run_noexcept(ec, [&] {
    return read_file_impl(*system_os(), path.string(), out, nullptr, read_file_rules(limit));
  });
  if (ec) out.reset();
  return out;
}

std::size_t sweep_temp_files(const boost::filesystem::path& dir, std::chrono::seconds older_than) {
  std::size_t removed = 0;
  run_throwing([&] { return sweep_impl(*system_os(), dir.string(), older_than, removed); });
  return removed;
}

std::size_t sweep_temp_files(const boost::filesystem::path& dir, std::chrono::seconds older_than,
                             std::error_code& ec) noexcept {
  std::size_t removed = 0;
  run_noexcept(ec, [&] { return sweep_impl(*system_os(), dir.string(), older_than, removed); });
  return removed;
}

}  // namespace tokenlock
