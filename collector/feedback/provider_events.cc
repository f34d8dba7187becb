#include "collector/feedback/provider_events.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mailroom {
namespace {

using nlohmann::json;

// Provider bodies nest a little deeper than SNS's (Mailgun's event-data.message.headers), never
// deeper than this; more only costs the parser.
constexpr int kMaxJsonDepth = 8;
constexpr size_t kMaxRecipient = 320;
constexpr size_t kMaxId = 256;

absl::StatusOr<json> ParseJson(const std::string& body) {
  bool too_deep = false;
  json j = json::parse(
      body,
      [&too_deep](int depth, json::parse_event_t, json&) {
        too_deep = too_deep || depth > kMaxJsonDepth;
        return !too_deep;
      },
      /*allow_exceptions=*/false);
  if (too_deep) return absl::InvalidArgumentError("JSON nested too deeply");
  if (j.is_discarded()) return absl::InvalidArgumentError("body is not JSON");
  return j;
}

std::string Str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_integer()) return absl::StrCat(it->get<int64_t>());
  return "";
}

const json& Obj(const json& j, const char* key) {
  static const json empty = json::object();
  if (!j.is_object()) return empty;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : empty;
}

// mailroom_group / mailroom_job from an object of custom values (Postmark's Metadata,
// SendGrid's event itself, Mailgun's user-variables, mailroom's own report).
void Tags(const json& values, FeedbackEvent* e) {
  e->group = Str(values, kTagGroup);
  uint64_t id = 0;
  if (absl::SimpleAtoi(Str(values, kTagJob), &id)) e->job_id = id;
}

// RFC 3339 with any fraction and offset (Postmark: 2014-08-01T13:28:10.2735393-04:00).
absl::Time Rfc3339(const std::string& s) {
  absl::Time t;
  std::string err;
  return absl::ParseTime(absl::RFC3339_full, s, &t, &err) ? t : absl::InfinitePast();
}

// The checks every recorded event passes, whatever its provider.
absl::Status Check(const ProviderEvent& p) {
  if (p.id.empty() || p.id.size() > kMaxId) {
    return absl::InvalidArgumentError("event without an id");
  }
  const FeedbackEvent& e = p.event;
  if (e.type.empty()) return absl::OkStatus();  // ignored
  if (e.message_ids.empty() && e.job_id == 0) {
    return absl::InvalidArgumentError("event names no message");
  }
  for (const std::string& m : e.message_ids) {
    if (m.size() > kMaxId) return absl::InvalidArgumentError("message id too long");
  }
  if ((e.type == "Bounce" || e.type == "Complaint") && e.recipients.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(e.type, " without recipients"));
  }
  for (const std::string& r : e.recipients) {
    if (r.size() > kMaxRecipient) return absl::InvalidArgumentError("recipient address too long");
  }
  return absl::OkStatus();
}

absl::StatusOr<ProviderEvent> Checked(ProviderEvent p) {
  if (p.event.detail.size() > 200) p.event.detail.resize(200);
  absl::Status st = Check(p);
  if (!st.ok()) return st;
  return p;
}

void AddRecipient(const std::string& r, FeedbackEvent* e) {
  if (!r.empty()) e->recipients.push_back(r);
}

}  // namespace

absl::StatusOr<ProviderEvent> ParsePostmark(const std::string& body) {
  auto j = ParseJson(body);
  if (!j.ok()) return j.status();
  if (!j->is_object()) return absl::InvalidArgumentError("body is not a JSON object");
  ProviderEvent p;
  FeedbackEvent& e = p.event;
  e.provider = "postmark";
  const std::string record = Str(*j, "RecordType");
  const std::string id = Str(*j, "ID");
  const std::string message_id = Str(*j, "MessageID");
  if (!message_id.empty()) e.message_ids.push_back(message_id);
  Tags(Obj(*j, "Metadata"), &e);
  if (record == "Bounce") {
    const std::string type = Str(*j, "Type");
    p.id = absl::StrCat("bounce:", id);
    p.at = Rfc3339(Str(*j, "BouncedAt"));
    if (type == "HardBounce" || type == "BadEmailAddress") {
      e.bounce_type = "Permanent";
    } else if (type == "SoftBounce" || type == "Transient" || type == "DnsError") {
      e.bounce_type = "Transient";
    }
    if (!e.bounce_type.empty()) e.type = "Bounce";
    e.detail = type;
    AddRecipient(Str(*j, "Email"), &e);
    if (id.empty()) p.id.clear();
  } else if (record == "SpamComplaint") {
    p.id = id.empty() ? "" : absl::StrCat("complaint:", id);
    p.at = Rfc3339(Str(*j, "BouncedAt"));
    e.type = "Complaint";
    e.detail = "SpamComplaint";
    AddRecipient(Str(*j, "Email"), &e);
  } else if (record == "Delivery") {
    const std::string to = Str(*j, "Recipient");
    p.id = message_id.empty() ? "" : absl::StrCat("delivery:", message_id, ":", to);
    p.at = Rfc3339(Str(*j, "DeliveredAt"));
    e.type = "Delivery";
    AddRecipient(to, &e);
  } else if (record.empty()) {
    return absl::InvalidArgumentError("not a Postmark webhook (no RecordType)");
  } else {
    p.id = absl::StrCat(absl::AsciiStrToLower(record), ":", id.empty() ? message_id : id);
  }
  if (!e.type.empty() && p.at == absl::InfinitePast()) {
    return absl::InvalidArgumentError("Postmark event without its time");
  }
  return Checked(std::move(p));
}

