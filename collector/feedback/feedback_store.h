#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collector/db/pg_tx.h"
#include "collector/feedback/feedback_event.h"

namespace mailroom {

// A group's reputation counters over a rolling window (migration 0012, reputation_hourly).
struct ReputationRow {
  std::string group;
  uint64_t sent = 0;
  uint64_t delivered = 0;
  uint64_t bounced = 0;  // permanent bounces
  uint64_t complained = 0;

  // Permanent bounces and complaints per email sent (0 when nothing was sent).
  double bounce_rate() const { return sent == 0 ? 0 : static_cast<double>(bounced) / sent; }
  double complaint_rate() const {
    return sent == 0 ? 0 : static_cast<double>(complained) / sent;
  }
};

// What recording one SNS message did.
enum class FeedbackResult { kRecorded, kUnmatched, kDuplicate };

// The feedback and reputation side of PostgreSQL (migration 0012). Thread-safe; no exception
// leaves it: a database error is kUnavailable.
class FeedbackStore {
 public:
  virtual ~FeedbackStore() = default;
  // Records SES event `e` delivered by SNS message `sns_message_id` (mailroom_record_feedback):
  // once per SNS message id; a permanent bounce or complaint suppresses the recipients; a
  // transient bounce suppresses an address after `soft_bounce_limit` of them within 7 days.
  virtual absl::StatusOr<FeedbackResult> Record(const std::string& sns_message_id,
                                                const FeedbackEvent& e, int soft_bounce_limit) = 0;
  // Every group's counters over the last `window` (whole hours).
  virtual absl::StatusOr<std::vector<ReputationRow>> Reputation(absl::Duration window) = 0;
};

// A FeedbackStore on one libpqxx connection to `url` (opened lazily, reopened after an error).
// Transactions run under `timeouts` (collector/db/pg_tx.h).
std::unique_ptr<FeedbackStore> NewPgFeedbackStore(const std::string& url,
                                                  const TxTimeouts& timeouts = {});

}  // namespace mailroom
