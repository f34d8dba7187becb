#include "sender/curl_util.h"

#include <mutex>

#include "absl/strings/str_cat.h"

namespace mailroom {

void CurlGlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

absl::Status CurlStatus(CURLcode code, long response_code, const std::string& detail, bool smtp) {
  const std::string what =
      absl::StrCat(detail.empty() ? curl_easy_strerror(code) : detail,
                   response_code > 0 ? absl::StrCat(" (reply ", response_code, ")") : "");
  if (code == CURLE_OK) return absl::OkStatus();
  if (smtp && response_code >= 400 && response_code < 500) {
    return absl::UnavailableError(absl::StrCat("smtp: ", what));
  }
  if (smtp && response_code >= 500 && response_code < 600) {
    if (response_code == 535 || response_code == 530) {
      return absl::PermissionDeniedError(absl::StrCat("smtp authentication: ", what));
    }
    return absl::InvalidArgumentError(absl::StrCat("smtp: ", what));
  }
  switch (code) {
    // Reachability and transient transfer problems: a retry may succeed.
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_AGAIN:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_READ_ERROR:
    case CURLE_WRITE_ERROR:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_ABORTED_BY_CALLBACK:
      return absl::UnavailableError(what);
    // Credentials refused.
    case CURLE_LOGIN_DENIED:
    case CURLE_AUTH_ERROR:
      return absl::PermissionDeniedError(what);
    // TLS required but not offered, certificate problems, bad configuration: no retry helps.
    case CURLE_USE_SSL_FAILED:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_UNKNOWN_OPTION:
    case CURLE_FILESIZE_EXCEEDED:
      return absl::FailedPreconditionError(what);
    default:
      return absl::UnavailableError(what);
  }
}

}  // namespace mailroom