absl::StatusOr<std::vector<ProviderEvent>> ParseSendgrid(const std::string& body) {
  auto j = ParseJson(body);
  if (!j.ok()) return j.status();
  if (!j->is_array() || j->empty()) {
    return absl::InvalidArgumentError("body is not a JSON array of events");
  }
  std::vector<ProviderEvent> out;
  for (const json& ev : *j) {
    if (!ev.is_object()) return absl::InvalidArgumentError("an event is not a JSON object");
    ProviderEvent p;
    FeedbackEvent& e = p.event;
    e.provider = "sendgrid";
    p.id = Str(ev, "sg_event_id");
    int64_t at = 0;
    if (absl::SimpleAtoi(Str(ev, "timestamp"), &at)) p.at = absl::FromUnixSeconds(at);
    const std::string sg = Str(ev, "sg_message_id");
    if (!sg.empty()) {
      e.message_ids.push_back(sg);
      const size_t dot = sg.find('.');
      if (dot != std::string::npos && dot > 0) e.message_ids.push_back(sg.substr(0, dot));
    }
    Tags(ev, &e);
    const std::string event = Str(ev, "event");
    if (event == "bounce") {
      const std::string type = Str(ev, "type");
      e.type = "Bounce";
      e.bounce_type = type == "blocked" ? "Transient" : "Permanent";
      e.detail = absl::StrCat(type.empty() ? "bounce" : type, " ", Str(ev, "status"));
      AddRecipient(Str(ev, "email"), &e);
    } else if (event == "spamreport") {
      e.type = "Complaint";
      e.detail = "spamreport";
      AddRecipient(Str(ev, "email"), &e);
    } else if (event == "delivered") {
      e.type = "Delivery";
      AddRecipient(Str(ev, "email"), &e);
    }
    auto checked = Checked(std::move(p));
    if (!checked.ok()) return checked.status();
    out.push_back(*std::move(checked));
  }
  return out;
}

absl::StatusOr<ProviderEvent> ParseMailgun(const std::string& body, MailgunSignature* signature) {
  auto j = ParseJson(body);
  if (!j.ok()) return j.status();
  const json& sig = Obj(*j, "signature");
  const json& data = Obj(*j, "event-data");
  signature->timestamp = Str(sig, "timestamp");
  signature->token = Str(sig, "token");
  signature->signature = Str(sig, "signature");
  if (data.empty()) return absl::InvalidArgumentError("not a Mailgun webhook (no event-data)");
  ProviderEvent p;
  FeedbackEvent& e = p.event;
  e.provider = "mailgun";
  // The signature covers the timestamp and the token only, not the body: the token is the
  // event's key, so a signature is used once and cannot carry a second body (a retry of
  // Mailgun's after an answer was lost, signed anew, may be recorded twice: suppressions and
  // per-delivery counts are idempotent, a soft bounce would count twice).
  p.id = signature->token;
  if (data.contains("timestamp") && data["timestamp"].is_number()) {
    p.at = absl::FromUnixMicros(static_cast<int64_t>(data["timestamp"].get<double>() * 1e6));
  }
  const std::string message_id = Str(Obj(Obj(data, "message"), "headers"), "message-id");
  if (!message_id.empty()) {
    e.message_ids = {message_id, absl::StrCat("<", message_id, ">")};
  }
  Tags(Obj(data, "user-variables"), &e);
  const std::string event = Str(data, "event");
  const std::string severity = Str(data, "severity");
  if (event == "failed" && severity == "permanent") {
    const std::string reason = Str(data, "reason");
    e.type = "Bounce";
    e.bounce_type = reason == "old" ? "Transient" : "Permanent";
    const json& status = Obj(data, "delivery-status");
    e.detail = absl::StrCat(reason, " ", Str(status, "code"));
    AddRecipient(Str(data, "recipient"), &e);
  } else if (event == "complained") {
    e.type = "Complaint";
    e.detail = "complained";
    AddRecipient(Str(data, "recipient"), &e);
  } else if (event == "delivered") {
    e.type = "Delivery";
    AddRecipient(Str(data, "recipient"), &e);
  } else if (event.empty()) {
    return absl::InvalidArgumentError("Mailgun event-data without event");
  }
  return Checked(std::move(p));
}

