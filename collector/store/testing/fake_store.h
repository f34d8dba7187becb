#pragma once

#include <algorithm>
#include <deque>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collector/store/operator_store.h"
#include "collector/store/store.h"

namespace mailroom::testing {

// An in-memory Store and OperatorStore for unit tests of the service, the dispatcher and the
// gauges: it records every call with its arguments and answers from what the test queued. It
// does not model the queue (store_test covers the real one against PostgreSQL); it models the
// groups (`mailroom` at first, as a migrated database has it; EnsureGroup adds one, SetStats
// makes its rows' groups the only ones), their pauses, the suppression list and the audit, and
// finds no email, hour or trouble. //collector/store:conformance_test runs the same suite
// against it and PostgreSQL. Thread-safe.
class FakeStore : public Store, public OperatorStore {
 public:
  struct Call {
    std::string method{}, group{}, owner{};
    std::vector<uint64_t> ids{};
    std::vector<uint32_t> attempts{};
    std::vector<JobResult> results{};
    int limit = 0;
    absl::Duration lease{};
    std::string holder{};  // a Dequeue's budget holder
    bool holder_registered = false;
  };

  // The next Dequeue returns `jobs` (later ones return nothing, or `error` when set).
  void QueueJobs(std::vector<StoredJob> jobs) {
    absl::MutexLock lock(&mu_);
    answers_.push_back(std::move(jobs));
  }
  // Every call of `method` fails with `error` (OK clears it).
  void FailWith(const std::string& method, absl::Status error) {
    absl::MutexLock lock(&mu_);
    errors_.erase(std::remove_if(errors_.begin(), errors_.end(),
                                 [&](const auto& e) { return e.first == method; }),
                  errors_.end());
    if (!error.ok()) errors_.emplace_back(method, std::move(error));
  }
  // Ack records only these ids (default: every id it was given).
  void AckOnly(std::vector<uint64_t> ids) {
    absl::MutexLock lock(&mu_);
    ack_only_ = std::move(ids);
    ack_filter_ = true;
  }
  // The groups there are become those of `stats`, which Stats answers.
  void SetStats(std::vector<GroupStatsRow> stats) {
    absl::MutexLock lock(&mu_);
    stats_ = std::move(stats);
    groups_.clear();
    for (const GroupStatsRow& row : stats_) groups_.insert(row.group);
    for (auto it = pauses_.begin(); it != pauses_.end();) {
      it = groups_.count(it->first) != 0 ? std::next(it) : pauses_.erase(it);
    }
  }

