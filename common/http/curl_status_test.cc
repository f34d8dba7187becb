#include "common/http/curl_status.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;

// Every CURLcode of libcurl 7.88, each with its kind: a new code, or a code moved from one kind
// to another, fails here first (the switch itself is checked by -Werror=switch).
TEST(CurlStatusTest, EveryCurlCodeIsListedWithItsKind) {
  const std::vector<std::pair<CURLcode, CurlFailure>> table = {
      {CURLE_OK, CurlFailure::kNone},
      {CURLE_COULDNT_RESOLVE_PROXY, CurlFailure::kUnreachable},
      {CURLE_COULDNT_RESOLVE_HOST, CurlFailure::kUnreachable},
      {CURLE_COULDNT_CONNECT, CurlFailure::kUnreachable},
      {CURLE_OPERATION_TIMEDOUT, CurlFailure::kUnreachable},
      {CURLE_GOT_NOTHING, CurlFailure::kUnreachable},
      {CURLE_WEIRD_SERVER_REPLY, CurlFailure::kUnreachable},
      {CURLE_NO_CONNECTION_AVAILABLE, CurlFailure::kUnreachable},
      {CURLE_PROXY, CurlFailure::kUnreachable},
      {CURLE_QUIC_CONNECT_ERROR, CurlFailure::kUnreachable},
      {CURLE_HTTP3, CurlFailure::kUnreachable},
      {CURLE_TOO_MANY_REDIRECTS, CurlFailure::kUnreachable},
      {CURLE_REMOTE_ACCESS_DENIED, CurlFailure::kUnreachable},
      {CURLE_LOGIN_DENIED, CurlFailure::kUnreachable},
      {CURLE_AUTH_ERROR, CurlFailure::kUnreachable},
      {CURLE_SSL_CONNECT_ERROR, CurlFailure::kUnreachable},
      {CURLE_USE_SSL_FAILED, CurlFailure::kUnreachable},
      {CURLE_PEER_FAILED_VERIFICATION, CurlFailure::kUnreachable},
      {CURLE_SSL_CACERT_BADFILE, CurlFailure::kUnreachable},
      {CURLE_SSL_CRL_BADFILE, CurlFailure::kUnreachable},
      {CURLE_SSL_CERTPROBLEM, CurlFailure::kUnreachable},
      {CURLE_SSL_CLIENTCERT, CurlFailure::kUnreachable},
      {CURLE_SSL_CIPHER, CurlFailure::kUnreachable},
      {CURLE_SSL_ENGINE_NOTFOUND, CurlFailure::kUnreachable},
      {CURLE_SSL_ENGINE_SETFAILED, CurlFailure::kUnreachable},
      {CURLE_SSL_ENGINE_INITFAILED, CurlFailure::kUnreachable},
      {CURLE_SSL_ISSUER_ERROR, CurlFailure::kUnreachable},
      {CURLE_SSL_PINNEDPUBKEYNOTMATCH, CurlFailure::kUnreachable},
      {CURLE_SSL_INVALIDCERTSTATUS, CurlFailure::kUnreachable},
      {CURLE_SSL_SHUTDOWN_FAILED, CurlFailure::kUnreachable},
      {CURLE_UNSUPPORTED_PROTOCOL, CurlFailure::kUnreachable},
      {CURLE_FAILED_INIT, CurlFailure::kUnreachable},
      {CURLE_URL_MALFORMAT, CurlFailure::kUnreachable},
      {CURLE_NOT_BUILT_IN, CurlFailure::kUnreachable},
      {CURLE_INTERFACE_FAILED, CurlFailure::kUnreachable},
      {CURLE_UNKNOWN_OPTION, CurlFailure::kUnreachable},
      {CURLE_SETOPT_OPTION_SYNTAX, CurlFailure::kUnreachable},
      {CURLE_BAD_FUNCTION_ARGUMENT, CurlFailure::kUnreachable},
      {CURLE_FUNCTION_NOT_FOUND, CurlFailure::kUnreachable},
      {CURLE_RECURSIVE_API_CALL, CurlFailure::kUnreachable},
      {CURLE_UNRECOVERABLE_POLL, CurlFailure::kUnreachable},
      {CURLE_SEND_ERROR, CurlFailure::kCutShort},
      {CURLE_RECV_ERROR, CurlFailure::kCutShort},
      {CURLE_PARTIAL_FILE, CurlFailure::kCutShort},
      {CURLE_AGAIN, CurlFailure::kCutShort},
      {CURLE_HTTP2, CurlFailure::kCutShort},
      {CURLE_HTTP2_STREAM, CurlFailure::kCutShort},
      {CURLE_READ_ERROR, CurlFailure::kCutShort},
      {CURLE_WRITE_ERROR, CurlFailure::kCutShort},
      {CURLE_UPLOAD_FAILED, CurlFailure::kCutShort},
      {CURLE_SEND_FAIL_REWIND, CurlFailure::kCutShort},
      {CURLE_CHUNK_FAILED, CurlFailure::kCutShort},
      {CURLE_BAD_CONTENT_ENCODING, CurlFailure::kCutShort},
      {CURLE_HTTP_POST_ERROR, CurlFailure::kCutShort},
      {CURLE_OUT_OF_MEMORY, CurlFailure::kCutShort},
      {CURLE_ABORTED_BY_CALLBACK, CurlFailure::kCutShort},
      {CURLE_REMOTE_DISK_FULL, CurlFailure::kCutShort},
      {CURLE_FILESIZE_EXCEEDED, CurlFailure::kTooLarge},
      {CURLE_FTP_ACCEPT_FAILED, CurlFailure::kUnexpected},
      {CURLE_FTP_WEIRD_PASS_REPLY, CurlFailure::kUnexpected},
      {CURLE_FTP_ACCEPT_TIMEOUT, CurlFailure::kUnexpected},
      {CURLE_FTP_WEIRD_PASV_REPLY, CurlFailure::kUnexpected},
      {CURLE_FTP_WEIRD_227_FORMAT, CurlFailure::kUnexpected},
      {CURLE_FTP_CANT_GET_HOST, CurlFailure::kUnexpected},
      {CURLE_FTP_COULDNT_SET_TYPE, CurlFailure::kUnexpected},
      {CURLE_FTP_COULDNT_RETR_FILE, CurlFailure::kUnexpected},
      {CURLE_FTP_PORT_FAILED, CurlFailure::kUnexpected},
      {CURLE_FTP_COULDNT_USE_REST, CurlFailure::kUnexpected},
      {CURLE_FTP_PRET_FAILED, CurlFailure::kUnexpected},
      {CURLE_FTP_BAD_FILE_LIST, CurlFailure::kUnexpected},
      {CURLE_QUOTE_ERROR, CurlFailure::kUnexpected},
      {CURLE_HTTP_RETURNED_ERROR, CurlFailure::kUnexpected},
      {CURLE_RANGE_ERROR, CurlFailure::kUnexpected},
      {CURLE_BAD_DOWNLOAD_RESUME, CurlFailure::kUnexpected},
      {CURLE_FILE_COULDNT_READ_FILE, CurlFailure::kUnexpected},
      {CURLE_LDAP_CANNOT_BIND, CurlFailure::kUnexpected},
      {CURLE_LDAP_SEARCH_FAILED, CurlFailure::kUnexpected},
      {CURLE_TFTP_NOTFOUND, CurlFailure::kUnexpected},
      {CURLE_TFTP_PERM, CurlFailure::kUnexpected},
      {CURLE_TFTP_ILLEGAL, CurlFailure::kUnexpected},
      {CURLE_TFTP_UNKNOWNID, CurlFailure::kUnexpected},
      {CURLE_TFTP_NOSUCHUSER, CurlFailure::kUnexpected},
      {CURLE_REMOTE_FILE_EXISTS, CurlFailure::kUnexpected},
      {CURLE_REMOTE_FILE_NOT_FOUND, CurlFailure::kUnexpected},
      {CURLE_SSH, CurlFailure::kUnexpected},
      {CURLE_RTSP_CSEQ_ERROR, CurlFailure::kUnexpected},
      {CURLE_RTSP_SESSION_ERROR, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE20, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE24, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE29, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE32, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE40, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE44, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE46, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE50, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE51, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE57, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE62, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE75, CurlFailure::kUnexpected},
      {CURLE_OBSOLETE76, CurlFailure::kUnexpected},
  };
  std::set<int> listed;
  for (const auto& [code, kind] : table) {
    EXPECT_TRUE(listed.insert(code).second) << "listed twice: " << code;
    EXPECT_EQ(ClassifyCurlCode(code), kind) << code;
  }
  for (int c = 0; c < CURL_LAST; ++c) EXPECT_EQ(listed.count(c), 1u) << "not listed: " << c;
  EXPECT_EQ(ClassifyCurlCode(CURL_LAST), CurlFailure::kUnexpected);
}

// The message says which code it was, never more than curl's own text.
TEST(CurlStatusTest, TheErrorTextIsCurlsWordsAndTheCode) {
  EXPECT_EQ(CurlErrorText(CURLE_COULDNT_CONNECT, "Failed to connect to x port 1"),
            "Failed to connect to x port 1 (curl 7)");
  EXPECT_THAT(CurlErrorText(CURLE_COULDNT_RESOLVE_HOST, ""),
              HasSubstr(absl::StrCat(curl_easy_strerror(CURLE_COULDNT_RESOLVE_HOST), " (curl 6)")));
}

}  // namespace
}  // namespace mailroom
