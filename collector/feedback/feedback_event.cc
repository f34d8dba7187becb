#include "collector/feedback/feedback_event.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mailroom {
namespace {

using nlohmann::json;

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// The first value of tag `name` in mail.tags ({"name": ["value"]}).
std::string Tag(const json& mail, const char* name) {
  auto tags = mail.find("tags");
  if (tags == mail.end() || !tags->is_object()) return "";
  auto it = tags->find(name);
  if (it == tags->end()) return "";
  if (it->is_array() && !it->empty() && (*it)[0].is_string()) return (*it)[0].get<std::string>();
  return it->is_string() ? it->get<std::string>() : "";
}

// The emailAddress of each object in `list` (bouncedRecipients, complainedRecipients).
void Addresses(const json& parent, const char* list, std::vector<std::string>* out) {
  auto it = parent.find(list);
  if (it == parent.end() || !it->is_array()) return;
  for (const json& r : *it) {
    if (r.is_object()) {
      std::string a = Str(r, "emailAddress");
      if (!a.empty()) out->push_back(std::move(a));
    } else if (r.is_string()) {
      out->push_back(r.get<std::string>());
    }
  }
}

}  // namespace

absl::StatusOr<FeedbackEvent> ParseSesEvent(const std::string& message) {
  json j = json::parse(message, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("Message is not a JSON object");
  FeedbackEvent e;
  e.type = Str(j, "eventType");
  if (e.type.empty()) e.type = Str(j, "notificationType");
  if (e.type.empty()) {
    return absl::InvalidArgumentError("Message has neither eventType nor notificationType");
  }
  auto mail = j.find("mail");
  if (mail == j.end() || !mail->is_object()) {
    return absl::InvalidArgumentError("SES event without mail");
  }
  const std::string message_id = Str(*mail, "messageId");
  if (!message_id.empty()) e.message_ids.push_back(message_id);
  e.group = Tag(*mail, kTagGroup);
  uint64_t id = 0;
  if (absl::SimpleAtoi(Tag(*mail, kTagJob), &id)) e.job_id = id;
  if (e.message_ids.empty() && e.job_id == 0) {
    return absl::InvalidArgumentError("SES event names no message (mail.messageId)");
  }
  if (e.type == "Bounce") {
    const json& b = j.value("bounce", json::object());
    if (!b.is_object()) return absl::InvalidArgumentError("Bounce without bounce");
    e.bounce_type = Str(b, "bounceType");
    e.detail = Str(b, "bounceSubType");
    Addresses(b, "bouncedRecipients", &e.recipients);
    if (e.bounce_type != "Permanent" && e.bounce_type != "Transient" &&
        e.bounce_type != "Undetermined") {
      return absl::InvalidArgumentError("Bounce with an unknown bounceType");
    }
  } else if (e.type == "Complaint") {
    const json& c = j.value("complaint", json::object());
    if (!c.is_object()) return absl::InvalidArgumentError("Complaint without complaint");
    e.detail = Str(c, "complaintFeedbackType");
    Addresses(c, "complainedRecipients", &e.recipients);
  } else if (e.type == "Delivery") {
    const json& d = j.value("delivery", json::object());
    if (d.is_object()) Addresses(d, "recipients", &e.recipients);
  } else if (e.type == "Reject") {
    const json& r = j.value("reject", json::object());
    if (r.is_object()) e.detail = Str(r, "reason");
  } else {
    return absl::UnimplementedError(
        absl::StrCat("SES event type not recorded: ", e.type.substr(0, 40)));
  }
  // A Reject names no recipient of its own (nor may a Delivery): the message's destination
  // is whom it was for, which the delivery's recipient must be among.
  if ((e.type == "Delivery" || e.type == "Reject") && e.recipients.empty()) {
    Addresses(*mail, "destination", &e.recipients);
  }
  if ((e.type == "Bounce" || e.type == "Complaint") && e.recipients.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(e.type, " without recipients"));
  }
  for (std::string& r : e.recipients) {
    if (r.size() > 320) return absl::InvalidArgumentError("recipient address too long");
  }
  if (e.detail.size() > 200) e.detail.resize(200);
  return e;
}

}  // namespace mailroom
