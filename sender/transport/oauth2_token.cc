#include "sender/transport/oauth2_token.h"

#include <curl/curl.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http/curl_handle.h"
#include "common/http/http_client.h"
#include "common/log.h"
#include "nlohmann/json.hpp"
#include "sender/transport/curl_status.h"

namespace mailroom {
namespace {

// A token answer is a few kB; anything far larger is not one.
constexpr size_t kMaxAnswer = 1 << 20;

// A short printable excerpt of an issuer's words, fit for an error message and a log line.
std::string Excerpt(const std::string& s) {
  std::string out = s.substr(0, 200);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

class ClientCredentialsSourceImpl : public OAuth2TokenSource {
 public:
  explicit ClientCredentialsSourceImpl(ClientCredentials s) : s_(std::move(s)) { CurlGlobalInit(); }

  absl::StatusOr<OAuth2Token> Fetch() override {
    CurlHandle c(curl_easy_init());
    if (c == nullptr) return absl::UnavailableError("token endpoint: cannot create a curl handle");
    // The form carries the client secret: it lives only in this request and curl's copy. A
    // second client-credentials request would be harmless (it only asks for a token once
    // more), but a fresh handle has no kept-alive connection whose closing would call for one.
    OutboundRequest request;
    request.url = s_.token_url;
    request.protocols = "https,http";
    request.body = absl::StrCat(
        "grant_type=client_credentials&client_id=", Escape(c.get(), s_.client_id),
        "&client_secret=", Escape(c.get(), s_.client_secret), "&scope=", Escape(c.get(), s_.scope));
    request.content_type = "application/x-www-form-urlencoded";
    request.headers = {"Accept: application/json"};
    request.connect_timeout = s_.timeout;
    request.timeout = s_.timeout;
    request.max_body = kMaxAnswer;
    request.long_body = OutboundRequest::LongBody::kFail;
    const OutboundResult result = PerformOutbound(c.get(), request);
    std::fill(request.body.begin(), request.body.end(), '\0');
    if (result.code != CURLE_OK) {
      return absl::UnavailableError(
          absl::StrCat("token endpoint: ", CurlStatus(result.code, result.error).message()));
    }
    const long http = result.answer.status;
    const std::string& body = result.answer.body;
    auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (http != 200) {
      // RFC 6749 5.2: {"error": "invalid_client", "error_description": "..."}.
      std::string why;
      if (json.is_object() && json.contains("error") && json["error"].is_string()) {
        why = absl::StrCat(" ", Excerpt(json["error"].get<std::string>()));
        if (json.contains("error_description") && json["error_description"].is_string()) {
          why += absl::StrCat(": ", Excerpt(json["error_description"].get<std::string>()));
        }
      }
      return absl::UnavailableError(absl::StrCat("token endpoint: HTTP ", http, why));
    }
    if (!json.is_object() || !json.contains("access_token") || !json["access_token"].is_string() ||
        json["access_token"].get<std::string>().empty()) {
      return absl::UnavailableError("token endpoint: HTTP 200 without an access_token");
    }
    if (json.contains("token_type") && json["token_type"].is_string() &&
        !absl::EqualsIgnoreCase(json["token_type"].get<std::string>(), "Bearer")) {
      return absl::UnavailableError(absl::StrCat("token endpoint: token_type ",
                                                 Excerpt(json["token_type"].get<std::string>()),
                                                 " is not Bearer"));
    }
    OAuth2Token token{json["access_token"].get<std::string>()};
    // expires_in is a number (RFC 6749); some issuers send it as a string.
    double expires_in = -1;
    if (json.contains("expires_in")) {
      const auto& e = json["expires_in"];
      if (e.is_number()) expires_in = e.get<double>();
      if (e.is_string()) expires_in = std::atof(e.get<std::string>().c_str());
    }
    if (expires_in > 0) token.lifetime = absl::Seconds(expires_in);
    return token;
  }

 private:
  static std::string Escape(CURL* c, const std::string& s) {
    char* e = curl_easy_escape(c, s.data(), static_cast<int>(s.size()));
    std::string out = e == nullptr ? "" : e;
    curl_free(e);
    return out;
  }

  const ClientCredentials s_;
};

class TokenFileSourceImpl : public OAuth2TokenSource {
 public:
  explicit TokenFileSourceImpl(std::string path) : path_(std::move(path)) {}

  absl::StatusOr<OAuth2Token> Fetch() override {
    struct stat st;
    if (stat(path_.c_str(), &st) != 0) {
      return absl::UnavailableError(absl::StrCat("token file \"", path_, "\": cannot stat it"));
    }
    const Stamp stamp{st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
    if (!token_.empty() && stamp == stamp_) return OAuth2Token{token_};
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in)
      return absl::UnavailableError(absl::StrCat("token file \"", path_, "\": cannot read it"));
    std::string text(absl::StripAsciiWhitespace(ss.str()));
    if (absl::StartsWith(text, "{")) {
      auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      text.clear();
      if (json.is_object() && json.contains("access_token") && json["access_token"].is_string()) {
        text = json["access_token"].get<std::string>();
      }
    }
    if (text.empty() || text.find_first_of(" \t\r\n") != std::string::npos) {
      return absl::UnavailableError(absl::StrCat(
          "token file \"", path_, "\": holds no token (one line, or JSON with access_token)"));
    }
    token_ = std::move(text);
    stamp_ = stamp;
    return OAuth2Token{token_};
  }

 private:
  struct Stamp {
    ino_t ino = 0;
    off_t size = 0;
    time_t sec = 0;
    long nsec = 0;
    bool operator==(const Stamp& o) const {
      return ino == o.ino && size == o.size && sec == o.sec && nsec == o.nsec;
    }
  };
  const std::string path_;
  std::string token_;  // as read at stamp_
  Stamp stamp_;
};

}  // namespace

std::unique_ptr<OAuth2TokenSource> ClientCredentialsSource(ClientCredentials settings) {
  return std::make_unique<ClientCredentialsSourceImpl>(std::move(settings));
}

std::unique_ptr<OAuth2TokenSource> TokenFileSource(std::string path) {
  return std::make_unique<TokenFileSourceImpl>(std::move(path));
}

OAuth2TokenCache::OAuth2TokenCache(std::unique_ptr<OAuth2TokenSource> source, Options options,
                                   Clock* clock)
    : source_(std::move(source)), opt_(options), clock_(clock),
      backoff_(options.initial_backoff, options.max_backoff) {}

absl::StatusOr<std::string> OAuth2TokenCache::Get() {
  absl::MutexLock lock(&mu_);
  while (true) {
    const absl::Time now = clock_->Now();
    const bool valid = !token_.empty() && !rejected_ && now < expires_at_;
    if (valid && now < refresh_at_) return token_;
    if (fetching_) {
      // Another connection is fetching: an early refresh need not hold this one up.
      if (valid) return token_;
      auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !fetching_; };
      mu_.Await(absl::Condition(&done));
      continue;
    }
    if (now < retry_at_) {
      if (valid) return token_;
      return absl::UnavailableError(absl::StrCat(
          "no valid OAuth2 token (", last_error_, "; next attempt in ",
          absl::FormatDuration(absl::Ceil(retry_at_ - now, absl::Milliseconds(1))), ")"));
    }
    fetching_ = true;
    const std::string refused = rejected_ ? token_ : "";
    mu_.Unlock();
    // Measured from before the request: the issuer's clock started no later than this.
    const absl::Time started = clock_->Now();
    absl::StatusOr<OAuth2Token> got = source_->Fetch();
    mu_.Lock();
    fetching_ = false;
    if (got.ok() && !refused.empty() && got->value == refused) {
      got = absl::UnavailableError("the token source still has the token the server refused");
    }
    if (!got.ok()) {
      last_error_ = std::string(got.status().message());
      const absl::Duration delay = backoff_.NextBackOff();
      retry_at_ = clock_->Now() + delay;
      LogWarn("smtp oauth2 token request failed",
              {{"error", last_error_}, {"retry_in", absl::FormatDuration(delay)}});
      continue;  // serves the current token if it is still valid, else reports last_error_
    }
    if (got->value != token_) ++fetches_;
    token_ = std::move(got->value);
    rejected_ = false;
    backoff_.Reset();
    retry_at_ = absl::InfinitePast();
    const absl::Duration life = got->lifetime;
    if (life == absl::InfiniteDuration()) {
      expires_at_ = absl::InfiniteFuture();
      refresh_at_ = started + opt_.recheck;
    } else {
      expires_at_ = started + life;
      refresh_at_ = started + life - std::min(opt_.early, life / 5);
      LogInfo("smtp oauth2 token obtained", {{"expires_in", absl::FormatDuration(life)}});
    }
    return token_;
  }
}

void OAuth2TokenCache::Rejected(const std::string& token) {
  absl::MutexLock lock(&mu_);
  if (token == token_) rejected_ = true;
}

int64_t OAuth2TokenCache::fetches() const {
  absl::MutexLock lock(&mu_);
  return fetches_;
}

}  // namespace mailroom
