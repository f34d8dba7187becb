#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/clock.h"

namespace mailroom {

// An OAuth2 access token as a source hands it out. `value` is a secret: never log it.
struct OAuth2Token {
  std::string value;
  // The lifetime the issuer gave it (expires_in), measured from the request; Infinite when
  // the source does not know it (a token file).
  absl::Duration lifetime = absl::InfiniteDuration();
};

// Where access tokens for SMTP XOAUTH2 come from. Fetch() may block (a network request, a
// file read); its errors say what went wrong (HTTP status, the issuer's `error` code) and
// never carry a token or the client secret. Called by one thread at a time (OAuth2TokenCache).
class OAuth2TokenSource {
 public:
  virtual ~OAuth2TokenSource() = default;
  virtual absl::StatusOr<OAuth2Token> Fetch() = 0;
};

// Settings of the client-credentials grant (RFC 6749 4.4) as Microsoft Entra ID serves it.
struct ClientCredentials {
  std::string token_url;  // https://login.microsoftonline.com/TENANT/oauth2/v2.0/token
  std::string client_id;
  std::string client_secret;  // secret
  std::string scope;          // https://outlook.office365.com/.default
  absl::Duration timeout = absl::Seconds(10);
};

// POSTs grant_type=client_credentials with the client id, secret and scope (form-encoded) to
// the token URL and reads {access_token, expires_in, token_type} from the JSON answer. Errors
// are kUnavailable and carry the HTTP status and the answer's `error` code (invalid_client,
// ...), never the body as a whole.
std::unique_ptr<OAuth2TokenSource> ClientCredentialsSource(ClientCredentials settings);

// Reads the token from a file another program (a sidecar) keeps fresh: the token alone
// (surrounding white space ignored), or JSON with an `access_token` member. The file is read
// again only when it changed (modification time, size or inode: an atomic rename counts), so
// the cache may ask often. Errors: kUnavailable (missing, unreadable, empty).
std::unique_ptr<OAuth2TokenSource> TokenFileSource(std::string path);

// The current access token, shared by every SMTP connection of a transport. Get() hands out
// the cached token until it is due for a refresh: at 80 % of its lifetime, or 5 minutes
// before it expires when that is earlier (a token of unknown lifetime, from a file, is looked
// at again after `recheck`). One caller at a time fetches; the others keep using the current
// token while it is still valid, or wait for the fetch when it is not. A failed fetch is
// retried no sooner than after a backoff (1 s, doubling up to `max_backoff`), meanwhile the
// last token serves while it is valid. Rejected() marks a token the server refused, so the
// next Get() fetches a new one (once per token, however many connections saw the refusal).
//
// Logs one info line per token obtained (with its lifetime) and one warning per failed fetch
// (with the source's error); never a token or a secret. Thread-safe; time from `clock`.
class OAuth2TokenCache {
 public:
  struct Options {
    absl::Duration early = absl::Minutes(5);
    absl::Duration recheck = absl::Seconds(1);
    absl::Duration initial_backoff = absl::Seconds(1);
    absl::Duration max_backoff = absl::Seconds(60);
  };

  OAuth2TokenCache(std::unique_ptr<OAuth2TokenSource> source, Options options, Clock* clock);

  // A token to authenticate with now, or kUnavailable when there is none valid (the source
  // failed; the message says why, without secrets).
  absl::StatusOr<std::string> Get();
  // The server refused `token` (SMTP 535/534/530 on AUTH): do not hand it out again.
  void Rejected(const std::string& token);
  // Distinct tokens obtained so far (for tests and metrics).
  int64_t fetches() const;

 private:
  std::unique_ptr<OAuth2TokenSource> source_;
  const Options opt_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  bool rejected_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time expires_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time refresh_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool fetching_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Between failed fetches: exact (one issuer per transport, the tests give the delays).
  JitteredExponentialBackOffStrategy backoff_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  int64_t fetches_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mailroom
