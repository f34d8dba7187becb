#include "sender/transport/provider_transport.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace mailroom {

ProviderTransport::ProviderTransport(const TransportConfig& config, const ProviderApi& api)
    : config_(config), api_(api), handles_(config.connections), loop_(config.connections) {}

absl::StatusOr<SendResult> ProviderTransport::Send(const OutgoingEmail& email) {
  OutboundRequest request = api_.request(email, config_);
  request.connect_timeout = config_.connect_timeout;
  request.timeout = AttemptTimeout(email, config_.timeout);
  CurlHandlePool::Loan handle = handles_.Acquire();
  auto answer = PerformHttp(handle.get(), request, &loop_);
  if (!answer.ok()) return answer.status();
  absl::Status status = api_.response_status(answer->status, answer->body);
  if (!status.ok()) return WithRetryAfter(std::move(status), RetryAfter(*answer, absl::Now()));
  const std::string id = UsableMessageId(api_.id_key != nullptr
                                             ? JsonString(answer->body, api_.id_key)
                                             : answer->Header(api_.id_header));
  return SendResult{id, id};
}

std::vector<std::pair<std::string, std::string>> ProviderTransport::Metadata(
    const OutgoingEmail& email, absl::string_view group) {
  auto tags = email.tags;
  if (!group.empty()) tags.emplace_back("mailroom_group", std::string(group));
  return tags;
}

std::string ProviderTransport::BaseUrl(const std::string& configured,
                                       absl::string_view default_url) {
  std::string url = configured.empty() ? std::string(default_url) : configured;
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

std::string ProviderTransport::DisplayName(absl::string_view mailbox) {
  const size_t lt = mailbox.rfind('<');
  if (lt == absl::string_view::npos) return "";
  absl::string_view name = absl::StripAsciiWhitespace(mailbox.substr(0, lt));
  if (name.size() >= 2 && name.front() == '"' && name.back() == '"') {
    name = name.substr(1, name.size() - 2);
  }
  return std::string(name);
}

std::string ProviderTransport::JsonString(absl::string_view body, const char* key) {
  auto json = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains(key) || !json[key].is_string()) return "";
  return json[key].get<std::string>();
}

OutboundRequest ProviderTransport::ApiRequest(const TransportConfig& config,
                                              absl::string_view default_url, absl::string_view path,
                                              std::vector<std::string> headers, bool post) {
  OutboundRequest r;
  r.url = absl::StrCat(BaseUrl(config.Get<ProviderSettings>().api_url, default_url), path);
  r.post = post;
  r.headers = std::move(headers);
  return r;
}

std::string ProviderTransport::BearerHeader(const TransportConfig& config) {
  return absl::StrCat("Authorization: Bearer ", config.Get<ProviderSettings>().api_key);
}

}  // namespace mailroom
