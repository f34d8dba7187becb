#include "common/http/http_client.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http/curl_body.h"
#include "common/http/curl_handle.h"

namespace mailroom {
namespace {

// The answer's body as it comes, within the request's cap.
struct BodySink {
  std::string* out;
  size_t max;
  bool fail_when_long;
  bool too_large = false;
};

size_t Collect(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* sink = static_cast<BodySink*>(userdata);
  const size_t n = size * nmemb;
  if (sink->fail_when_long && sink->out->size() + n > sink->max) {
    sink->too_large = true;
    return 0;  // ends the transfer (CURLE_WRITE_ERROR)
  }
  sink->out->append(ptr, std::min(n, sink->max - std::min(sink->max, sink->out->size())));
  return n;
}

size_t CollectHeader(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* answer = static_cast<OutboundAnswer*>(userdata);
  absl::string_view line(ptr, size * nmemb);
  // A new status line (after "100 Continue", say) starts the headers afresh.
  if (absl::StartsWith(line, "HTTP/")) answer->headers.clear();
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos && answer->headers.size() < 100) {
    answer->headers.emplace_back(absl::AsciiStrToLower(line.substr(0, colon)),
                                 std::string(absl::StripAsciiWhitespace(line.substr(colon + 1))));
  }
  return size * nmemb;
}

long Millis(absl::Duration d) { return static_cast<long>(absl::ToInt64Milliseconds(d)); }

// The request's header lines as libcurl takes them.
CurlSlist HeaderList(const OutboundRequest& request) {
  CurlSlist list(nullptr);
  std::vector<std::string> lines = request.headers;
  if (request.post) {
    lines.push_back(absl::StrCat("Content-Type: ", request.content_type));
    if (!request.expect_continue) lines.push_back("Expect:");
  }
  for (const std::string& h : lines) list.reset(curl_slist_append(list.release(), h.c_str()));
  return list;
}

// Where the connection may go and how it is checked.
void SetConnection(CURL* c, const OutboundRequest& request) {
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, request.protocols.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!request.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, request.ca_file.c_str());
  SetHttpConnectionOptions(c);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, Millis(request.connect_timeout));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, Millis(std::max(absl::Milliseconds(1), request.timeout)));
}

}  // namespace

std::string OutboundAnswer::Header(absl::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return "";
}

OutboundResult PerformOutbound(CURL* c, const OutboundRequest& request,
                               absl::FunctionRef<CURLcode(CURL*)> perform) {
  const CurlSlist headers = HeaderList(request);
  char errbuf[CURL_ERROR_SIZE] = {0};
  OutboundResult result;
  BodySink sink{&result.answer.body, request.max_body,
                request.long_body == OutboundRequest::LongBody::kFail};
  SetConnection(c, request);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  // Read through a callback that refuses a rewind once read: libcurl never sends it twice.
  CurlBody body(request.body);
  if (request.post) {
    body.Attach(c);
  } else {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  if (!request.basic_auth.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(c, CURLOPT_USERPWD, request.basic_auth.c_str());
  }
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, CollectHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &result.answer);
  result.code = perform(c);
  // The handle outlives this frame: it must not point into it.
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, static_cast<char*>(nullptr));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(nullptr));
  result.error = errbuf;
  result.body_too_large = sink.too_large;
  if (result.code == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &result.answer.status);
  return result;
}

OutboundResult PerformOutbound(CURL* c, const OutboundRequest& request) {
  return PerformOutbound(c, request, [](CURL* easy) { return curl_easy_perform(easy); });
}

OutboundResult PerformOutbound(const OutboundRequest& request) {
  CurlGlobalInit();
  CurlHandle c(curl_easy_init());
  if (c == nullptr) {
    OutboundResult failed;
    failed.code = CURLE_FAILED_INIT;
    failed.error = "curl_easy_init failed";
    return failed;
  }
  return PerformOutbound(c.get(), request);
}

}  // namespace mailroom
