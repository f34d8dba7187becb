#include "collector/feedback/feedback_store.h"

#include <algorithm>
#include <pqxx/pqxx>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "collector/db/pool.h"

namespace mailroom {
namespace {

class PgFeedbackStore : public FeedbackStore {
 public:
  PgFeedbackStore(std::string url, const TxTimeouts& timeouts)
      : pool_({std::move(url), /*size=*/1, timeouts}) {}

  absl::StatusOr<FeedbackRecord> Record(const std::string& event_key, const FeedbackEvent& e,
                                        int soft_limit, const FeedbackScope& scope) override {
    return pool_.Run<FeedbackRecord>("recording feedback", [&](Connection& c) {
      Transaction tx(c);
      std::string r =
          tx.exec_params1(
                "SELECT mailroom.mailroom_record_feedback($1::text, $2::text, $3::text, $4::text[],"
                " $5::text, $6::bigint, $7::text[], $8::text, $9::text, $10::int, $11::text,"
                " $12::boolean) AS result",
                event_key, e.provider, e.type, TextArray(e.message_ids), e.group,
                static_cast<int64_t>(e.job_id), TextArray(e.recipients), e.bounce_type, e.detail,
                soft_limit, scope.group, scope.suppress_unmatched)["result"]
              .as<std::string>();
      tx.commit();
      FeedbackRecord out;
      absl::string_view rest = r;  // recorded | duplicate | unmatched:<reason>[:suppressed]
      if (rest == "duplicate") {
        out.result = FeedbackResult::kDuplicate;
      } else if (absl::ConsumePrefix(&rest, "unmatched:")) {
        out.result = FeedbackResult::kUnmatched;
        out.suppressed = absl::ConsumeSuffix(&rest, ":suppressed");
        out.unmatched_reason = std::string(rest);
      }
      return out;
    });
  }

  absl::StatusOr<std::vector<ReputationRow>> Reputation(absl::Duration window) override {
    return pool_.Run<std::vector<ReputationRow>>("reading reputation", [&](Connection& c) {
      Transaction tx(c);
      std::vector<ReputationRow> out;
      for (const auto& row :
           tx.exec_params("SELECT group_name, sent, delivered, bounced, complained"
                          " FROM mailroom.mailroom_reputation($1::int)",
                          absl::ToInt64Seconds(window))) {
        ReputationRow r;
        r.group = row["group_name"].as<std::string>();
        r.sent = row["sent"].as<uint64_t>();
        r.delivered = row["delivered"].as<uint64_t>();
        r.bounced = row["bounced"].as<uint64_t>();
        r.complained = row["complained"].as<uint64_t>();
        out.push_back(std::move(r));
      }
      return out;
    });
  }

  absl::StatusOr<std::vector<ProviderReputationRow>> ReputationByProvider(
      absl::Duration window) override {
    return pool_.Run<std::vector<ProviderReputationRow>>(
        "reading reputation by provider", [&](Connection& c) {
          Transaction tx(c);
          std::vector<ProviderReputationRow> out;
          for (const auto& row :
               tx.exec_params("SELECT group_name, provider, delivered, bounced, complained"
                              " FROM mailroom.mailroom_reputation_by_provider($1::int)",
                              absl::ToInt64Seconds(window))) {
            ProviderReputationRow r;
            r.group = row["group_name"].as<std::string>();
            r.provider = row["provider"].as<std::string>();
            r.delivered = row["delivered"].as<uint64_t>();
            r.bounced = row["bounced"].as<uint64_t>();
            r.complained = row["complained"].as<uint64_t>();
            out.push_back(std::move(r));
          }
          return out;
        });
  }

 private:
  // One connection: feedback is retried by SNS; the gauges keep their last values.
  Pool pool_;
};

}  // namespace

const char* ResultName(FeedbackResult r) {
  return r == FeedbackResult::kDuplicate   ? "duplicate"
         : r == FeedbackResult::kUnmatched ? "unmatched"
                                           : "recorded";
}

std::string RecipientDomains(const std::vector<std::string>& recipients) {
  std::vector<std::string> domains;
  for (const std::string& r : recipients) {
    const size_t at = r.rfind('@');
    std::string d = absl::AsciiStrToLower(
        absl::StripAsciiWhitespace(at == std::string::npos ? "" : r.substr(at + 1)));
    if (!d.empty() && std::find(domains.begin(), domains.end(), d) == domains.end()) {
      domains.push_back(std::move(d));
    }
  }
  return absl::StrJoin(domains, ",");
}

std::unique_ptr<FeedbackStore> NewPgFeedbackStore(const std::string& url,
                                                  const TxTimeouts& timeouts) {
  return std::make_unique<PgFeedbackStore>(url, timeouts);
}

}  // namespace mailroom