  std::vector<Call> Calls(const std::string& method) const {
    absl::MutexLock lock(&mu_);
    std::vector<Call> out;
    for (const Call& c : calls_) {
      if (c.method == method) out.push_back(c);
    }
    return out;
  }
  int CallCount(const std::string& method) const { return static_cast<int>(Calls(method).size()); }
  // Blocks (real time, bounded) until `method` has been called at least `n` times.
  bool WaitForCalls(const std::string& method, int n,
                    absl::Duration timeout = absl::Seconds(10)) const {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      int k = 0;
      for (const Call& c : calls_) k += c.method == method;
      return k >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  absl::StatusOr<std::string> Channel() override {
    Call c{"Channel"};
    if (auto e = Record(c); !e.ok()) return e;
    return std::string("mailroom_tokens");
  }
  absl::Status EnsureGroup(const std::string& group, bool) override {
    if (auto e = Record({"EnsureGroup", group}); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    groups_.insert(group);
    return absl::OkStatus();
  }
  // The next CollectSignups calls report these counts taken (later ones 0).
  void QueueCollected(std::vector<int> taken) {
    absl::MutexLock lock(&mu_);
    collected_.insert(collected_.end(), taken.begin(), taken.end());
  }
  // Every call's method, in order.
  std::vector<std::string> Methods() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const Call& c : calls_) out.push_back(c.method);
    return out;
  }
  absl::StatusOr<int> CollectSignups(int limit) override {
    Call c{"CollectSignups"};
    c.limit = limit;
    if (auto e = Record(c); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    if (collected_.empty()) return 0;
    const int taken = collected_.front();
    collected_.pop_front();
    return taken;
  }
  // Recorded as "Dequeue", or "DequeueRecoveries" for the recovery lane; both answer from the
  // queued answers.
  using Store::Dequeue;
  absl::StatusOr<std::vector<StoredJob>> Dequeue(const DequeueRequest& q) override {
    Call c{q.recoveries_only ? "DequeueRecoveries" : "Dequeue", q.group, q.owner};
    c.limit = q.limit;
    c.lease = q.lease;
    c.holder = q.holder;
    c.holder_registered = q.holder_registered;
    if (auto e = Record(c); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    if (answers_.empty()) return std::vector<StoredJob>{};
    std::vector<StoredJob> out = std::move(answers_.front());
    answers_.pop_front();
    return out;
  }
  absl::StatusOr<std::vector<uint64_t>> Ack(const std::string& group, const std::string& owner,
                                            const std::vector<JobResult>& results) override {
    Call c{"Ack", group, owner};
    c.results = results;
    for (const JobResult& r : results) c.ids.push_back(r.id);
    if (auto e = Record(c); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    if (!ack_filter_) return c.ids;
    std::vector<uint64_t> out;
    for (uint64_t id : c.ids) {
      if (std::find(ack_only_.begin(), ack_only_.end(), id) != ack_only_.end()) out.push_back(id);
    }
    return out;
  }
  absl::StatusOr<std::vector<uint64_t>> Renew(const std::string& group, const std::string& owner,
                                              const std::vector<uint64_t>& ids,
                                              const std::vector<uint32_t>& attempts,
                                              absl::Duration lease) override {
    Call c{"Renew", group, owner, ids, attempts};
    c.lease = lease;
    if (auto e = Record(c); !e.ok()) return e;
    return ids;
  }
  absl::Status RenewAll(const std::string& group, const std::string& owner,
                        absl::Duration lease) override {
    Call c{"RenewAll", group, owner};
    c.lease = lease;
    return Record(c);
  }
  absl::Status HolderLeft(const std::string& group, const std::string& owner) override {
    return Record({"HolderLeft", group, owner});
  }
  absl::Status Release(const std::string& group, const std::string& owner,
                       const std::vector<uint64_t>& ids) override {
    return Record({"Release", group, owner, ids});
  }
  // Every group, ordered by name.
  absl::StatusOr<std::vector<std::string>> GroupNames() override {
    if (auto e = Record({"GroupNames"}); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    return std::vector<std::string>(groups_.begin(), groups_.end());
  }
  absl::StatusOr<std::vector<GroupStatsRow>> Stats(const std::string& group) override {
    if (auto e = Record({"Stats", group}); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    std::vector<GroupStatsRow> out;
    for (const auto& s : stats_) {
      if (group.empty() || s.group == group) out.push_back(s);
    }
    return out;
  }
  absl::StatusOr<std::vector<FailureRow>> Failures(const std::string& group, int limit) override {
    Call c{"Failures", group};
    c.limit = limit;
    if (auto e = Record(c); !e.ok()) return e;
    return std::vector<FailureRow>{};
  }
  absl::StatusOr<int> Requeue(const std::string& group, const std::vector<uint64_t>& ids) override {
    if (auto e = Record({"Requeue", group, "", ids}); !e.ok()) return e;
    return 0;  // no job is failed here, and the real store requeues only failed jobs
  }
  absl::StatusOr<UsageRow> Usage(const std::string& group) override {
    if (auto e = Record({"Usage", group}); !e.ok()) return e;
    return UsageRow{absl::FormatTime("%Y-%m", absl::Now(), absl::UTCTimeZone()), 0, 0};
  }
  // The suppression list is kept in memory (ordered by address), with the real store's
  // paging, filters and upsert (first_seen kept, last_seen now) but no expiry.
  absl::StatusOr<std::vector<SuppressionRow>> ListSuppressions(const SuppressionQuery& q) override {
    Call c{"ListSuppressions"};
    c.limit = q.limit;
    if (auto e = Record(c); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    std::vector<SuppressionRow> out;
    for (auto it = suppressions_.upper_bound(q.after);
         it != suppressions_.end() && static_cast<int>(out.size()) < q.limit; ++it) {
      if (!q.reason.empty() && it->second.reason != q.reason) continue;
      if (it->first.compare(0, q.prefix.size(), q.prefix) != 0) continue;
      out.push_back(it->second);
    }
    return out;
  }
  absl::StatusOr<SuppressionRow> AddSuppression(const SuppressionRow& row) override {
    if (auto e = Record({"AddSuppression", "", row.address}); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    const int64_t now = absl::ToUnixSeconds(absl::Now());
    auto [it, added] = suppressions_.try_emplace(row.address, row);
    const int64_t first_seen = added ? now : it->second.first_seen;
    it->second = row;
    it->second.first_seen = first_seen;
    it->second.last_seen = now;
    return it->second;
  }
  absl::StatusOr<SuppressionRow> RemoveSuppression(const std::string& address) override {
    if (auto e = Record({"RemoveSuppression", "", address}); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    auto it = suppressions_.find(address);
    if (it == suppressions_.end()) return absl::NotFoundError("not suppressed");
    SuppressionRow out = it->second;
    suppressions_.erase(it);
    return out;
  }
  absl::Status Ping() override { return Record({"Ping"}); }

  // OperatorStore: no email, hour or trouble is found.
  absl::StatusOr<FoundEmails> FindEmails(const std::string& group, const std::string& address,
                                         uint64_t /*account*/, int limit) override {
    Call c{"FindEmails", group, address};
    c.limit = limit;
    if (auto e = Record(c); !e.ok()) return e;
    return FoundEmails{};
  }
  absl::StatusOr<GroupPauseRow> SetPaused(const std::string& group, bool paused,
                                          const std::string& reason) override {
    if (auto e = Record({"SetPaused", group, reason}); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    if (groups_.count(group) == 0) {
      return absl::NotFoundError(absl::StrCat("unknown consumer group \"", group, "\""));
    }
    // A pause keeps its first time and takes the new reason; a resume clears both.
    GroupPauseRow& row = pauses_[group];
    row.group = group;
    row.paused = paused;
    row.paused_at = !paused              ? 0
                    : row.paused_at != 0 ? row.paused_at
                                         : absl::ToUnixSeconds(absl::Now());
    row.reason = paused ? Left(reason, 1000) : "";
    return row;
  }
  absl::StatusOr<std::vector<std::string>> Groups() override { return GroupNames(); }
  absl::StatusOr<std::vector<HourRow>> Hourly(const std::string& group, int hours) override {
    Call c{"Hourly", group};
    c.limit = hours;
    if (auto e = Record(c); !e.ok()) return e;
    return std::vector<HourRow>{};
  }
  absl::StatusOr<std::vector<TroubleRow>> Trouble(const std::string& group, absl::Duration,
                                                  int limit) override {
    Call c{"Trouble", group};
    c.limit = limit;
    if (auto e = Record(c); !e.ok()) return e;
    return std::vector<TroubleRow>{};
  }
  absl::StatusOr<uint64_t> BeginAudit(const AuditRecord& r) override {
    if (auto e = Record({"BeginAudit", r.group, r.method}); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    const AuditRecord cut{Left(r.credential, 1000), Left(r.method, 100), Left(r.group, 1000),
                          Left(r.target, 1000)};
    audit_.push_back({audit_.size() + 1, absl::ToUnixMillis(absl::Now()), cut, "started"});
    return audit_.back().id;
  }
  // An entry's outcome is written once.
  absl::Status EndAudit(uint64_t id, const std::string& outcome) override {
    if (auto e = Record({"EndAudit", "", outcome, {id}}); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    if (id >= 1 && id <= audit_.size() && audit_[id - 1].outcome == "started") {
      audit_[id - 1].outcome = Left(outcome, 1000);
    }
    return absl::OkStatus();
  }
  // Newest first, ids below `before_id` (0: from the newest), 1 to 1000 of them.
  absl::StatusOr<std::vector<AuditEntryRow>> ListAudit(uint64_t before_id, int limit) override {
    Call c{"ListAudit"};
    c.limit = limit;
    if (auto e = Record(c); !e.ok()) return e;
    absl::MutexLock lock(&mu_);
    const size_t n = static_cast<size_t>(std::clamp(limit, 1, 1000));
    std::vector<AuditEntryRow> out;
    for (auto it = audit_.rbegin(); it != audit_.rend() && out.size() < n; ++it) {
      if (before_id == 0 || it->id < before_id) out.push_back(*it);
    }
    return out;
  }

 private:
  // The first `n` characters of UTF-8 `s`, as PostgreSQL's left(s, n).
  static std::string Left(const std::string& s, size_t n) {
    size_t chars = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && chars++ == n) return s.substr(0, i);
    }
    return s;
  }
  absl::Status Record(Call c) {
    absl::MutexLock lock(&mu_);
    const std::string method = c.method;
    calls_.push_back(std::move(c));
    for (const auto& [m, e] : errors_) {
      if (m == method) return e;
    }
    return absl::OkStatus();
  }

  mutable absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  std::deque<int> collected_ ABSL_GUARDED_BY(mu_);
  std::deque<std::vector<StoredJob>> answers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, absl::Status>> errors_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> ack_only_ ABSL_GUARDED_BY(mu_);
  bool ack_filter_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<GroupStatsRow> stats_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> groups_ ABSL_GUARDED_BY(mu_) = {"mailroom"};
  std::map<std::string, GroupPauseRow> pauses_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, SuppressionRow> suppressions_ ABSL_GUARDED_BY(mu_);
  std::vector<AuditEntryRow> audit_ ABSL_GUARDED_BY(mu_);  // the entry of id N at N - 1
};

}  // namespace mailroom::testing
