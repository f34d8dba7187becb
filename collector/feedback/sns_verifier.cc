#include "collector/feedback/sns_verifier.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <iterator>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace mailroom {
namespace {

// How deeply an SNS message's JSON may nest: it is one object of strings.
constexpr int kMaxSnsJsonDepth = 4;

// A post refused by the cap on certificate fetches (SNS retries it).
absl::Status TooManyFetches() {
  return absl::UnavailableError("sns: too many signing certificate fetches; retry later");
}

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};

// Every refusal passes here: OpenSSL's thread-local error queue is emptied so that a failed
// check leaves nothing behind for the next, unrelated, OpenSSL call on this thread.
absl::Status Denied(absl::string_view why) {
  ERR_clear_error();
  return absl::PermissionDeniedError(absl::StrCat("sns: ", why));
}

// The caIssuers URI of `cert`'s Authority Information Access extension, or "".
std::string CaIssuersUri(X509* cert) {
  auto* aia = static_cast<AUTHORITY_INFO_ACCESS*>(
      X509_get_ext_d2i(cert, NID_info_access, nullptr, nullptr));
  std::string out;
  for (int i = 0; aia != nullptr && i < sk_ACCESS_DESCRIPTION_num(aia); ++i) {
    ACCESS_DESCRIPTION* ad = sk_ACCESS_DESCRIPTION_value(aia, i);
    if (OBJ_obj2nid(ad->method) == NID_ad_ca_issuers && ad->location->type == GEN_URI) {
      const ASN1_IA5STRING* uri = ad->location->d.uniformResourceIdentifier;
      out.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                 ASN1_STRING_length(uri));
      break;
    }
  }
  AUTHORITY_INFO_ACCESS_free(aia);
  return out;
}

// SNS's own hosts: sns.<region>.amazonaws.com (group 1: the region) and
// sns.cn-<...>.amazonaws.com.cn (group 2). An AWS region is two letters, one or more words and
// a number; S3's virtual hosts (sns.s3.amazonaws.com, sns.s3-accelerate.amazonaws.com) and
// other services' names do not have that form.
const std::regex& SnsHostPattern() {
  static const std::regex kSnsHost(R"(^sns\.(?:([a-z]{2}(?:-[a-z]+)+-[0-9]{1,2})\.amazonaws\.com|)"
                                   R"((cn(?:-[a-z]+)+-[0-9]{1,2})\.amazonaws\.com\.cn)$)");
  return kSnsHost;
}

// The authority of an absolute URL (what follows "scheme://" up to the path), lower-cased.
std::string UrlAuthority(absl::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == absl::string_view::npos) return "";
  absl::string_view rest = url.substr(scheme + 3);
  return absl::AsciiStrToLower(rest.substr(0, rest.find_first_of("/?#")));
}

// True when `url` starts with one of `schemes`, has no user info, and its authority
// (host[:port], case-insensitive) is in `extra_hosts` or its host matches `host_pattern`.
bool UrlOnHost(const std::string& url, std::initializer_list<absl::string_view> schemes,
               const std::vector<std::string>& extra_hosts, const std::regex& host_pattern) {
  absl::string_view rest = url;
  bool scheme_ok = false;
  for (absl::string_view scheme : schemes) {
    scheme_ok = scheme_ok || absl::ConsumePrefix(&rest, scheme);
  }
  if (!scheme_ok) return false;
  absl::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  if (authority.empty() || absl::StrContains(authority, "@")) return false;
  const std::string lower = absl::AsciiStrToLower(authority);
  for (const std::string& h : extra_hosts) {
    if (lower == absl::AsciiStrToLower(h)) return true;
  }
  return std::regex_match(lower, host_pattern);
}

// An issuer certificate may come over http or https (the chain check authenticates it), from
// Amazon's repository host names (crt.r2m02.amazontrust.com, ...) or the allow-list.
bool IssuerUrlAllowed(const std::string& url, const std::vector<std::string>& extra_hosts) {
  static const std::regex kAmazonTrust(R"(^([a-z0-9-]+\.)*amazontrust\.com$)");
  return UrlOnHost(url, {"http://", "https://"}, extra_hosts, kAmazonTrust);
}

// A DER or PEM certificate.
X509* ParseCertificate(const std::string& data) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data.data());
  if (X509* der = d2i_X509(nullptr, &p, static_cast<long>(data.size()))) return der;
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
  return PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
}

}  // namespace

absl::Status SnsVerifier::FetchFailed(absl::string_view what, const absl::Status& fetched,
                                      Failure* failure) {
  if (absl::IsUnavailable(fetched) || absl::IsDeadlineExceeded(fetched)) {
    *failure = Failure::kTransient;
    return absl::UnavailableError(
        absl::StrCat("sns: cannot fetch ", what, ": ", fetched.message()));
  }
  return Denied(absl::StrCat("cannot fetch ", what, ": ", fetched.message()));
}

