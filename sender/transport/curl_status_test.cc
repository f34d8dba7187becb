// The map from libcurl outcomes (CURLcode, SMTP replies) to Status.
#include "sender/transport/curl_status.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http/curl_status.h"
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

// Each kind of CURLcode (ClassifyCurlCode) gets its delivery status, and the message names the
// code, never more than curl's own text.
TEST(CurlStatusTest, EveryCurlCodeGetsTheStatusOfItsKind) {
  for (int c = 0; c <= CURL_LAST; ++c) {
    const CURLcode code = static_cast<CURLcode>(c);
    const absl::Status st = CurlStatus(code, "detail");
    switch (ClassifyCurlCode(code)) {
      case CurlFailure::kNone: EXPECT_TRUE(st.ok()) << code; break;
      case CurlFailure::kUnreachable: EXPECT_TRUE(IsProviderError(st)) << code << ": " << st; break;
      case CurlFailure::kCutShort:
        EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << code;
        EXPECT_FALSE(IsProviderError(st)) << code;
        break;
      case CurlFailure::kTooLarge:
        EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << code;
        break;
      case CurlFailure::kUnexpected:
        EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << code;
        break;
    }
    if (!st.ok()) {
      EXPECT_EQ(std::string(st.message()), absl::StrCat("detail (curl ", code, ")"));
    }
  }
}

}  // namespace
}  // namespace mailroom