absl::StatusOr<ProviderEvent> ParseResend(const std::string& body, const std::string& id) {
  auto j = ParseJson(body);
  if (!j.ok()) return j.status();
  const std::string type = Str(*j, "type");
  const json& data = Obj(*j, "data");
  if (type.empty()) return absl::InvalidArgumentError("not a Resend webhook (no type)");
  ProviderEvent p;
  FeedbackEvent& e = p.event;
  e.provider = "resend";
  p.id = id;
  p.at = Rfc3339(Str(*j, "created_at"));
  const std::string email_id = Str(data, "email_id");
  if (!email_id.empty()) e.message_ids.push_back(email_id);
  // Tags: {"name": "value"} in the events, or [{"name": ..., "value": ...}] as sent.
  auto tags = data.find("tags");
  if (tags != data.end() && tags->is_object()) Tags(*tags, &e);
  if (tags != data.end() && tags->is_array()) {
    json flat = json::object();
    for (const json& t : *tags) {
      if (t.is_object() && !Str(t, "name").empty()) flat[Str(t, "name")] = Str(t, "value");
    }
    Tags(flat, &e);
  }
  auto to = data.find("to");
  if (type == "email.bounced") {
    const json& bounce = Obj(data, "bounce");
    const std::string kind = Str(bounce, "type");
    e.type = "Bounce";
    e.bounce_type = kind == "Transient" || kind == "Undetermined" ? kind : "Permanent";
    e.detail = Str(bounce, "subType");
  } else if (type == "email.complained") {
    e.type = "Complaint";
    e.detail = "complained";
  } else if (type == "email.delivered") {
    e.type = "Delivery";
  }
  if (!e.type.empty() && to != data.end()) {
    if (to->is_string()) AddRecipient(to->get<std::string>(), &e);
    if (to->is_array()) {
      for (const json& r : *to) {
        if (r.is_string()) AddRecipient(r.get<std::string>(), &e);
      }
    }
  }
  return Checked(std::move(p));
}

absl::StatusOr<ProviderEvent> ParseHttpReport(const std::string& body, const std::string& id) {
  auto j = ParseJson(body);
  if (!j.ok()) return j.status();
  const std::string type = Str(*j, "type");
  if (!j->is_object() || type.empty()) {
    return absl::InvalidArgumentError("not a delivery report (no type)");
  }
  ProviderEvent p;
  FeedbackEvent& e = p.event;
  e.provider = "http";
  p.id = id;
  const std::string message_id = Str(*j, "message_id");
  if (!message_id.empty()) e.message_ids.push_back(message_id);
  e.group = Str(*j, "group");
  uint64_t job = 0;
  if (absl::SimpleAtoi(Str(*j, "job_id"), &job)) e.job_id = job;
  const std::string bounce = Str(*j, "bounce_type");
  if (type == "email.bounced") {
    if (bounce != "permanent" && bounce != "transient") {
      return absl::InvalidArgumentError("bounce_type must be \"permanent\" or \"transient\"");
    }
    e.type = "Bounce";
    e.bounce_type = bounce == "permanent" ? "Permanent" : "Transient";
  } else if (type == "email.complained") {
    e.type = "Complaint";
  } else if (type == "email.delivered") {
    e.type = "Delivery";
  }
  e.detail = Str(*j, "reason");
  auto recipients = j->find("recipients");
  if (recipients != j->end() && recipients->is_array()) {
    for (const json& r : *recipients) {
      if (r.is_string()) AddRecipient(r.get<std::string>(), &e);
    }
  }
  return Checked(std::move(p));
}

}  // namespace mailroom