absl::StatusOr<SnsMessage> ParseSnsMessage(const std::string& body) {
  // An SNS message is one object of strings: deeper nesting only costs the parser (its values
  // are discarded once the limit is passed).
  bool too_deep = false;
  auto j = nlohmann::json::parse(
      body,
      [&too_deep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        too_deep = too_deep || depth > kMaxSnsJsonDepth;
        return !too_deep;
      },
      /*allow_exceptions=*/false);
  if (too_deep) return absl::InvalidArgumentError("JSON nested too deeply");
  if (!j.is_object()) return absl::InvalidArgumentError("body is not a JSON object");
  SnsMessage m;
  auto field = [&](const char* name, std::string* out, bool* present = nullptr) -> bool {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return false;
    if (!it->is_string()) return false;
    *out = it->get<std::string>();
    if (present != nullptr) *present = true;
    return true;
  };
  if (!field("Type", &m.type)) return absl::InvalidArgumentError("Type missing");
  if (!field("MessageId", &m.message_id) || m.message_id.empty()) {
    return absl::InvalidArgumentError("MessageId missing");
  }
  field("TopicArn", &m.topic_arn);
  field("Message", &m.message);
  field("Timestamp", &m.timestamp);
  field("SignatureVersion", &m.signature_version);
  field("Signature", &m.signature);
  field("SigningCertURL", &m.signing_cert_url) || field("SigningCertUrl", &m.signing_cert_url);
  field("Subject", &m.subject, &m.has_subject);
  field("Token", &m.token);
  field("SubscribeURL", &m.subscribe_url);
  if (m.message_id.size() > 256) return absl::InvalidArgumentError("MessageId too long");
  return m;
}

std::string SnsStringToSign(const SnsMessage& m) {
  std::vector<std::pair<const char*, const std::string*>> fields;
  if (m.type == "Notification") {
    fields = {{"Message", &m.message}, {"MessageId", &m.message_id}};
    if (m.has_subject) fields.push_back({"Subject", &m.subject});
    fields.insert(fields.end(),
                  {{"Timestamp", &m.timestamp}, {"TopicArn", &m.topic_arn}, {"Type", &m.type}});
  } else if (m.type == "SubscriptionConfirmation" || m.type == "UnsubscribeConfirmation") {
    fields = {{"Message", &m.message},
              {"MessageId", &m.message_id},
              {"SubscribeURL", &m.subscribe_url},
              {"Timestamp", &m.timestamp},
              {"Token", &m.token},
              {"TopicArn", &m.topic_arn},
              {"Type", &m.type}};
  } else {
    return "";
  }
  std::string out;
  for (const auto& [k, v] : fields) absl::StrAppend(&out, k, "\n", *v, "\n");
  return out;
}

bool SnsUrlAllowed(const std::string& url, const std::vector<std::string>& extra_hosts) {
  return UrlOnHost(url, {"https://"}, extra_hosts, SnsHostPattern());
}

bool SnsCertUrlAllowed(const std::string& url, const std::vector<std::string>& extra_hosts) {
  static const std::regex kCertPath(R"(^/SimpleNotificationService-[0-9a-f]{1,64}\.pem$)");
  if (!SnsUrlAllowed(url, extra_hosts)) return false;
  // The path starts where the authority ends ("https://" is known to be there).
  const size_t path = url.find_first_of("/?#", std::string("https://").size());
  return path != std::string::npos && std::regex_match(url.substr(path), kCertPath);
}

std::string SnsUrlRegion(const std::string& url) {
  std::smatch m;
  const std::string host = UrlAuthority(url);
  if (!std::regex_match(host, m, SnsHostPattern())) return "";
  return m[1].matched ? m[1].str() : m[2].str();
}

std::string TopicArnRegion(const std::string& topic_arn) {
  std::vector<std::string> parts = absl::StrSplit(topic_arn, ':');
  return parts.size() == 6 && parts[0] == "arn" && parts[2] == "sns" ? parts[3] : "";
}

std::vector<std::string> SnsCertificateNames(const std::string& cert_url) {
  std::vector<std::string> names = {"sns.amazonaws.com"};
  const std::string region = SnsUrlRegion(cert_url);
  if (region.empty()) return names;
  if (absl::StartsWith(region, "cn-")) {
    names.push_back(absl::StrCat("sns-", region, ".amazonaws.com.cn"));
  } else if (absl::StartsWith(region, "us-gov-")) {
    names.push_back("sns-us-gov-west-1.amazonaws.com");
  } else {
    names.push_back(absl::StrCat("sns-signing.", region, ".amazonaws.com"));
  }
  return names;
}

struct SnsVerifier::Key {
  std::unique_ptr<EVP_PKEY, PkeyFree> pkey;
  absl::Time not_after;
};

