#include "sender/transport/postmark_transport.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sender/transport/provider_entry.h"

namespace mailroom {
namespace {

constexpr char kDefaultUrl[] = "https://api.postmarkapp.com";

std::string TokenHeader(const TransportConfig& config) {
  return absl::StrCat("X-Postmark-Server-Token: ", config.Get<ProviderSettings>().api_key);
}

}  // namespace

std::string PostmarkTransport::Body(const OutgoingEmail& email, const TransportConfig& config) {
  const EmailContent& c = email.content;
  nlohmann::json metadata = nlohmann::json::object();
  for (const auto& [name, value] : Metadata(email, config.group)) metadata[name] = value;
  nlohmann::json body = {
      {"From", c.from.empty() ? email.from_address : c.from},
      {"To", email.to_address},
      {"Subject", c.subject},
      {"TextBody", c.text},
      {"HtmlBody", c.html},
      {"MessageStream", config.Get<ProviderSettings>().postmark_message_stream},
      {"Tag", c.action},
      {"Metadata", std::move(metadata)},
      {"TrackOpens", false},
      {"TrackLinks", "None"},
  };
  // Templates from a directory may hold bytes that are not UTF-8: replaced, never thrown.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

OutboundRequest Request(const OutgoingEmail& email, const TransportConfig& config) {
  OutboundRequest r = ProviderTransport::ApiRequest(
      config, kDefaultUrl, "/email", {"Accept: application/json", TokenHeader(config)});
  r.body = PostmarkTransport::Body(email, config);
  return r;
}

OutboundRequest CheckRequest(const TransportConfig& config) {
  return ProviderTransport::ApiRequest(config, kDefaultUrl, "/server",
                                       {"Accept: application/json", TokenHeader(config)},
                                       /*post=*/false);
}

absl::Status ResponseStatus(long http, const std::string& body) {
  auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  int64_t code = -1;
  if (json.is_object() && json.contains("ErrorCode") && json["ErrorCode"].is_number_integer()) {
    code = json["ErrorCode"].get<int64_t>();
  }
  const std::string message = ProviderTransport::JsonString(body, "Message");
  if (http >= 200 && http < 300 && code <= 0) return absl::OkStatus();
  const std::string what = absl::StrCat("postmark ", http,
                                        code >= 0 ? absl::StrCat(" ErrorCode ", code) : "", ": ",
                                        ReasonText(message.empty() ? body : message));
  if (http != 422 && !(http >= 200 && http < 300)) return HttpApiStatus(http, what);
  if (code == 406) return RecipientRejected(what);
  if (code == 10 || code == 100 || code == 400 || code == 401 || code == 405 || code == 412 ||
      code == 413 || absl::StrContains(absl::AsciiStrToLower(message), "message stream") ||
      absl::StrContains(message, "MessageStream")) {
    return ProviderError(what);
  }
  return absl::InvalidArgumentError(what);
}

}  // namespace

const ProviderApi kPostmarkApi = {"postmark",   kDefaultUrl, Request, ResponseStatus,
                                  CheckRequest, "MessageID", nullptr};

namespace {

SettingsTable PostmarkRows(const TransportVars& v) {
  return {{v.Mailroom("POSTMARK_MESSAGE_STREAM"), "outbound", "", "",
           v.Help("postmark: the transactional message stream's id")}};
}

absl::Status LoadPostmark(const Env& env, const TransportVars& v, ProviderSettings* s) {
  const std::string stream_var = v.Mailroom("POSTMARK_MESSAGE_STREAM");
  s->postmark_message_stream = env.String(FindSetting(PostmarkRows(v), stream_var));
  bool ok = !s->postmark_message_stream.empty() && s->postmark_message_stream.size() <= 100;
  for (char ch : s->postmark_message_stream) {
    if (!(absl::ascii_islower(ch) || absl::ascii_isdigit(ch) || ch == '-' || ch == '_')) ok = false;
  }
  if (!ok) return BadSetting(stream_var, "must be a stream id: a-z, 0-9, - or _ (at most 100)");
  return absl::OkStatus();
}

constexpr ProviderInfo kPostmark = {
    "postmark",
    &kPostmarkApi,
    "POSTMARK_SERVER_TOKEN",
    "postmark: the server's API token (required)",
    "POSTMARK_API_URL",
    "postmark: API base URL (default: Postmark's)",
    "server token",
    PostmarkRows,
    LoadPostmark,
    /*judge=*/nullptr,
    "whether MAILROOM_FROM has a confirmed sender signature (Postmark refuses the first email "
    "with ErrorCode 400 or 401)",
};

}  // namespace

constexpr TransportEntry kPostmarkEntry = ProviderEntry<kPostmark>();

}  // namespace mailroom
