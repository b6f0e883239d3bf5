// The line of an etcd lock as shared holders and writers read it
// (lib/src/etcd/etcd_line.hpp): which keys hold, whom a waiter watches.
// No etcd needed: the keys are made here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "etcd/etcd_line.hpp"

using tokenlock::detail::etcd_kv;
using tokenlock::detail::holder_count;
using tokenlock::detail::judge_shared;
using tokenlock::detail::kind_of;
using tokenlock::detail::line_kind;
using tokenlock::detail::shared_verdict;
using tokenlock::detail::waiting_writer;

namespace {

const std::string dir = "tokenlock/x/";

// Keys in line order: "w" a writer, "r" a reader, "sN" one of N slots.
std::vector<etcd_kv> line_of(const std::vector<std::string>& kinds) {
  std::vector<etcd_kv> line;
  long long rev = 10;
  for (const std::string& k : kinds) {
    etcd_kv kv;
    kv.key = dir + "00000000000000" + std::to_string(rev) +
             (k == "w" ? "" : k == "r" ? ".s0" : ".s" + k.substr(1));
    kv.create_revision = rev++;
    kv.value = "owner-" + k;
    line.push_back(kv);
  }
  return line;
}

TEST(EtcdLine, KeysReadAsTheyAreWritten) {
  EXPECT_EQ(kind_of(dir, dir + "0123456789abcdef").kind, line_kind::exclusive);
  const line_kind r = kind_of(dir, dir + "0123456789abcdef.s0");
  EXPECT_EQ(r.kind, line_kind::shared);
  EXPECT_EQ(r.limit, 0u);
  const line_kind s = kind_of(dir, dir + "0123456789abcdef.s999999");
  EXPECT_EQ(s.kind, line_kind::shared);
  EXPECT_EQ(s.limit, 999999u);
  // Not as this version writes them: waited for as writers, never joined.
  for (const char* odd : {".s", ".s01", ".s1000000", ".s-1", ".s1x", ".sx", ".S1"})
    EXPECT_EQ(kind_of(dir, dir + "0123456789abcdef" + odd).kind, line_kind::exclusive) << odd;
  EXPECT_EQ(kind_of(dir, dir + ".s1").kind, line_kind::exclusive);
}

TEST(EtcdLine, HoldersAreAPrefixOfTheLine) {
  EXPECT_EQ(holder_count(dir, line_of({})), 0u);
  EXPECT_EQ(holder_count(dir, line_of({"w", "w"})), 1u);
  EXPECT_EQ(holder_count(dir, line_of({"w", "r"})), 1u);
  EXPECT_EQ(holder_count(dir, line_of({"r", "r", "r", "w", "r"})), 3u);
  EXPECT_EQ(holder_count(dir, line_of({"s2", "s2", "s2"})), 2u);
  EXPECT_EQ(holder_count(dir, line_of({"s3", "s2", "s3"})), 1u);
  EXPECT_EQ(holder_count(dir, line_of({"r", "s1"})), 1u);
}

TEST(EtcdLine, TheFirstWriterBehindSharedHoldersWaits) {
  EXPECT_EQ(waiting_writer(dir, line_of({"r", "r", "w", "w"})), 2u);
  EXPECT_EQ(waiting_writer(dir, line_of({"s1", "s1", "w"})), 2u);  // behind a slot's waiter
  EXPECT_EQ(waiting_writer(dir, line_of({"w", "w"})), 2u);          // a writer holds: none
  EXPECT_EQ(waiting_writer(dir, line_of({"r", "r"})), 2u);
  EXPECT_EQ(waiting_writer(dir, line_of({})), 0u);
}

TEST(EtcdLine, ASharedWaiterWatchesTheKeyItWaitsFor) {
  using v = shared_verdict;
  EXPECT_EQ(judge_shared(dir, line_of({}), 0).what, v::admitted);
  EXPECT_EQ(judge_shared(dir, line_of({"r", "r", "r"}), 0).what, v::admitted);
  // Behind a writer (holding or waiting): the nearest one.
  const shared_verdict w = judge_shared(dir, line_of({"r", "w", "r", "w", "r"}), 0);
  EXPECT_EQ(w.what, v::blocker);
  EXPECT_EQ(w.key, 3u);
  // Another limit blocks like a writer.
  const shared_verdict other = judge_shared(dir, line_of({"s3", "s3"}), 5);
  EXPECT_EQ(other.what, v::blocker);
  EXPECT_EQ(other.key, 1u);
  EXPECT_EQ(judge_shared(dir, line_of({"r"}), 1).what, v::blocker);
  // A semaphore: fewer than N ahead holds; N ahead: the first waiter; more:
  // the waiter just ahead.
  EXPECT_EQ(judge_shared(dir, line_of({"s3", "s3"}), 3).what, v::admitted);
  EXPECT_EQ(judge_shared(dir, line_of({"s3", "s3", "s3"}), 3).what, v::first_waiter);
  const shared_verdict behind = judge_shared(dir, line_of({"s2", "s2", "s2", "s2"}), 2);
  EXPECT_EQ(behind.what, v::behind_waiter);
  EXPECT_EQ(behind.key, 3u);
}

}  // namespace