SnsVerifier::SnsVerifier(SnsVerifierOptions options, UrlFetcher fetch,
                         std::function<absl::Time()> now, UrlFetcher fetch_issuer)
    : options_(std::move(options)), fetch_(std::move(fetch)),
      now_(now ? std::move(now) : [] { return absl::Now(); }),
      fetch_issuer_(std::move(fetch_issuer)) {}

SnsVerifier::~SnsVerifier() = default;

bool SnsVerifier::TakeFetch(bool force) {
  const absl::Time now = now_();
  // A clock set back forgets the starts after it.
  if (!fetch_starts_.empty() && now < fetch_starts_.back()) fetch_starts_.clear();
  while (!fetch_starts_.empty() && now - fetch_starts_.front() >= absl::Seconds(1)) {
    fetch_starts_.pop_front();
  }
  if (!force && fetch_starts_.size() >= static_cast<size_t>(options_.max_fetches_per_second)) {
    return false;
  }
  fetch_starts_.push_back(now);
  return true;
}

void SnsVerifier::Ask(const std::string& url) {
  const uint64_t seq = ++asks_seen_;
  auto [it, fresh] = waiting_.try_emplace(url);
  Waiting& w = it->second;
  if (fresh) {
    w.first = seq;
  } else {
    recent_.erase(w.last);
  }
  ++w.asks;
  w.last = seq;
  recent_.emplace(w.last, url);
  if (waiting_.size() > static_cast<size_t>(options_.max_waiting_urls)) {
    StopWaiting(std::string(recent_.begin()->second));
  }
}

void SnsVerifier::StopWaiting(const std::string& url) {
  auto it = waiting_.find(url);
  if (it == waiting_.end()) return;
  recent_.erase(it->second.last);
  waiting_.erase(it);
}

std::string SnsVerifier::MostAsked() const {
  const std::pair<const std::string, Waiting>* best = nullptr;
  for (const auto& entry : waiting_) {
    const Waiting& w = entry.second;
    if (best == nullptr || w.asks > best->second.asks ||
        (w.asks == best->second.asks && w.first < best->second.first)) {
      best = &entry;
    }
  }
  return best == nullptr ? std::string() : best->first;
}

absl::StatusOr<std::shared_ptr<SnsVerifier::Key>> SnsVerifier::KeyFor(const std::string& url) {
  std::string turn;  // the URL whose certificate this post fetches
  bool retry = false;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = now_();
    auto it = keys_.find(url);
    if (it != keys_.end() && it->second->not_after > now) return it->second;
    auto failed = failed_.find(url);
    if (failed != failed_.end() && failed->second.until > now) return failed->second.status;
    // Another post is fetching it: no second fetch.
    if (loading_.count(url) != 0) return TooManyFetches();
    retry = failed != failed_.end() && failed->second.retry_free;
    if (retry) {
      TakeFetch(/*force=*/true);
      turn = url;
    } else {
      // The post asks; the fetch the cap allows (if any) goes to the most asked URL.
      Ask(url);
      if (!TakeFetch(/*force=*/false)) return TooManyFetches();
      turn = MostAsked();
    }
    StopWaiting(turn);
    loading_.insert(turn);
  }
  auto key = Load(turn, retry);
  if (turn == url) return key;
  return TooManyFetches();
}

absl::StatusOr<std::shared_ptr<SnsVerifier::Key>> SnsVerifier::Load(const std::string& url,
                                                                    bool retry) {
  Failure failure = Failure::kDefinite;
  auto key = LoadKey(url, &failure);
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  loading_.erase(url);
  if (key.ok()) {
    keys_[url] = *key;
    failed_.erase(url);
    return key;
  }
  // Forget what has run out; the cap on fetches bounds what is left.
  for (auto it = failed_.begin(); it != failed_.end();) {
    it = it->second.forget <= now ? failed_.erase(it) : std::next(it);
  }
  const bool transient = failure == Failure::kTransient;
  failed_[url] = {key.status(),
                  now + (transient ? options_.transient_retry : options_.failed_fetch_ttl),
                  now + options_.failed_fetch_ttl, transient && !retry};
  return key;
}

