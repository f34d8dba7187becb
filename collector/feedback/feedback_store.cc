#include "collector/feedback/feedback_store.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace mailroom {
namespace {

class PgFeedbackStore : public FeedbackStore {
 public:
  PgFeedbackStore(std::string url, const TxTimeouts& timeouts)
      : url_(std::move(url)), begin_(BeginCommand(timeouts)) {}

  absl::StatusOr<FeedbackResult> Record(const std::string& sns_message_id, const FeedbackEvent& e,
                                        int soft_limit) override {
    return Run<FeedbackResult>("recording feedback", [&](pqxx::connection& c) {
      Work tx(c, begin_);
      std::string r =
          tx.exec_params1(
                "SELECT mailroom.mailroom_record_feedback($1::text, $2::text, $3::text, $4::text,"
                " $5::bigint, $6::text[], $7::text, $8::text, $9::int)",
                sns_message_id, e.type, e.ses_message_id, e.group, static_cast<int64_t>(e.job_id),
                TextArray(e.recipients), e.bounce_type, e.detail, soft_limit)[0]
              .as<std::string>();
      tx.commit();
      return r == "duplicate"   ? FeedbackResult::kDuplicate
             : r == "unmatched" ? FeedbackResult::kUnmatched
                                : FeedbackResult::kRecorded;
    });
  }

  absl::StatusOr<std::vector<ReputationRow>> Reputation(absl::Duration window) override {
    return Run<std::vector<ReputationRow>>("reading reputation", [&](pqxx::connection& c) {
      Work tx(c, begin_);
      std::vector<ReputationRow> out;
      for (const auto& row :
           tx.exec_params("SELECT * FROM mailroom.mailroom_reputation($1::int)", absl::ToInt64Seconds(window))) {
        ReputationRow r;
        r.group = row[0].as<std::string>();
        r.sent = row[1].as<uint64_t>();
        r.delivered = row[2].as<uint64_t>();
        r.bounced = row[3].as<uint64_t>();
        r.complained = row[4].as<uint64_t>();
        out.push_back(std::move(r));
      }
      return out;
    });
  }

 private:
  // Runs `fn` on the connection; any libpqxx error drops it and is kUnavailable (feedback
  // is retried by SNS; the gauges keep their last values).
  template <typename T, typename Fn>
  absl::StatusOr<T> Run(const char* what, Fn fn) {
    absl::MutexLock lock(&mu_);
    try {
      if (conn_ == nullptr || !conn_->is_open()) conn_ = std::make_unique<pqxx::connection>(url_);
      return fn(*conn_);
    } catch (const std::exception& e) {
      conn_.reset();
      return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
    }
  }

  const std::string url_;
  const std::string begin_;  // BeginCommand: every transaction's timeouts
  absl::Mutex mu_;
  std::unique_ptr<pqxx::connection> conn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<FeedbackStore> NewPgFeedbackStore(const std::string& url,
                                                  const TxTimeouts& timeouts) {
  return std::make_unique<PgFeedbackStore>(url, timeouts);
}

}  // namespace mailroom
