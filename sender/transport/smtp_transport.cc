#include "sender/transport/smtp_transport.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sender/transport/curl_status.h"

namespace mailroom {
namespace {

struct Upload {
  const std::string* data;
  size_t offset = 0;
};

size_t ReadBody(char* buf, size_t size, size_t nitems, void* userdata) {
  auto* up = static_cast<Upload*>(userdata);
  size_t n = std::min(size * nitems, up->data->size() - up->offset);
  // NOLINTNEXTLINE(bugprone-not-null-terminated-result): curl's buffer holds bytes, not a string.
  std::memcpy(buf, up->data->data() + up->offset, n);
  up->offset += n;
  return n;
}

std::unique_ptr<OAuth2TokenCache> TokenCacheFor(const TransportConfig& config) {
  std::unique_ptr<OAuth2TokenSource> source;
  if (!config.smtp_oauth2_token_url.empty()) {
    source = ClientCredentialsSource(ClientCredentials{config.smtp_oauth2_token_url,
                                                       config.smtp_oauth2_client_id,
                                                       config.smtp_oauth2_client_secret,
                                                       config.smtp_oauth2_scope, config.timeout});
  } else if (!config.smtp_oauth2_token_file.empty()) {
    source = TokenFileSource(config.smtp_oauth2_token_file);
  } else {
    return nullptr;
  }
  return std::make_unique<OAuth2TokenCache>(std::move(source), OAuth2TokenCache::Options{},
                                            RealClock::Get());
}

// The options of a session with the server (URL, TLS, AUTH, timeouts): the same for a message
// and for a probe. `bearer`, when not empty, is the XOAUTH2 token; strings must outlive the
// transfer.
void SetSessionOptions(CURL* c, const TransportConfig& config, const std::string& bearer,
                       absl::Duration timeout) {
  curl_easy_setopt(c, CURLOPT_URL, config.smtp_url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USE_SSL, config.smtp_require_tls ? CURLUSESSL_ALL : CURLUSESSL_TRY);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(config.connect_timeout)));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(absl::ToInt64Milliseconds(timeout)));
  if (!bearer.empty()) {
    // Microsoft 365 offers XOAUTH2 only; Google offers OAUTHBEARER too: one mechanism for both.
    curl_easy_setopt(c, CURLOPT_USERNAME, config.smtp_username.c_str());
    curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, bearer.c_str());
    curl_easy_setopt(c, CURLOPT_LOGIN_OPTIONS, "AUTH=XOAUTH2");
  } else if (!config.smtp_username.empty()) {
    curl_easy_setopt(c, CURLOPT_USERNAME, config.smtp_username.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, config.smtp_password.c_str());
  }
  if (!config.smtp_ca_file.empty()) {
    curl_easy_setopt(c, CURLOPT_CAINFO, config.smtp_ca_file.c_str());
  }
  if (config.smtp_insecure_skip_verify) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
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
  SetSessionOptions(c.get(), config, bearer, config.timeout);
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
    : config_(config), tokens_(TokenCacheFor(config)), handles_(config.connections) {
  loops_.reserve(handles_.size());
  for (int i = 0; i < handles_.size(); ++i) {
    loops_.push_back(std::make_unique<CurlMultiLoop>(/*max_connections=*/1));
  }
}

absl::StatusOr<SendResult> SmtpTransport::Send(const OutgoingEmail& email) {
  CurlHandlePool::Loan handle = handles_.Acquire();
  bool auth_refused = false;
  if (tokens_ == nullptr) return Attempt(handle.get(), handle.index(), email, "", &auth_refused);
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<std::string> token = tokens_->Get();
    if (!token.ok()) return ProviderError(absl::StrCat("smtp oauth2: ", token.status().message()));
    absl::StatusOr<SendResult> r = Attempt(handle.get(), handle.index(), email, *token,
                                           &auth_refused);
    // Refused at AUTH, nothing of the message went out: with a fresh token it may.
    if (!auth_refused || attempt == 2) return r;
    tokens_->Rejected(*token);
    curl_easy_reset(handle.get());
  }
}

absl::StatusOr<SendResult> SmtpTransport::Attempt(CURL* c, int index, const OutgoingEmail& email,
                                                  const std::string& bearer, bool* auth_refused) {
  // Options are set per message on a handle that keeps its connection between messages.
  char errbuf[CURL_ERROR_SIZE] = {0};
  SmtpTrace trace;
  TraceSmtp(c, &trace);
  Upload up{&email.mime};
  CurlSlist rcpt(curl_slist_append(nullptr, absl::StrCat("<", email.to_address, ">").c_str()));
  const std::string from = absl::StrCat("<", email.from_address, ">");
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_MAIL_FROM, from.c_str());
  curl_easy_setopt(c, CURLOPT_MAIL_RCPT, rcpt.get());
  curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, ReadBody);
  curl_easy_setopt(c, CURLOPT_READDATA, &up);
  curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(email.mime.size()));
  SetSessionOptions(c, config_, bearer, AttemptTimeout(email, config_.timeout));
  CURLcode rc = loops_[index]->Perform(c);
  long reply = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply);
  trace.message_sent = up.offset == email.mime.size();
  *auth_refused = rc != CURLE_OK && trace.command == "AUTH" &&
                  (reply == 530 || reply == 534 || reply == 535);
  if (rc != CURLE_OK) return SmtpStatus(rc, reply, trace, errbuf);
  return SendResult{trace.reply.empty() ? absl::StrCat(reply) : trace.reply};
}

}  // namespace mailroom