absl::StatusOr<std::shared_ptr<SnsVerifier::Key>> SnsVerifier::LoadKey(const std::string& url,
                                                                       Failure* failure) {
  auto pem = fetch_(url);
  if (!pem.ok()) return FetchFailed("the signing certificate", pem.status(), failure);
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) return Denied("the signing certificate is not a PEM certificate");
  // Intermediates served with it (as a chain file) help build the path to the trust store.
  std::unique_ptr<STACK_OF(X509), StackFree> chain(sk_X509_new_null());
  while (X509* extra = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    sk_X509_push(chain.get(), extra);
  }
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  if (options_.ca_file.empty()) {
    X509_STORE_set_default_paths(store.get());
  } else if (X509_STORE_load_file(store.get(), options_.ca_file.c_str()) != 1) {
    return absl::FailedPreconditionError("sns: cannot read the CA file");
  }
  auto verify = [&]() -> int {
    std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
    X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), chain.get());
    X509_STORE_CTX_set_time(ctx.get(), 0, absl::ToTimeT(now_()));
    return X509_verify_cert(ctx.get()) == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx.get());
  };
  int err = verify();
  if (err == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY && fetch_issuer_ != nullptr &&
      sk_X509_num(chain.get()) == 0) {
    const std::string issuer_url = CaIssuersUri(cert.get());
    if (IssuerUrlAllowed(issuer_url, options_.extra_hosts)) {
      {
        // Part of the certificate's fetch, which the cap has allowed: counted, not refused.
        absl::MutexLock lock(&mu_);
        TakeFetch(/*force=*/true);
      }
      auto issuer = fetch_issuer_(issuer_url);
      if (!issuer.ok()) {
        return FetchFailed("the signing certificate's issuer", issuer.status(), failure);
      }
      if (X509* intermediate = ParseCertificate(*issuer)) {
        sk_X509_push(chain.get(), intermediate);
        err = verify();
      }
    }
  }
  if (err != X509_V_OK) {
    return Denied(absl::StrCat("the signing certificate is not trusted: ",
                               X509_verify_cert_error_string(err)));
  }
  bool named = false;
  for (const std::string& name : SnsCertificateNames(url)) {
    named = named ||
            X509_check_host(cert.get(), name.data(), name.size(),
                            X509_CHECK_FLAG_NO_WILDCARDS | X509_CHECK_FLAG_ALWAYS_CHECK_SUBJECT,
                            nullptr) == 1;
  }
  if (!named) return Denied("the signing certificate does not name sns.amazonaws.com");
  auto key = std::make_shared<Key>();
  key->pkey.reset(X509_get_pubkey(cert.get()));
  if (key->pkey == nullptr || EVP_PKEY_base_id(key->pkey.get()) != EVP_PKEY_RSA) {
    return Denied("the signing certificate has no RSA key");
  }
  time_t not_after = 0;
  ASN1_TIME* na = X509_get_notAfter(cert.get());
  struct tm tm;
  if (ASN1_TIME_to_tm(na, &tm) == 1) not_after = timegm(&tm);
  key->not_after = absl::FromTimeT(not_after);
  return key;
}

absl::Status SnsVerifier::Verify(const SnsMessage& m) {
  // The operator's topics first: a message from any other topic is refused before anything
  // else is looked at or fetched.
  if (std::find(options_.topic_arns.begin(), options_.topic_arns.end(), m.topic_arn) ==
      options_.topic_arns.end()) {
    return Denied("TopicArn not allowed");
  }
  const std::string to_sign = SnsStringToSign(m);
  if (to_sign.empty()) {
    return Denied(
        absl::StrCat("unknown message type \"", absl::CEscape(m.type.substr(0, 40)), "\""));
  }
  if (m.signature.empty() || m.signature_version.empty() || m.signing_cert_url.empty()) {
    return Denied("unsigned message");
  }
  const EVP_MD* md = m.signature_version == "1"   ? EVP_sha1()
                     : m.signature_version == "2" ? EVP_sha256()
                                                  : nullptr;
  if (md == nullptr) return Denied("unknown SignatureVersion");
  if (!SnsCertUrlAllowed(m.signing_cert_url, options_.extra_hosts)) {
    return Denied("SigningCertURL is not "
                  "https://sns.<region>.amazonaws.com/SimpleNotificationService-<hex>.pem");
  }
  const std::string cert_region = SnsUrlRegion(m.signing_cert_url);
  if (!cert_region.empty() && cert_region != TopicArnRegion(m.topic_arn)) {
    return Denied("SigningCertURL is not in the TopicArn's region");
  }
  absl::Time at;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, m.timestamp, &at, &err)) {
    return Denied("Timestamp is not an ISO 8601 time");
  }
  const absl::Time now = now_();
  if (at < now - options_.max_age) return Denied("message expired (Timestamp too old)");
  if (at > now + options_.max_clock_skew) return Denied("Timestamp in the future");
  std::string signature;
  if (!absl::Base64Unescape(m.signature, &signature) || signature.empty()) {
    return Denied("Signature is not base64");
  }
  auto key = KeyFor(m.signing_cert_url);
  if (!key.ok()) return key.status();
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, md, nullptr, (*key)->pkey.get()) != 1 ||
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                       signature.size(), reinterpret_cast<const unsigned char*>(to_sign.data()),
                       to_sign.size()) != 1) {
    return Denied("signature does not match");
  }
  return absl::OkStatus();
}

}  // namespace mailroom
