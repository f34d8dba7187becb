// The map from libcurl outcomes (CURLcode, SMTP replies) to Status.
#include "sender/transport/curl_status.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sender/transport/transport.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;

TEST(SmtpStatusTest, TheReplyAndTheCommandItAnsweredDecide) {
  auto status = [](const char* command, long code, const char* reply) {
    return SmtpStatus(CURLE_SEND_ERROR, code, SmtpTrace{command, reply, false}, "curl says");
  };
  auto rcpt = status("RCPT", 550, "550 5.1.1 <x@example.test>: user unknown");
  EXPECT_EQ(rcpt.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rcpt.message(), "smtp RCPT: 550 5.1.1 <x@example.test>: user unknown");
  EXPECT_EQ(status("RCPT", 450, "450 4.2.1 busy").code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(IsProviderError(status("RCPT", 450, "450 4.2.1 busy")));
  EXPECT_EQ(status("DATA", 554, "554 5.7.1 spam").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status("MAIL", 552, "552 5.3.4 too big").code(), absl::StatusCode::kInvalidArgument);
  for (const auto& provider :
       {status("AUTH", 535, "535 5.7.8 Authentication credentials invalid"),
        status("AUTH", 534, "534 5.7.9 Authentication mechanism is too weak"),
        status("MAIL", 530, "530 5.7.0 Authentication required"),
        status("AUTH", 454, "454 4.7.0 Temporary authentication failure"),
        status("STARTTLS", 454, "454 4.7.0 TLS not available"),
        status("RCPT", 421, "421 4.3.2 Service shutting down"),
        status("MAIL", 550, "550 5.7.1 Sender address rejected"),
        status("", 554, "554 5.7.1 No service for you"), status("EHLO", 550, "550 go away")}) {
    EXPECT_TRUE(IsProviderError(provider)) << provider;
  }
  // A 5.1.x enhanced status on RCPT rejects the address itself; others do not.
  EXPECT_TRUE(IsRecipientRejected(rcpt));
  EXPECT_TRUE(IsRecipientRejected(status("RCPT", 550, "550-5.1.1 no such user")));
  EXPECT_TRUE(IsRecipientRejected(status("RCPT", 553, "553 5.1.3 bad address syntax")));
  EXPECT_TRUE(IsRecipientRejected(status("RCPT", 556, "556 5.1.10 null MX")));
  EXPECT_FALSE(IsRecipientRejected(status("RCPT", 550, "550 5.7.1 relaying denied")));
  EXPECT_FALSE(IsRecipientRejected(status("RCPT", 550, "550 user unknown")));
  EXPECT_FALSE(IsRecipientRejected(status("RCPT", 550, "550 5.1.1000 odd")));
  EXPECT_FALSE(IsRecipientRejected(status("RCPT", 450, "450 4.1.1 try later")));
  EXPECT_FALSE(IsRecipientRejected(status("DATA", 550, "550 5.1.1 user unknown")));
  EXPECT_FALSE(IsRecipientRejected(status("MAIL", 553, "553 5.1.8 bad sender domain")));
  EXPECT_FALSE(IsRecipientRejected(status("RCPT", 550, "")));
  // The reply text shown is the server's when the trace has it, else the code and curl's text.
  EXPECT_EQ(status("RCPT", 550, "").message(), "smtp RCPT: 550 curl says");
}

TEST(MaybeSentTest, AFailureAfterTheRequestLeftMayHaveBeenSent) {
  // HTTP: the request left and no status refused it.
  for (CURLcode c :
       {CURLE_OPERATION_TIMEDOUT, CURLE_GOT_NOTHING, CURLE_RECV_ERROR, CURLE_SEND_ERROR,
        CURLE_PARTIAL_FILE, CURLE_HTTP2_STREAM, CURLE_BAD_CONTENT_ENCODING}) {
    absl::Status st = HttpTransferStatus(c, "", /*request_sent=*/true, 0);
    EXPECT_TRUE(IsMaybeSent(st)) << c;
    EXPECT_EQ(st.code(), CurlStatus(c, "").code()) << c;  // the kind is kept
    EXPECT_EQ(IsProviderError(st), IsProviderError(CurlStatus(c, ""))) << c;
    EXPECT_TRUE(IsMaybeSent(HttpTransferStatus(c, "", true, 200))) << c;   // 2xx, body cut
    EXPECT_FALSE(IsMaybeSent(HttpTransferStatus(c, "", false, 0))) << c;   // never left
    EXPECT_FALSE(IsMaybeSent(HttpTransferStatus(c, "", true, 400))) << c;  // refused
    EXPECT_FALSE(IsMaybeSent(HttpTransferStatus(c, "", true, 503))) << c;
  }
  EXPECT_FALSE(IsMaybeSent(HttpTransferStatus(CURLE_COULDNT_CONNECT, "", false, 0)));
  // A refused rewind: libcurl wanted to send a body it had read again (a kept-alive connection
  // closed with no answer). The request left, whatever the counters of the new connection say;
  // it is a dropped connection for this email, not the provider down.
  absl::Status rewind = HttpTransferStatus(CURLE_SEND_FAIL_REWIND, "", false, 0);
  EXPECT_TRUE(IsMaybeSent(rewind)) << rewind;
  EXPECT_EQ(rewind.code(), absl::StatusCode::kUnavailable) << rewind;
  EXPECT_FALSE(IsProviderError(rewind)) << rewind;
  EXPECT_FALSE(IsMaybeSent(HttpTransferStatus(CURLE_SEND_FAIL_REWIND, "", true, 400)));
  // SMTP: only once the whole message went out after DATA, and no 4xx/5xx answered it.
  SmtpTrace data;
  data.command = "DATA";
  data.reply = "354 end with <CR><LF>.<CR><LF>";
  data.message_sent = true;
  EXPECT_TRUE(IsMaybeSent(SmtpStatus(CURLE_OPERATION_TIMEDOUT, 354, data, "")));
  EXPECT_TRUE(IsMaybeSent(SmtpStatus(CURLE_RECV_ERROR, 354, data, "")));
  EXPECT_FALSE(IsMaybeSent(SmtpStatus(CURLE_RECV_ERROR, 451, data, "")));  // refused
  data.message_sent = false;  // cut before the end: the server discards it
  EXPECT_FALSE(IsMaybeSent(SmtpStatus(CURLE_OPERATION_TIMEDOUT, 354, data, "")));
  SmtpTrace rcpt;
  rcpt.command = "RCPT";
  rcpt.message_sent = true;
  EXPECT_FALSE(IsMaybeSent(SmtpStatus(CURLE_OPERATION_TIMEDOUT, 250, rcpt, "")));
  EXPECT_FALSE(IsMaybeSent(absl::OkStatus()));
}

TEST(CurlStatusTest, ReachabilityTlsAndConfigurationAreProviderErrors) {
  for (CURLcode c : {CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_OPERATION_TIMEDOUT,
                     CURLE_PEER_FAILED_VERIFICATION, CURLE_USE_SSL_FAILED, CURLE_SSL_CONNECT_ERROR,
                     CURLE_LOGIN_DENIED, CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL}) {
    EXPECT_TRUE(IsProviderError(CurlStatus(c, ""))) << c;
  }
  for (CURLcode c : {CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_PARTIAL_FILE}) {
    auto st = CurlStatus(c, "");
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << c;
    EXPECT_FALSE(IsProviderError(st)) << c;
  }
  EXPECT_EQ(CurlStatus(CURLE_FILESIZE_EXCEEDED, "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CurlStatus(CURLE_TFTP_PERM, "").code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(CurlStatus(CURLE_OK, "").ok());
  // Every code has a deliberate answer (the switch is exhaustive; -Werror=switch).
  for (int c = 0; c < CURL_LAST; ++c) (void)CurlStatus(static_cast<CURLcode>(c), "");
}

// Every CURLcode of libcurl 7.88, each with the answer it must get: a new code, or a code moved
// from one kind to another, fails here first (the switch itself is checked by -Werror=switch).
TEST(CurlStatusTest, EveryCurlCodeIsListedWithItsKind) {
  enum Kind { kOk, kProvider, kRetryThisMessage, kRejectThisMessage, kBug };
  const std::vector<std::pair<CURLcode, Kind>> table = {
      {CURLE_OK, kOk},
      {CURLE_COULDNT_RESOLVE_PROXY, kProvider},
      {CURLE_COULDNT_RESOLVE_HOST, kProvider},
      {CURLE_COULDNT_CONNECT, kProvider},
      {CURLE_OPERATION_TIMEDOUT, kProvider},
      {CURLE_GOT_NOTHING, kProvider},
      {CURLE_WEIRD_SERVER_REPLY, kProvider},
      {CURLE_NO_CONNECTION_AVAILABLE, kProvider},
      {CURLE_PROXY, kProvider},
      {CURLE_QUIC_CONNECT_ERROR, kProvider},
      {CURLE_HTTP3, kProvider},
      {CURLE_TOO_MANY_REDIRECTS, kProvider},
      {CURLE_REMOTE_ACCESS_DENIED, kProvider},
      {CURLE_LOGIN_DENIED, kProvider},
      {CURLE_AUTH_ERROR, kProvider},
      {CURLE_SSL_CONNECT_ERROR, kProvider},
      {CURLE_USE_SSL_FAILED, kProvider},
      {CURLE_PEER_FAILED_VERIFICATION, kProvider},
      {CURLE_SSL_CACERT_BADFILE, kProvider},
      {CURLE_SSL_CRL_BADFILE, kProvider},
      {CURLE_SSL_CERTPROBLEM, kProvider},
      {CURLE_SSL_CLIENTCERT, kProvider},
      {CURLE_SSL_CIPHER, kProvider},
      {CURLE_SSL_ENGINE_NOTFOUND, kProvider},
      {CURLE_SSL_ENGINE_SETFAILED, kProvider},
      {CURLE_SSL_ENGINE_INITFAILED, kProvider},
      {CURLE_SSL_ISSUER_ERROR, kProvider},
      {CURLE_SSL_PINNEDPUBKEYNOTMATCH, kProvider},
      {CURLE_SSL_INVALIDCERTSTATUS, kProvider},
      {CURLE_SSL_SHUTDOWN_FAILED, kProvider},
      {CURLE_UNSUPPORTED_PROTOCOL, kProvider},
      {CURLE_FAILED_INIT, kProvider},
      {CURLE_URL_MALFORMAT, kProvider},
      {CURLE_NOT_BUILT_IN, kProvider},
      {CURLE_INTERFACE_FAILED, kProvider},
      {CURLE_UNKNOWN_OPTION, kProvider},
      {CURLE_SETOPT_OPTION_SYNTAX, kProvider},
      {CURLE_BAD_FUNCTION_ARGUMENT, kProvider},
      {CURLE_FUNCTION_NOT_FOUND, kProvider},
      {CURLE_RECURSIVE_API_CALL, kProvider},
      {CURLE_UNRECOVERABLE_POLL, kProvider},
      {CURLE_SEND_ERROR, kRetryThisMessage},
      {CURLE_RECV_ERROR, kRetryThisMessage},
      {CURLE_PARTIAL_FILE, kRetryThisMessage},
      {CURLE_AGAIN, kRetryThisMessage},
      {CURLE_HTTP2, kRetryThisMessage},
      {CURLE_HTTP2_STREAM, kRetryThisMessage},
      {CURLE_READ_ERROR, kRetryThisMessage},
      {CURLE_WRITE_ERROR, kRetryThisMessage},
      {CURLE_UPLOAD_FAILED, kRetryThisMessage},
      {CURLE_SEND_FAIL_REWIND, kRetryThisMessage},
      {CURLE_CHUNK_FAILED, kRetryThisMessage},
      {CURLE_BAD_CONTENT_ENCODING, kRetryThisMessage},
      {CURLE_HTTP_POST_ERROR, kRetryThisMessage},
      {CURLE_OUT_OF_MEMORY, kRetryThisMessage},
      {CURLE_ABORTED_BY_CALLBACK, kRetryThisMessage},
      {CURLE_REMOTE_DISK_FULL, kRetryThisMessage},
      {CURLE_FILESIZE_EXCEEDED, kRejectThisMessage},
      {CURLE_FTP_ACCEPT_FAILED, kBug},
      {CURLE_FTP_WEIRD_PASS_REPLY, kBug},
      {CURLE_FTP_ACCEPT_TIMEOUT, kBug},
      {CURLE_FTP_WEIRD_PASV_REPLY, kBug},
      {CURLE_FTP_WEIRD_227_FORMAT, kBug},
      {CURLE_FTP_CANT_GET_HOST, kBug},
      {CURLE_FTP_COULDNT_SET_TYPE, kBug},
      {CURLE_FTP_COULDNT_RETR_FILE, kBug},
      {CURLE_FTP_PORT_FAILED, kBug},
      {CURLE_FTP_COULDNT_USE_REST, kBug},
      {CURLE_FTP_PRET_FAILED, kBug},
      {CURLE_FTP_BAD_FILE_LIST, kBug},
      {CURLE_QUOTE_ERROR, kBug},
      {CURLE_HTTP_RETURNED_ERROR, kBug},
      {CURLE_RANGE_ERROR, kBug},
      {CURLE_BAD_DOWNLOAD_RESUME, kBug},
      {CURLE_FILE_COULDNT_READ_FILE, kBug},
      {CURLE_LDAP_CANNOT_BIND, kBug},
      {CURLE_LDAP_SEARCH_FAILED, kBug},
      {CURLE_TFTP_NOTFOUND, kBug},
      {CURLE_TFTP_PERM, kBug},
      {CURLE_TFTP_ILLEGAL, kBug},
      {CURLE_TFTP_UNKNOWNID, kBug},
      {CURLE_TFTP_NOSUCHUSER, kBug},
      {CURLE_REMOTE_FILE_EXISTS, kBug},
      {CURLE_REMOTE_FILE_NOT_FOUND, kBug},
      {CURLE_SSH, kBug},
      {CURLE_RTSP_CSEQ_ERROR, kBug},
      {CURLE_RTSP_SESSION_ERROR, kBug},
      {CURLE_OBSOLETE20, kBug},
      {CURLE_OBSOLETE24, kBug},
      {CURLE_OBSOLETE29, kBug},
      {CURLE_OBSOLETE32, kBug},
      {CURLE_OBSOLETE40, kBug},
      {CURLE_OBSOLETE44, kBug},
      {CURLE_OBSOLETE46, kBug},
      {CURLE_OBSOLETE50, kBug},
      {CURLE_OBSOLETE51, kBug},
      {CURLE_OBSOLETE57, kBug},
      {CURLE_OBSOLETE62, kBug},
      {CURLE_OBSOLETE75, kBug},
      {CURLE_OBSOLETE76, kBug},
  };
  std::set<int> listed;
  for (const auto& [code, kind] : table) {
    EXPECT_TRUE(listed.insert(code).second) << "listed twice: " << code;
    absl::Status st = CurlStatus(code, "detail");
    switch (kind) {
      case kOk: EXPECT_TRUE(st.ok()) << code; break;
      case kProvider: EXPECT_TRUE(IsProviderError(st)) << code << ": " << st; break;
      case kRetryThisMessage:
        EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << code;
        EXPECT_FALSE(IsProviderError(st)) << code;
        break;
      case kRejectThisMessage:
        EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << code;
        break;
      case kBug: EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << code; break;
    }
    // The message says which code it was, never more than curl's own text.
    if (!st.ok()) {
      EXPECT_THAT(std::string(st.message()), HasSubstr(absl::StrCat("(curl ", code, ")")));
    }
  }
  for (int c = 0; c < CURL_LAST; ++c) EXPECT_EQ(listed.count(c), 1u) << "not listed: " << c;
  EXPECT_EQ(CurlStatus(CURL_LAST, "").code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace mailroom
