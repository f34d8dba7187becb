#include "common/http/curl_status.h"

#include "absl/strings/str_cat.h"

namespace mailroom {

// A table of libcurl's codes, one case each (curl_status_test checks every code is listed).
// NOLINTNEXTLINE(readability-function-size)
CurlFailure ClassifyCurlCode(CURLcode code) {
  switch (code) {
    case CURLE_OK: return CurlFailure::kNone;

    // The server cannot be reached, or not safely, or refuses us.
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_NO_CONNECTION_AVAILABLE:
    case CURLE_PROXY:
    case CURLE_QUIC_CONNECT_ERROR:
    case CURLE_HTTP3:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_REMOTE_ACCESS_DENIED:
    case CURLE_LOGIN_DENIED:
    case CURLE_AUTH_ERROR:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_USE_SSL_FAILED:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_SHUTDOWN_FAILED:
    // Our configuration or build: every request would fail the same way.
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_FAILED_INIT:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_INTERFACE_FAILED:
    case CURLE_UNKNOWN_OPTION:
    case CURLE_SETOPT_OPTION_SYNTAX:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_FUNCTION_NOT_FOUND:
    case CURLE_RECURSIVE_API_CALL:
    case CURLE_UNRECOVERABLE_POLL: return CurlFailure::kUnreachable;

    // A transfer cut short (a kept-alive connection closed by the server, a reset): this
    // request may be made again; the next one opens a fresh connection.
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_AGAIN:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_READ_ERROR:
    case CURLE_WRITE_ERROR:
    case CURLE_UPLOAD_FAILED:
    case CURLE_SEND_FAIL_REWIND:
    case CURLE_CHUNK_FAILED:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_HTTP_POST_ERROR:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_ABORTED_BY_CALLBACK:
    case CURLE_REMOTE_DISK_FULL: return CurlFailure::kCutShort;

    // This request is too large for the server.
    case CURLE_FILESIZE_EXCEEDED: return CurlFailure::kTooLarge;

    // Codes of protocols and options we never use (FTP, TFTP, LDAP, RTSP, SSH, ranges,
    // CURLOPT_FAILONERROR) and retired codes: a bug if seen.
    case CURLE_FTP_ACCEPT_FAILED:
    case CURLE_FTP_WEIRD_PASS_REPLY:
    case CURLE_FTP_ACCEPT_TIMEOUT:
    case CURLE_FTP_WEIRD_PASV_REPLY:
    case CURLE_FTP_WEIRD_227_FORMAT:
    case CURLE_FTP_CANT_GET_HOST:
    case CURLE_FTP_COULDNT_SET_TYPE:
    case CURLE_FTP_COULDNT_RETR_FILE:
    case CURLE_FTP_PORT_FAILED:
    case CURLE_FTP_COULDNT_USE_REST:
    case CURLE_FTP_PRET_FAILED:
    case CURLE_FTP_BAD_FILE_LIST:
    case CURLE_QUOTE_ERROR:
    case CURLE_HTTP_RETURNED_ERROR:
    case CURLE_RANGE_ERROR:
    case CURLE_BAD_DOWNLOAD_RESUME:
    case CURLE_FILE_COULDNT_READ_FILE:
    case CURLE_LDAP_CANNOT_BIND:
    case CURLE_LDAP_SEARCH_FAILED:
    case CURLE_TFTP_NOTFOUND:
    case CURLE_TFTP_PERM:
    case CURLE_TFTP_ILLEGAL:
    case CURLE_TFTP_UNKNOWNID:
    case CURLE_TFTP_NOSUCHUSER:
    case CURLE_REMOTE_FILE_EXISTS:
    case CURLE_REMOTE_FILE_NOT_FOUND:
    case CURLE_SSH:
    case CURLE_RTSP_CSEQ_ERROR:
    case CURLE_RTSP_SESSION_ERROR:
    case CURLE_OBSOLETE20:
    case CURLE_OBSOLETE24:
    case CURLE_OBSOLETE29:
    case CURLE_OBSOLETE32:
    case CURLE_OBSOLETE40:
    case CURLE_OBSOLETE44:
    case CURLE_OBSOLETE46:
    case CURLE_OBSOLETE50:
    case CURLE_OBSOLETE51:
    case CURLE_OBSOLETE57:
    case CURLE_OBSOLETE62:
    case CURLE_OBSOLETE75:
    case CURLE_OBSOLETE76:
    case CURL_LAST: return CurlFailure::kUnexpected;
  }
  // A code newer than these headers.
  return CurlFailure::kUnexpected;
}

std::string CurlErrorText(CURLcode code, const std::string& detail) {
  return absl::StrCat(detail.empty() ? curl_easy_strerror(code) : detail, " (curl ",
                      static_cast<int>(code), ")");
}

}  // namespace mailroom
