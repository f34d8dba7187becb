#include "collector/feedback/testing/sns_signer.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdlib>

#include "absl/strings/escaping.h"
#include "nlohmann/json.hpp"

namespace mailroom::testing {
namespace {

std::string Pem(X509* x) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, x);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data, n);
  BIO_free(b);
  return out;
}

X509* MakeCert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, bool ca,
               const std::string& issuer_url = "", const std::string& dns_name = "") {
  X509* x = X509_new();
  X509_set_version(x, 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600L * 24 * 30);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509_set_issuer_name(x, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer != nullptr ? issuer : x, x, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints,
                                            ca ? "critical,CA:TRUE" : "CA:FALSE");
  X509_add_ext(x, ext, -1);
  X509_EXTENSION_free(ext);
  if (!issuer_url.empty()) {
    const std::string aia = "caIssuers;URI:" + issuer_url;
    ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_info_access, aia.c_str());
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (!dns_name.empty()) {
    const std::string san = "DNS:" + dns_name;
    ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, san.c_str());
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(x, issuer_key, EVP_sha256());
  return x;
}

}  // namespace

struct SnsSigner::Keys {
  EVP_PKEY* ca = nullptr;
  EVP_PKEY* intermediate = nullptr;
  EVP_PKEY* leaf = nullptr;
  X509* issuer = nullptr;          // the CA or the intermediate: it issues the signing certificate
  EVP_PKEY* issuer_key = nullptr;  // not owned: ca or intermediate
  std::string issuer_url;
  ~Keys() {
    X509_free(issuer);
    EVP_PKEY_free(ca);
    EVP_PKEY_free(intermediate);
    EVP_PKEY_free(leaf);
  }
};

SnsSigner::SnsSigner(const std::string& issuer_url) : keys_(std::make_unique<Keys>()) {
  keys_->ca = EVP_RSA_gen(2048);
  keys_->leaf = EVP_RSA_gen(2048);
  X509* ca = MakeCert(keys_->ca, "mailroom test SNS CA", nullptr, keys_->ca, true);
  X509* issuer = ca;
  EVP_PKEY* issuer_key = keys_->ca;
  if (!issuer_url.empty()) {
    keys_->intermediate = EVP_RSA_gen(2048);
    issuer = MakeCert(keys_->intermediate, "mailroom test SNS intermediate", ca, keys_->ca, true);
    issuer_key = keys_->intermediate;
    unsigned char* der = nullptr;
    int n = i2d_X509(issuer, &der);
    intermediate_der_.assign(reinterpret_cast<char*>(der), n);
    OPENSSL_free(der);
  }
  keys_->issuer = issuer == ca ? X509_dup(ca) : issuer;
  keys_->issuer_key = issuer_key;
  keys_->issuer_url = issuer_url;
  ca_pem_ = Pem(ca);
  cert_pem_ = CertificateNamed("sns.amazonaws.com");
  X509_free(ca);
}

std::string SnsSigner::CertificateNamed(const std::string& cn, const std::string& dns_name) {
  X509* leaf = MakeCert(keys_->leaf, cn.c_str(), keys_->issuer, keys_->issuer_key, false,
                        keys_->issuer_url, dns_name);
  std::string pem = Pem(leaf);
  X509_free(leaf);
  return pem;
}

SnsSigner::~SnsSigner() = default;

void SnsSigner::Sign(SnsMessage& m, int version) {
  m.signature_version = std::to_string(version);
  const std::string to_sign = SnsStringToSign(m);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  size_t len = 0;
  EVP_DigestSignInit(ctx, nullptr, version == 1 ? EVP_sha1() : EVP_sha256(), nullptr, keys_->leaf);
  EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(to_sign.data()),
                 to_sign.size());
  std::string sig(len, '\0');
  EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                 reinterpret_cast<const unsigned char*>(to_sign.data()), to_sign.size());
  sig.resize(len);
  EVP_MD_CTX_free(ctx);
  m.signature = absl::Base64Escape(sig);
}

SnsMessage SnsSigner::Notification(const std::string& message_id, const std::string& message,
                                   const std::string& cert_url, absl::Time at, int version) {
  SnsMessage m;
  m.type = "Notification";
  m.message_id = message_id;
  m.topic_arn = kTopicArn;
  m.message = message;
  m.timestamp = absl::FormatTime("%Y-%m-%d%ET%H:%M:%E3SZ", at, absl::UTCTimeZone());
  m.signing_cert_url = cert_url;
  Sign(m, version);
  return m;
}

SnsMessage SnsSigner::Confirmation(const std::string& message_id, const std::string& subscribe_url,
                                   const std::string& cert_url, absl::Time at, int version) {
  SnsMessage m;
  m.type = "SubscriptionConfirmation";
  m.message_id = message_id;
  m.token = "2336412f37fb687f5d51e6e2425dacbba";
  m.topic_arn = kTopicArn;
  m.message = "You have chosen to subscribe to the topic. To confirm, visit the SubscribeURL.";
  m.subscribe_url = subscribe_url;
  m.timestamp = absl::FormatTime("%Y-%m-%d%ET%H:%M:%E3SZ", at, absl::UTCTimeZone());
  m.signing_cert_url = cert_url;
  Sign(m, version);
  return m;
}

std::string SnsSigner::Body(const SnsMessage& m) {
  nlohmann::json j = {{"Type", m.type},           {"MessageId", m.message_id},
                      {"TopicArn", m.topic_arn},  {"Message", m.message},
                      {"Timestamp", m.timestamp}, {"SignatureVersion", m.signature_version},
                      {"Signature", m.signature}, {"SigningCertURL", m.signing_cert_url}};
  if (m.has_subject) j["Subject"] = m.subject;
  if (!m.token.empty()) j["Token"] = m.token;
  if (!m.subscribe_url.empty()) j["SubscribeURL"] = m.subscribe_url;
  return j.dump();
}

}  // namespace mailroom::testing
