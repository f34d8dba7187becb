#include "sender/transport/smtp_transport.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sender/transport/curl_status.h"

namespace mailroom {
namespace {

std::unique_ptr<OAuth2TokenCache> TokenCacheFor(const TransportConfig& config) {
  const SmtpSettings& smtp = config.Get<SmtpSettings>();
  std::unique_ptr<OAuth2TokenSource> source;
  if (!smtp.oauth2_token_url.empty()) {
    source = ClientCredentialsSource(ClientCredentials{smtp.oauth2_token_url, smtp.oauth2_client_id,
                                                       smtp.oauth2_client_secret, smtp.oauth2_scope,
                                                       config.timeout});
  } else if (!smtp.oauth2_token_file.empty()) {
    source = TokenFileSource(smtp.oauth2_token_file);
  } else {
    return nullptr;
  }
  return std::make_unique<OAuth2TokenCache>(std::move(source), OAuth2TokenCache::Options{},
                                            RealClock::Get());
}

size_t Discard(char*, size_t size, size_t nmemb, void*) { return size * nmemb; }

}  // namespace

SmtpProbe ProbeSmtp(const TransportConfig& config, const std::string& bearer) {
  // The handle is cleaned up (QUIT sent, traced) first, while the trace and buffer it writes
  // to still exist.
  SmtpProbe probe;
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::unique_ptr<CURL, void (*)(CURL*)> c(curl_easy_init(), curl_easy_cleanup);
  if (c == nullptr) {
    probe.code = CURLE_FAILED_INIT;
    probe.status = absl::ResourceExhaustedError("curl_easy_init failed");
    return probe;
  }
  TraceSmtp(c.get(), &probe.trace);
  SetSmtpSessionOptions(c.get(), config, bearer, config.timeout);
  curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, errbuf);
  // With no recipient, a custom request is sent as a command of its own after AUTH: NOOP asks
  // nothing of the server and no mail transaction starts.
  curl_easy_setopt(c.get(), CURLOPT_CUSTOMREQUEST, "NOOP");
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, Discard);
  probe.code = curl_easy_perform(c.get());
  curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &probe.reply);
  probe.detail = errbuf;
  probe.status = SmtpStatus(probe.code, probe.reply, probe.trace, errbuf);
  return probe;
}

SmtpTransport::SmtpTransport(const TransportConfig& config)
    : config_(config), tokens_(TokenCacheFor(config)) {
  const int n = std::max(1, config.connections);
  for (int i = 0; i < n; ++i) {
    sessions_.push_back(std::make_unique<SmtpSession>(config));
    free_.push_back(i);
  }
}

SmtpTransport::~SmtpTransport() {
  // Goodbye on every connection at once, then one second at most for all of the "221"s.
  for (auto& s : sessions_) s->SendQuit();
  const absl::Time deadline = absl::Now() + std::min(absl::Seconds(1), config_.timeout);
  for (auto& s : sessions_) s->Quit(deadline);
}

absl::StatusOr<SendResult> SmtpTransport::Send(const OutgoingEmail& email) {
  int index = 0;
  {
    absl::MutexLock lock(&mu_);
    auto any_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !free_.empty(); };
    mu_.Await(absl::Condition(&any_free));
    index = free_.back();
    free_.pop_back();
  }
  absl::StatusOr<SendResult> r = SendOn(sessions_[index].get(), email);
  absl::MutexLock lock(&mu_);
  free_.push_back(index);
  return r;
}

absl::StatusOr<SendResult> SmtpTransport::SendOn(SmtpSession* session, const OutgoingEmail& email) {
  bool auth_refused = false;
  if (tokens_ == nullptr) return session->Send(email, "", &auth_refused);
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<std::string> token = tokens_->Get();
    if (!token.ok()) return ProviderError(absl::StrCat("smtp oauth2: ", token.status().message()));
    absl::StatusOr<SendResult> r = session->Send(email, *token, &auth_refused);
    // Refused at AUTH, nothing of the message went out: with a fresh token it may.
    if (!auth_refused || attempt == 2) return r;
    tokens_->Rejected(*token);
  }
}

}  // namespace mailroom
