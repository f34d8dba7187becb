#include "sender/delivery/actions.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace mailroom {
namespace {

constexpr const char* kNotices[] = {"password_changed", "email_changed", "account_suspended",
                                    "account_reactivated"};

}  // namespace

const std::vector<std::string>& BuiltinActions() {
  static const auto* const kBuiltin = new std::vector<std::string>{
      "activation",    "password_recovery", "login_code",
      "email_change",  "invitation",        "password_changed",
      "email_changed", "account_suspended", "account_reactivated"};
  return *kBuiltin;
}

bool IsBuiltinNotice(absl::string_view action) {
  for (const char* n : kNotices) {
    if (action == n) return true;
  }
  return false;
}

ActionRules DefaultActionRules(absl::string_view action) {
  // The seed rows of migrations/0033_actions.up.sql; a test reads them from the database.
  if (action == "activation") return {6, absl::Minutes(15)};
  if (action == "password_recovery") return {5, absl::Minutes(15)};
  if (action == "login_code") return {6, absl::Minutes(10)};
  if (action == "email_change") return {6, absl::Hours(1)};
  if (action == "invitation") return {6, absl::Hours(24 * 7)};
  return {};
}

std::string SampleCode(int length) {
  const std::string digits = "123456789012";
  return digits.substr(0, static_cast<size_t>(std::clamp(length, 1, 12)));
}

bool ValidActionName(absl::string_view action) {
  if (action.empty() || action.size() > 63 || !absl::ascii_islower(action[0])) return false;
  for (char c : action) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_') return false;
  }
  return true;
}

std::string JobActionName(const v1::Job& job) {
  if (!job.action_name().empty()) return job.action_name();
  switch (job.action()) {
    case v1::ACTION_ACTIVATION: return "activation";
    case v1::ACTION_PASSWORD_RECOVERY: return "password_recovery";
    default: return "";
  }
}

}  // namespace mailroom
