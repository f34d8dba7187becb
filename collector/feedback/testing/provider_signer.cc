#include "collector/feedback/testing/provider_signer.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/hmac.h"
#include "common/http/curl_handle.h"
#include "common/http/http_client.h"
#include "nlohmann/json.hpp"

namespace mailroom::testing {

SendgridSigner::SendgridSigner() : key_(EVP_EC_gen("P-256")) {}
SendgridSigner::~SendgridSigner() { EVP_PKEY_free(key_); }

std::string SendgridSigner::PublicKey() const {
  unsigned char* der = nullptr;
  const int n = i2d_PUBKEY(key_, &der);
  std::string out = absl::Base64Escape(std::string(reinterpret_cast<char*>(der), n));
  OPENSSL_free(der);
  return out;
}

std::vector<std::string> SendgridSigner::Headers(const std::string& body, absl::Time at) const {
  const std::string ts = absl::StrCat(absl::ToUnixSeconds(at));
  const std::string content = ts + body;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  size_t len = 0;
  EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key_);
  EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(content.data()),
                 content.size());
  std::string sig(len, '\0');
  EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                 reinterpret_cast<const unsigned char*>(content.data()), content.size());
  EVP_MD_CTX_free(ctx);
  sig.resize(len);
  return {absl::StrCat("X-Twilio-Email-Event-Webhook-Signature: ", absl::Base64Escape(sig)),
          absl::StrCat("X-Twilio-Email-Event-Webhook-Timestamp: ", ts)};
}

std::vector<std::string> StandardWebhookHeaders(const std::string& prefix,
                                                const std::string& secret, const std::string& id,
                                                const std::string& body, absl::Time at) {
  std::string key;
  absl::Base64Unescape(secret.substr(6), &key);
  const std::string ts = absl::StrCat(absl::ToUnixSeconds(at));
  return {absl::StrCat(prefix, "id: ", id), absl::StrCat(prefix, "timestamp: ", ts),
          absl::StrCat(prefix, "signature: v1,",
                       absl::Base64Escape(HmacSha256(key, id + "." + ts + "." + body)))};
}

std::string MailgunSigned(const std::string& body, const std::string& key, absl::Time at,
                          const std::string& token) {
  nlohmann::json j = nlohmann::json::parse(body);
  const std::string ts = absl::StrCat(absl::ToUnixSeconds(at));
  j["signature"] = {{"timestamp", ts},
                    {"token", token},
                    {"signature", absl::BytesToHexString(HmacSha256(key, ts + token))}};
  return j.dump();
}

std::vector<std::string> PostmarkHeaders(const std::string& credentials) {
  return {absl::StrCat("Authorization: Basic ", absl::Base64Escape(credentials))};
}

WebhookAnswer PostWebhook(const std::string& url, const std::string& body,
                          const std::vector<std::string>& headers, const std::string& ca_file,
                          const std::string& source) {
  OutboundRequest request;
  request.url = url;
  request.body = body;
  // What libcurl sends for a form body when the caller names no type.
  request.content_type = "application/x-www-form-urlencoded";
  request.headers = headers;
  request.ca_file = ca_file;
  request.connect_timeout = absl::Seconds(10);
  request.timeout = absl::Seconds(10);
  request.max_body = 1 << 20;
  CurlGlobalInit();
  CurlHandle c(curl_easy_init());
  if (!source.empty()) curl_easy_setopt(c.get(), CURLOPT_INTERFACE, source.c_str());
  OutboundResult result = PerformOutbound(c.get(), request);
  WebhookAnswer a;
  a.status = result.answer.status;
  a.body = std::move(result.answer.body);
  while (!a.body.empty() && a.body.back() == '\n') a.body.pop_back();
  return a;
}

}  // namespace mailroom::testing
